// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/platforms"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/plugins/content/local"
)

type tarEntry struct {
	name string
	typ  byte
	body string
}

func makeTar(t *testing.T, entries []tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: 0o644}
		switch e.typ {
		case tar.TypeDir:
			hdr.Mode = 0o755
		case tar.TypeSymlink:
			hdr.Linkname = e.body
		case tar.TypeReg:
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func newStore(t *testing.T) content.Store {
	t.Helper()
	cs, err := local.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func putBlob(t *testing.T, cs content.Store, mediaType string, p []byte) ocispec.Descriptor {
	t.Helper()
	desc := ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(p), Size: int64(len(p))}
	if err := content.WriteBlob(context.Background(), cs, desc.Digest.String(), bytes.NewReader(p), desc); err != nil {
		t.Fatal(err)
	}
	return desc
}

func putJSON(t *testing.T, cs content.Store, mediaType string, v any) ocispec.Descriptor {
	t.Helper()
	p, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return putBlob(t, cs, mediaType, p)
}

func TestIsCheckpointAnnotated(t *testing.T) {
	for _, tc := range []struct {
		name string
		ann  map[string]string
		want bool
	}{
		{"none", nil, false},
		{"unrelated", map[string]string{"a": "b"}, false},
		{"checkpointctl", map[string]string{"org.criu.checkpoint.container.name": "c"}, true},
		{"legacy cri-o", map[string]string{legacyCheckpointAnnotation: "c"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name, ok := IsCheckpointAnnotated(tc.ann)
			if ok != tc.want || (ok && name != "c") {
				t.Fatalf("got %q, %v; want ok=%v", name, ok, tc.want)
			}
		})
	}
}

func TestDetect(t *testing.T) {
	ctx := context.Background()
	cs := newStore(t)
	cfg := putJSON(t, cs, ocispec.MediaTypeImageConfig, ocispec.Image{
		Platform: platforms.DefaultSpec(),
		RootFS:   ocispec.RootFS{Type: "layers"},
	})
	layer := putBlob(t, cs, ocispec.MediaTypeImageLayer, makeTar(t, nil))
	ann := map[string]string{"org.criu.checkpoint.container.name": "engine"}
	manifest := func(ann map[string]string, layers ...ocispec.Descriptor) ocispec.Descriptor {
		return putJSON(t, cs, ocispec.MediaTypeImageManifest, ocispec.Manifest{
			MediaType: ocispec.MediaTypeImageManifest, Config: cfg, Layers: layers, Annotations: ann,
		})
	}
	index := func(ann map[string]string, m ocispec.Descriptor) ocispec.Descriptor {
		p := platforms.DefaultSpec()
		m.Platform = &p
		return putJSON(t, cs, ocispec.MediaTypeImageIndex, ocispec.Index{
			MediaType: ocispec.MediaTypeImageIndex, Manifests: []ocispec.Descriptor{m}, Annotations: ann,
		})
	}

	for _, tc := range []struct {
		name    string
		target  ocispec.Descriptor
		want    bool
		wantErr bool
	}{
		{name: "plain image", target: manifest(nil, layer)},
		{name: "annotated manifest", target: manifest(ann, layer), want: true},
		{name: "annotated index", target: index(ann, manifest(nil, layer)), want: true},
		{name: "index of annotated manifest", target: index(nil, manifest(ann, layer)), want: true},
		{name: "two layers", target: manifest(ann, layer, layer), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ci, err := Detect(ctx, cs, images.Image{Name: "img", Target: tc.target}, platforms.Default())
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if (ci != nil) != tc.want {
				t.Fatalf("checkpoint image = %+v, want %v", ci, tc.want)
			}
			if ci != nil && (ci.Layer.Digest != layer.Digest || ci.ContainerName != "engine") {
				t.Fatalf("layer %s name %q", ci.Layer.Digest, ci.ContainerName)
			}
		})
	}
}

func TestExtractLayer(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		entries   []tarEntry
		wantFiles []string
		notFiles  []string
		wantErr   bool
	}{
		{
			name: "checkpoint archive",
			entries: []tarEntry{
				{"checkpoint", tar.TypeDir, ""},
				{"checkpoint/core-1.img", tar.TypeReg, "core"},
				{"spec.dump", tar.TypeReg, "{}"},
				{"rootfs-diff.tar", tar.TypeReg, ""},
			},
			wantFiles: []string{"checkpoint/core-1.img", "spec.dump", "rootfs-diff.tar"},
		},
		{
			name: "links are not recreated",
			entries: []tarEntry{
				{"checkpoint/core-1.img", tar.TypeReg, "core"},
				{"config.dump", tar.TypeSymlink, "/etc/shadow"},
			},
			wantFiles: []string{"checkpoint/core-1.img"},
			notFiles:  []string{"config.dump"},
		},
		{
			name:    "no CRIU images",
			entries: []tarEntry{{"spec.dump", tar.TypeReg, "{}"}},
			wantErr: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := newStore(t)
			layer := putBlob(t, cs, ocispec.MediaTypeImageLayer, makeTar(t, tc.entries))
			dir := t.TempDir()
			err := ExtractLayer(ctx, cs, layer, dir)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			for _, f := range tc.wantFiles {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Errorf("want %s: %v", f, err)
				}
			}
			for _, f := range tc.notFiles {
				if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
					t.Errorf("%s should not exist", f)
				}
			}
		})
	}
}

func TestApplyRootfsDiff(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		diff     []tarEntry
		deleted  []string
		want     map[string]string
		gone     []string
		outside  string
		noDiffOK bool
	}{
		{
			name:    "diff and deletions",
			diff:    []tarEntry{{"marker", tar.TypeReg, "restored"}, {"etc/new", tar.TypeReg, "n"}},
			deleted: []string{"/etc/issue", "/does/not/exist"},
			want:    map[string]string{"marker": "restored", "etc/new": "n", "etc/hostname": "base"},
			gone:    []string{"etc/issue"},
		},
		{
			name:    "deleted paths stay inside the root",
			deleted: []string{"/../../outside"},
			outside: "outside",
			want:    map[string]string{"etc/issue": "base"},
		},
		{
			name:     "no diff files",
			noDiffOK: true,
			want:     map[string]string{"etc/issue": "base"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top := t.TempDir()
			root := filepath.Join(top, "a", "b", "root")
			data := t.TempDir()
			for _, f := range []string{"etc/issue", "etc/hostname"} {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(root, f)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, f), []byte("base"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.outside != "" {
				if err := os.WriteFile(filepath.Join(top, "a", tc.outside), []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if !tc.noDiffOK {
				if err := os.WriteFile(filepath.Join(data, "rootfs-diff.tar"), makeTar(t, tc.diff), 0o644); err != nil {
					t.Fatal(err)
				}
				p, _ := json.Marshal(tc.deleted)
				if err := os.WriteFile(filepath.Join(data, "deleted.files"), p, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := ApplyRootfsDiff(ctx, root, data); err != nil {
				t.Fatal(err)
			}
			for f, body := range tc.want {
				p, err := os.ReadFile(filepath.Join(root, f))
				if err != nil || string(p) != body {
					t.Errorf("%s = %q, %v; want %q", f, p, err, body)
				}
			}
			for _, f := range tc.gone {
				if _, err := os.Stat(filepath.Join(root, f)); err == nil {
					t.Errorf("%s should be deleted", f)
				}
			}
			if tc.outside != "" {
				if _, err := os.Stat(filepath.Join(top, "a", tc.outside)); err != nil {
					t.Errorf("file outside the root was touched: %v", err)
				}
			}
		})
	}
}
