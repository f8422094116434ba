// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/platforms"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"rekindle.local/contract/layout"
)

// TestPreheatLocksAnInPlaceBlob: a layer kept in place is read through an
// EROFS mount of its blob, so the preheat locks the blob, and the mount a
// restore made when the blob was out of the page cache (direct I/O, past
// the cache) is made again buffered.
func TestPreheatLocksAnInPlaceBlob(t *testing.T) {
	needDirectIO(t)
	ctx := namespaces.WithNamespace(context.Background(), "test")
	ci, r, sn := inPlaceImage(ctx, t)
	inPlaceDirectRefused.Store(false)
	manifest := putJSON(t, r.Content, ocispec.MediaTypeImageManifest, ocispec.Manifest{
		MediaType: ocispec.MediaTypeImageManifest, Config: ci.Manifest.Config, Layers: ci.Manifest.Layers,
		Annotations: map[string]string{"org.criu.checkpoint.container.name": "engine"},
	})
	r.Images = memImages{"a": {Name: "a", Target: manifest}}
	r.Platform = platforms.Default()
	r.Snapshotter = func(string) snapshots.Snapshotter { return sn }

	// A restore from a cold page cache mounted it with direct I/O.
	dropCached(ctx, t, r, ci)
	dir, err := r.checkpointData(ctx, sn, "native", ci)
	if err != nil {
		t.Fatal(err)
	}
	if o := mountOptions(t, dir); !strings.Contains(o, "directio") {
		t.Skipf("the cold mount is %q, not directio: nothing to make again", o)
	}

	p := &Preheat{Restorer: r, Images: []string{"a"}, Max: 1 << 30, MaxSetting: "1GiB", Snapshotter: "native",
		Namespaces: func(context.Context) ([]string, error) { return []string{"test"}, nil }}
	t.Cleanup(func() {
		p.Images = nil
		p.Reconcile(ctx)
	})
	got := stateOf(p.Reconcile(ctx), "a")
	if got.State != "resident" || !strings.Contains(got.Source, "blob") || got.Files != 1 {
		t.Fatalf("a = %+v, want its blob resident", got)
	}
	info, err := sn.Stat(ctx, holdKey(holdID(ci.Layer.Digest)))
	if err != nil {
		t.Fatal(err)
	}
	mounts, err := sn.Mounts(ctx, info.Name)
	if err != nil {
		t.Fatal(err)
	}
	held, err := bindDir(mounts)
	if err != nil {
		t.Fatal(err)
	}
	if pct, err := cachedPercent(filepath.Join(held, layout.InPlaceBlob)); err != nil || pct != 100 {
		t.Errorf("the blob is %d%% in the page cache (%v), want 100", pct, err)
	}
	if dir, err = r.checkpointData(ctx, sn, "native", ci); err != nil {
		t.Fatal(err)
	}
	readCore(t, dir)
	if o := mountOptions(t, dir); strings.Contains(o, "directio") {
		t.Errorf("the entry's mount after the preheat: %q, want it buffered", o)
	}
}
