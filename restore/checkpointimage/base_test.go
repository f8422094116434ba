// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/containerd/containerd/v2/core/images"
)

// memImages is an images.Store over a map.
type memImages map[string]images.Image

func (m memImages) Get(_ context.Context, name string) (images.Image, error) {
	img, ok := m[name]
	if !ok {
		return images.Image{}, errdefs.ErrNotFound
	}
	return img, nil
}

func (m memImages) List(context.Context, ...string) ([]images.Image, error) {
	var all []images.Image
	for _, img := range m {
		all = append(all, img)
	}
	return all, nil
}

func (m memImages) Create(_ context.Context, img images.Image) (images.Image, error) {
	m[img.Name] = img
	return img, nil
}

func (m memImages) Update(ctx context.Context, img images.Image, _ ...string) (images.Image, error) {
	return m.Create(ctx, img)
}

func (m memImages) Delete(_ context.Context, name string, _ ...images.DeleteOpt) error {
	delete(m, name)
	return nil
}

func TestResolveBase(t *testing.T) {
	ctx := context.Background()
	cs := newStore(t)
	cfg := putJSON(t, cs, ocispec.MediaTypeImageConfig, ocispec.Image{Platform: platforms.DefaultSpec()})
	manifest := putJSON(t, cs, ocispec.MediaTypeImageManifest, ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest, Config: cfg})
	p := platforms.DefaultSpec()
	child := manifest
	child.Platform = &p
	index := putJSON(t, cs, ocispec.MediaTypeImageIndex, ocispec.Index{MediaType: ocispec.MediaTypeImageIndex, Manifests: []ocispec.Descriptor{child}})
	other := putJSON(t, cs, ocispec.MediaTypeImageManifest, ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest,
		Config: putJSON(t, cs, ocispec.MediaTypeImageConfig, ocispec.Image{Platform: p, Author: "other"})})

	const name = "registry.example/engine:1.0"
	for _, tc := range []struct {
		name     string
		local    []images.Image
		base     BaseRef
		pullErr  error
		pulled   *ocispec.Descriptor // what the pull gets, manifest if nil
		want     string              // name of the image returned
		wantPull string              // reference pulled, if any
		wantErr  string
		errKind  error
	}{
		{
			name:  "by manifest digest under another name",
			local: []images.Image{{Name: "mirror.local/engine:copy", Target: manifest}},
			base:  BaseRef{Name: name, Ref: "registry.example/engine@" + manifest.Digest.String()},
			want:  "mirror.local/engine:copy",
		},
		{
			name:  "by config digest (CRI image ID)",
			local: []images.Image{{Name: "mirror.local/engine:copy", Target: manifest}},
			base:  BaseRef{Name: name, Ref: cfg.Digest.String()},
			want:  "mirror.local/engine:copy",
		},
		{
			name:  "by digest of a manifest in an index",
			local: []images.Image{{Name: "mirror.local/engine:multi", Target: index}},
			base:  BaseRef{Name: name, Ref: "registry.example/engine@" + manifest.Digest.String()},
			want:  "mirror.local/engine:multi",
		},
		{
			name:  "digest match wins over name",
			local: []images.Image{{Name: name, Target: other}, {Name: "z/copy:1", Target: manifest}},
			base:  BaseRef{Name: name, Ref: "registry.example/engine@" + manifest.Digest.String()},
			want:  "z/copy:1",
		},
		{
			name:  "by Podman's image ID (a bare config digest)",
			local: []images.Image{{Name: "mirror.local/engine:copy", Target: manifest}},
			base:  BaseRef{Name: name, Ref: cfg.Digest.Encoded()},
			want:  "mirror.local/engine:copy",
		},
		{
			name:     "a local image of that name but another digest is not it: pulled by pinned reference",
			local:    []images.Image{{Name: name, Target: other}},
			base:     BaseRef{Name: name, Ref: "registry.example/engine@" + manifest.Digest.String()},
			want:     "registry.example/engine@" + manifest.Digest.String(),
			wantPull: "registry.example/engine@" + manifest.Digest.String(),
		},
		{
			name:    "no pinned digest: refused, not resolved by name",
			local:   []images.Image{{Name: name, Target: manifest}},
			base:    BaseRef{Name: name},
			wantErr: "without a digest",
			errKind: errdefs.ErrInvalidArgument,
		},
		{
			name:     "pulled by name, another image by now: refused",
			base:     BaseRef{Name: name, Ref: cfg.Digest.String()},
			pulled:   &other,
			wantPull: name,
			wantErr:  "does not have the pinned digest " + cfg.Digest.String(),
			errKind:  errdefs.ErrFailedPrecondition,
		},
		{
			name:     "absent: pulled by pinned reference",
			base:     BaseRef{Name: name, Ref: "registry.example/engine@" + manifest.Digest.String()},
			want:     "registry.example/engine@" + manifest.Digest.String(),
			wantPull: "registry.example/engine@" + manifest.Digest.String(),
		},
		{
			name:     "absent: pulled by name when no repository is pinned",
			base:     BaseRef{Name: name, Ref: cfg.Digest.String()},
			want:     name,
			wantPull: name,
		},
		{
			name:     "absent and registry unreachable",
			base:     BaseRef{Name: name, Ref: cfg.Digest.String()},
			pullErr:  errors.New("dial tcp: lookup registry.example: no such host"),
			wantPull: name,
			wantErr:  "of the checkpoint is not in the local image store and pulling registry.example/engine:1.0 failed: dial tcp",
			errKind:  errdefs.ErrNotFound,
		},
		{
			name:    "nothing named",
			wantErr: "names no base image",
			errKind: errdefs.ErrInvalidArgument,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := memImages{}
			for _, img := range tc.local {
				is[img.Name] = img
			}
			var pulled string
			pull := func(_ context.Context, ref string) (images.Image, error) {
				pulled = ref
				if tc.pullErr != nil {
					return images.Image{}, tc.pullErr
				}
				if tc.pulled != nil {
					return images.Image{Name: ref, Target: *tc.pulled}, nil
				}
				return images.Image{Name: ref, Target: manifest}, nil
			}
			img, err := ResolveBase(ctx, is, cs, platforms.Default(), tc.base, pull)
			if pulled != tc.wantPull {
				t.Errorf("pulled %q, want %q", pulled, tc.wantPull)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				if !errors.Is(err, tc.errKind) {
					t.Fatalf("error %v is not %v", err, tc.errKind)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if img.Name != tc.want {
				t.Fatalf("resolved %s, want %s", img.Name, tc.want)
			}
		})
	}
}

func TestResolveBaseWithoutPuller(t *testing.T) {
	base := BaseRef{Name: "base:1", Ref: "base@sha256:" + strings.Repeat("0", 64)}
	_, err := ResolveBase(context.Background(), memImages{}, newStore(t), platforms.Default(), base, nil)
	if !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "base image base:1 (base@sha256:0000") || !strings.Contains(err.Error(), "is not in the local image store") {
		t.Fatalf("got %v", err)
	}
}
