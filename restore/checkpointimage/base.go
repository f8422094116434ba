// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/containerd/platforms"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
)

// Puller fetches the image ref into the local store and returns it.
type Puller func(ctx context.Context, ref string) (images.Image, error)

// BaseRef is how a checkpoint names the image it was taken on.
type BaseRef struct {
	// Name is the image name, e.g. docker.io/library/nginx:1.27.
	Name string
	// Ref is the pinned reference, e.g. docker.io/library/nginx@sha256:...,
	// or a bare digest (CRI records the image ID there).
	Ref string
}

// BaseRefFromConfig returns the base image named by a checkpoint's config.dump.
func BaseRefFromConfig(cfg *crmetadata.ContainerConfig) BaseRef {
	name := cfg.RootfsImageName
	if name == "" {
		name = cfg.RootfsImage
	}
	return BaseRef{Name: name, Ref: cfg.RootfsImageRef}
}

// Digest returns the digest pinned by the reference, if any: of a
// NAME@DIGEST reference, a digest (CRI's image ID) or a bare hex image ID
// (Podman writes those), a config digest.
func (b BaseRef) Digest() digest.Digest {
	s := b.Ref
	if i := strings.LastIndex(s, "@"); i >= 0 {
		s = s[i+1:]
	}
	if len(s) == 64 && strings.Trim(s, "0123456789abcdef") == "" {
		s = digest.SHA256.String() + ":" + s
	}
	d, err := digest.Parse(s)
	if err != nil {
		return ""
	}
	return d
}

// pullRef is what to pull when the image is not local: the pinned
// reference when it names a repository, else the name (the pulled image
// must then have the pinned digest).
func (b BaseRef) pullRef() string {
	if strings.Contains(b.Ref, "@") {
		return b.Ref
	}
	return b.Name
}

func (b BaseRef) String() string {
	switch {
	case b.Name != "" && b.Ref != "" && b.Ref != b.Name:
		return fmt.Sprintf("%s (%s)", b.Name, b.Ref)
	case b.Name != "":
		return b.Name
	}
	return b.Ref
}

// ResolveBase finds the base image pinned by base's digest in the local
// store, pulling it only when it is not there. It looks by digest alone
// (an image whose index, manifest or config has the pinned digest,
// whatever its name): an image that merely has the recorded name may be
// any image, and the checkpoint's rootfs diff and process would run on it.
// A base without a pinned digest is refused, and a pulled image must have
// the pinned digest. So a box that holds the base image restores without a
// registry round trip, and works offline.
func ResolveBase(ctx context.Context, is images.Store, provider content.Provider, platform platforms.MatchComparer, base BaseRef, pull Puller) (images.Image, error) {
	if base.Name == "" && base.Ref == "" {
		return images.Image{}, fmt.Errorf("checkpoint names no base image (rootfsImageName/rootfsImageRef in %s): %w",
			crmetadata.ConfigDumpFile, errdefs.ErrInvalidArgument)
	}
	d := base.Digest()
	if d == "" {
		return images.Image{}, fmt.Errorf("checkpoint names its base image %s without a digest (rootfsImageRef in %s); "+
			"a base image is found by its digest only, not by a name any image may have: %w",
			base, crmetadata.ConfigDumpFile, errdefs.ErrInvalidArgument)
	}
	img, err := findByDigest(ctx, is, provider, platform, d, base.Name)
	if err == nil {
		log.G(ctx).Infof("base image %s found in the local store by digest as %s", base, img.Name)
		return img, nil
	}
	if !errdefs.IsNotFound(err) {
		return images.Image{}, err
	}
	if pull == nil {
		return images.Image{}, fmt.Errorf("base image %s of the checkpoint is not in the local image store (no image has digest %s); load or pull it and retry: %w",
			base, d, errdefs.ErrNotFound)
	}
	ref := base.pullRef()
	log.G(ctx).Infof("base image %s is not in the local store: pulling %s", base, ref)
	img, err = pull(ctx, ref)
	if err != nil {
		return images.Image{}, fmt.Errorf("base image %s of the checkpoint is not in the local image store and pulling %s failed: %v; load or pull it and retry: %w",
			base, ref, err, errdefs.ErrNotFound)
	}
	if !hasDigest(ctx, provider, platform, img, d) {
		return images.Image{}, fmt.Errorf("base image %s of the checkpoint: %s, pulled as %s, does not have the pinned digest %s (the name now points at another image); "+
			"load the image the checkpoint was taken on and retry: %w", base, ref, img.Target.Digest, d, errdefs.ErrFailedPrecondition)
	}
	return img, nil
}

// findByDigest returns an image whose target, platform manifest or config
// has digest d, preferring one named name.
func findByDigest(ctx context.Context, is images.Store, provider content.Provider, platform platforms.MatchComparer, d digest.Digest, name string) (images.Image, error) {
	all, err := is.List(ctx)
	if err != nil {
		return images.Image{}, err
	}
	sort.Slice(all, func(i, j int) bool {
		if (all[i].Name == name) != (all[j].Name == name) {
			return all[i].Name == name
		}
		return all[i].Name < all[j].Name
	})
	for _, img := range all {
		if hasDigest(ctx, provider, platform, img, d) {
			return img, nil
		}
	}
	return images.Image{}, fmt.Errorf("no image with digest %s: %w", d, errdefs.ErrNotFound)
}

func hasDigest(ctx context.Context, provider content.Provider, platform platforms.MatchComparer, img images.Image, d digest.Digest) bool {
	if img.Target.Digest == d {
		return true
	}
	if images.IsIndexType(img.Target.MediaType) {
		if p, err := content.ReadBlob(ctx, provider, img.Target); err == nil {
			var idx ocispec.Index
			if json.Unmarshal(p, &idx) == nil {
				for _, m := range idx.Manifests {
					if m.Digest == d {
						return true
					}
				}
			}
		}
	}
	cfg, err := images.Config(ctx, provider, img.Target, platform)
	return err == nil && cfg.Digest == d
}
