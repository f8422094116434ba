// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/plugins/snapshots/native"
)

func TestCheckpointDataCache(t *testing.T) {
	ctx := context.Background()
	archive := []tarEntry{
		{"checkpoint", tar.TypeDir, ""},
		{"checkpoint/core-1.img", tar.TypeReg, "core"},
		{"spec.dump", tar.TypeReg, "{}"},
	}
	for _, tc := range []struct {
		name string
		// before runs ahead of the restores, e.g. to leave a half-built entry.
		before func(t *testing.T, sn snapshots.Snapshotter, entry string)
		// failFirst makes the first extraction fail.
		failFirst bool
		restores  int
		parallel  bool
		wantErrs  int
		wantRuns  int32
	}{
		{name: "miss then hits", restores: 3, wantRuns: 1},
		{name: "concurrent restores extract once", restores: 8, parallel: true, wantRuns: 1},
		{
			name: "interrupted extraction is not trusted",
			before: func(t *testing.T, sn snapshots.Snapshotter, entry string) {
				mounts, err := sn.Prepare(ctx, tempKey(entry), "")
				if err != nil {
					t.Fatal(err)
				}
				dir, _ := bindDir(mounts)
				if err := os.WriteFile(filepath.Join(dir, "partial"), []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			restores: 2, wantRuns: 1,
		},
		{name: "failed extraction leaves no entry", failFirst: true, restores: 2, wantErrs: 1, wantRuns: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := newStore(t)
			layer := putBlob(t, cs, ocispec.MediaTypeImageLayer, makeTar(t, archive))
			sn, err := native.NewSnapshotter(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer sn.Close()
			entry := cacheKey(layer.Digest) + "/data"
			if tc.before != nil {
				tc.before(t, sn, entry)
			}

			var runs atomic.Int32
			extractLayer = func(ctx context.Context, p content.Provider, l ocispec.Descriptor, dir string) error {
				if runs.Add(1) == 1 && tc.failFirst {
					return errors.New("disk full")
				}
				return ExtractLayer(ctx, p, l, dir)
			}
			defer func() { extractLayer = ExtractLayer }()

			r := &Restorer{Content: cs}
			ci := &Image{Name: "ckpt", Layer: layer}
			var (
				wg   sync.WaitGroup
				mu   sync.Mutex
				errs int
				dirs = map[string]bool{}
			)
			restore := func() {
				defer wg.Done()
				dir, err := r.checkpointData(ctx, sn, "native", ci)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs++
					return
				}
				dirs[dir] = true
				if _, err := os.Stat(filepath.Join(dir, "checkpoint", "core-1.img")); err != nil {
					t.Errorf("restore got an incomplete checkpoint: %v", err)
				}
				if _, err := os.Stat(filepath.Join(dir, "partial")); err == nil {
					t.Errorf("restore used a half-built entry")
				}
			}
			for i := 0; i < tc.restores; i++ {
				wg.Add(1)
				if tc.parallel {
					go restore()
				} else {
					restore()
				}
			}
			wg.Wait()
			if errs != tc.wantErrs {
				t.Errorf("%d restores failed, want %d", errs, tc.wantErrs)
			}
			if got := runs.Load(); got != tc.wantRuns {
				t.Errorf("checkpoint layer extracted %d times, want %d", got, tc.wantRuns)
			}
			if len(dirs) != 1 {
				t.Errorf("restores used %d checkpoint directories, want 1: %v", len(dirs), dirs)
			}
			info, err := sn.Stat(ctx, entry)
			if err != nil {
				t.Fatalf("cache entry: %v", err)
			}
			if info.Kind != snapshots.KindCommitted || info.Labels[labelGCContentBackRef] != layer.Digest.String() {
				t.Errorf("cache entry %+v should be committed and refer to its layer for GC", info)
			}
		})
	}
}

func TestCacheKeyPerLayer(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"sha256:aa", "sha256:bb"},
		{"sha256:aa", "sha512:aa"},
	} {
		if cacheKey(digest.Digest(tc.a)) == cacheKey(digest.Digest(tc.b)) {
			t.Errorf("layers %s and %s share a cache entry", tc.a, tc.b)
		}
	}
}

func TestForgetAfterFailedRestore(t *testing.T) {
	ctx := context.Background()
	cs := newStore(t)
	layer := putBlob(t, cs, ocispec.MediaTypeImageLayer, makeTar(t, []tarEntry{
		{"checkpoint", tar.TypeDir, ""},
		{"checkpoint/pages-1.img", tar.TypeReg, "pages"},
	}))
	sn, err := native.NewSnapshotter(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close()
	var runs atomic.Int32
	extractLayer = func(ctx context.Context, p content.Provider, l ocispec.Descriptor, dir string) error {
		runs.Add(1)
		return ExtractLayer(ctx, p, l, dir)
	}
	defer func() { extractLayer = ExtractLayer }()

	r := &Restorer{Content: cs, Snapshotter: func(name string) snapshots.Snapshotter {
		if name == "native" {
			return sn
		}
		return nil
	}}
	ci := &Image{Name: "ckpt", Layer: layer}
	dir, err := r.checkpointData(ctx, sn, "native", ci)
	if err != nil {
		t.Fatal(err)
	}
	// A pages image cut short, as a full disk leaves it.
	pages := filepath.Join(dir, "checkpoint", "pages-1.img")
	if err := os.Truncate(pages, 2); err != nil {
		t.Fatal(err)
	}

	// Another restore of the layer in flight reads the same files: kept.
	r.inFlight.add(layer.Digest, 1)
	if err := r.Forget(ctx, "native", layer.Digest); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"data", "data-view"} {
		if _, err := sn.Stat(ctx, cacheKey(layer.Digest)+"/"+name); err != nil {
			t.Errorf("cache snapshot %s removed while a restore of it was in flight: %v", name, err)
		}
	}
	r.Done(layer.Digest)

	// A CRI container created from the image holds the entry: kept.
	if _, err := r.HoldCheckpointDir(ctx, "native", ci, "other"); err != nil {
		t.Fatal(err)
	}
	if err := r.Forget(ctx, "native", layer.Digest); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"data", "data-view"} {
		if _, err := sn.Stat(ctx, cacheKey(layer.Digest)+"/"+name); err != nil {
			t.Errorf("cache snapshot %s removed while a container held it: %v", name, err)
		}
	}
	if err := r.ReleaseCheckpointDir(ctx, "native", "other"); err != nil {
		t.Fatal(err)
	}

	if err := r.Forget(ctx, "native", layer.Digest); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"data", "data-view"} {
		if _, err := sn.Stat(ctx, cacheKey(layer.Digest)+"/"+name); !errdefs.IsNotFound(err) {
			t.Errorf("cache snapshot %s after Forget: %v, want not found", name, err)
		}
	}

	dir, err = r.checkpointData(ctx, sn, "native", ci)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "checkpoint", "pages-1.img")); string(got) != "pages" {
		t.Errorf("the restore after Forget read %q, want the layer's %q", got, "pages")
	}
	if got := runs.Load(); got != 2 {
		t.Errorf("checkpoint layer extracted %d times, want 2 (once more after Forget)", got)
	}
	if err := r.Forget(ctx, "unknown", layer.Digest); err == nil {
		t.Errorf("Forget on an unknown snapshotter succeeded")
	}
}
