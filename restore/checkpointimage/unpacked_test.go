// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/labels"
	"github.com/containerd/containerd/v2/plugins/snapshots/native"
)

func TestCheckpointDataUsesUnpackedImage(t *testing.T) {
	ctx := context.Background()
	plain := []tarEntry{
		{"checkpoint", tar.TypeDir, ""},
		{"checkpoint/core-1.img", tar.TypeReg, "core"},
		{"spec.dump", tar.TypeReg, "{}"},
	}
	withLink := append(append([]tarEntry{}, plain...), tarEntry{"checkpoint/pages-1.img", tar.TypeSymlink, "/etc/shadow"})
	for _, tc := range []struct {
		name     string
		archive  []tarEntry
		unpacked bool // the client unpacked the image into the snapshotter
		wantRuns int32
	}{
		{name: "unpacked image is used, not extracted", archive: plain, unpacked: true, wantRuns: 0},
		{name: "image not unpacked is extracted", archive: plain, unpacked: false, wantRuns: 1},
		{name: "unpacked image holding a symlink is extracted, without it", archive: withLink, unpacked: true, wantRuns: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := newStore(t)
			layer := putBlob(t, cs, ocispec.MediaTypeImageLayer, makeTar(t, tc.archive))
			config := putJSON(t, cs, ocispec.MediaTypeImageConfig, ocispec.Image{
				RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{layer.Digest}},
			})
			sn, err := native.NewSnapshotter(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer sn.Close()
			if tc.unpacked {
				unpackAs(ctx, t, sn, layer.Digest.String(), makeTar(t, tc.archive))
			}

			var runs atomic.Int32
			extractLayer = func(ctx context.Context, p content.Provider, l ocispec.Descriptor, dir string) error {
				runs.Add(1)
				return ExtractLayer(ctx, p, l, dir)
			}
			defer func() { extractLayer = ExtractLayer }()

			r := &Restorer{Content: cs}
			ci := &Image{Name: "ckpt", Layer: layer, Manifest: ocispec.Manifest{Config: config, Layers: []ocispec.Descriptor{layer}}}
			var dirs []string
			for i := 0; i < 2; i++ {
				dir, err := r.checkpointData(ctx, sn, "native", ci)
				if err != nil {
					t.Fatal(err)
				}
				if b, err := os.ReadFile(filepath.Join(dir, "checkpoint", "core-1.img")); err != nil || string(b) != "core" {
					t.Errorf("restore %d: checkpoint/core-1.img: %q, %v", i, b, err)
				}
				if _, err := os.Lstat(filepath.Join(dir, "checkpoint", "pages-1.img")); err == nil {
					t.Errorf("restore %d: the archive's symlink reached the checkpoint directory", i)
				}
				dirs = append(dirs, dir)
			}
			if dirs[0] != dirs[1] {
				t.Errorf("restores used different directories: %v", dirs)
			}
			if got := runs.Load(); got != tc.wantRuns {
				t.Errorf("checkpoint layer extracted %d times, want %d", got, tc.wantRuns)
			}
			// Only the cache's own view remains: the check's view is gone.
			if err := sn.Walk(ctx, func(ctx context.Context, info snapshots.Info) error {
				if strings.Contains(info.Name, "/check/") {
					t.Errorf("snapshot %s left behind", info.Name)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			info, err := sn.Stat(ctx, cacheKey(layer.Digest)+"/data-view")
			if err != nil {
				t.Fatal(err)
			}
			if info.Labels[labelGCContentBackRef] != layer.Digest.String() {
				t.Errorf("cache view %+v should refer to its layer for GC", info)
			}
		})
	}
}

// An image whose config names the diff ID of another image's unpacked
// layer gets its own layer extracted, not the other's tree; a compressed
// layer's unpacked snapshot is used only when its blob carries the diff ID
// the unpacker recorded.
func TestCheckpointDataChecksTheDiffID(t *testing.T) {
	ctx := context.Background()
	archive := func(core string) []byte {
		return makeTar(t, []tarEntry{{"checkpoint", tar.TypeDir, ""}, {"checkpoint/core-1.img", tar.TypeReg, core}})
	}
	for _, tc := range []struct {
		name     string
		label    bool // the unpacker's uncompressed digest on the gzip layer
		wantCore string
		wantRuns int32
	}{
		{name: "another image's diff ID: own layer extracted", wantCore: "mine", wantRuns: 1},
		{name: "compressed layer with the recorded diff ID: unpacked snapshot used", label: true, wantCore: "mine", wantRuns: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := newStore(t)
			sn, err := native.NewSnapshotter(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer sn.Close()
			var layer ocispec.Descriptor
			var diffID digest.Digest
			if tc.label {
				plain := archive("mine")
				diffID = digest.FromBytes(plain)
				var gz bytes.Buffer
				w := gzip.NewWriter(&gz)
				w.Write(plain)
				w.Close()
				layer = putBlob(t, cs, ocispec.MediaTypeImageLayerGzip, gz.Bytes())
				cs = uncompressedLabel{cs, layer.Digest, diffID}
				unpackAs(ctx, t, sn, diffID.String(), plain)
			} else {
				// Another image's layer, unpacked on this host; this image's
				// config claims its diff ID for a layer of its own.
				other := archive("theirs")
				diffID = digest.FromBytes(other)
				unpackAs(ctx, t, sn, diffID.String(), other)
				layer = putBlob(t, cs, ocispec.MediaTypeImageLayer, archive("mine"))
			}
			config := putJSON(t, cs, ocispec.MediaTypeImageConfig, ocispec.Image{
				RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{diffID}},
			})
			var runs atomic.Int32
			extractLayer = func(ctx context.Context, p content.Provider, l ocispec.Descriptor, dir string) error {
				runs.Add(1)
				return ExtractLayer(ctx, p, l, dir)
			}
			defer func() { extractLayer = ExtractLayer }()
			r := &Restorer{Content: cs}
			ci := &Image{Name: "ckpt", Layer: layer, Manifest: ocispec.Manifest{Config: config, Layers: []ocispec.Descriptor{layer}}}
			dir, err := r.checkpointData(ctx, sn, "native", ci)
			if err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "checkpoint", "core-1.img")); err != nil || string(b) != tc.wantCore {
				t.Errorf("checkpoint/core-1.img: %q, %v; want %q", b, err, tc.wantCore)
			}
			if got := runs.Load(); got != tc.wantRuns {
				t.Errorf("checkpoint layer extracted %d times, want %d", got, tc.wantRuns)
			}
		})
	}
}

// uncompressedLabel is a content store whose blob layer carries the
// uncompressed digest diffID, as the unpacker labels a layer it applied.
type uncompressedLabel struct {
	content.Store
	layer, diffID digest.Digest
}

func (s uncompressedLabel) Info(ctx context.Context, dgst digest.Digest) (content.Info, error) {
	info, err := s.Store.Info(ctx, dgst)
	if err == nil && dgst == s.layer {
		info.Labels = map[string]string{labels.LabelUncompressed: s.diffID.String()}
	}
	return info, err
}

// unpackAs commits the tar p as snapshot name, as the unpacker would.
func unpackAs(ctx context.Context, t *testing.T, sn snapshots.Snapshotter, name string, p []byte) {
	t.Helper()
	mounts, err := sn.Prepare(ctx, "unpack-"+name, "")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := bindDir(mounts)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(p))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, hdr.Name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(path, 0o755)
		case tar.TypeSymlink:
			err = os.Symlink(hdr.Linkname, path)
		case tar.TypeReg:
			var b []byte
			if b, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(path, b, 0o644)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := sn.Commit(ctx, name, "unpack-"+name); err != nil {
		t.Fatal(err)
	}
}
