// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	bolt "go.etcd.io/bbolt"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/metadata"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/protobuf/types"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/containerd/v2/plugins/snapshots/native"
)

func TestCheckpointDirUnknownSnapshotter(t *testing.T) {
	r := &Restorer{Snapshotter: func(string) snapshots.Snapshotter { return nil }}
	_, err := r.CheckpointDir(context.Background(), "nosuch", &Image{Name: "example/ckpt:1"})
	if !errdefs.IsNotFound(err) {
		t.Fatalf("CheckpointDir with an unknown snapshotter: %v, want a not-found error", err)
	}
}

// TestHoldCheckpointDir: a CRI container restored from a checkpoint image
// holds the cache entry it found at CreateContainer until it is removed,
// so that a prune before StartContainer (the collector, once the image is
// gone, or cache-gc) leaves the CRIU images StartContainer reads.
func TestHoldCheckpointDir(t *testing.T) {
	for _, tc := range []struct {
		name string
		// hold: CreateContainer holds the entry; container: the container
		// is created (it fails after the hold in "never created").
		hold, container bool
		wantKept        bool
	}{
		{name: "held by its container", hold: true, container: true, wantKept: true},
		{name: "not held", container: true},
		{name: "container never created", hold: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := namespaces.WithNamespace(context.Background(), "k8s.io")
			db := newMetadataDB(t)
			lm := metadata.NewLeaseManager(db)
			cs := db.ContentStore()
			sn := db.Snapshotter("native")
			r := &Restorer{Content: cs, Leases: lm, Snapshotter: func(name string) snapshots.Snapshotter { return db.Snapshotter(name) }}

			// As CRImportCheckpoint: a lease from finding the entry until
			// the container exists.
			l, err := lm.Create(ctx, leases.WithRandomID())
			if err != nil {
				t.Fatal(err)
			}
			lctx := leases.WithLease(ctx, l.ID)
			p := makeTar(t, []tarEntry{
				{"checkpoint", tar.TypeDir, ""},
				{"checkpoint/core-1.img", tar.TypeReg, "core"},
			})
			layer := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(p), Size: int64(len(p))}
			if err := content.WriteBlob(lctx, cs, layer.Digest.String(), bytes.NewReader(p), layer); err != nil {
				t.Fatal(err)
			}
			ci := &Image{Name: "example/ckpt:1", Layer: layer}
			if _, err := r.CheckpointDir(lctx, "native", ci); err != nil {
				t.Fatal(err)
			}
			var held string
			if tc.hold {
				if held, err = r.HoldCheckpointDir(lctx, "native", ci, "c1"); err != nil {
					t.Fatal(err)
				}
			}
			cstore := metadata.NewContainerStore(db)
			if tc.container {
				if _, err := cstore.Create(lctx, containers.Container{
					ID:      "c1",
					Runtime: containers.RuntimeInfo{Name: "io.containerd.runc.v2"},
					Spec:    &types.Any{},
				}); err != nil {
					t.Fatal(err)
				}
			}
			if err := lm.Delete(ctx, l); err != nil {
				t.Fatal(err)
			}

			// Between CreateContainer and StartContainer: the image is gone
			// (nothing else refers to the layer here) and the collector runs.
			collect(ctx, t, db)
			entry := cacheKey(layer.Digest) + "/data"
			_, err = sn.Stat(ctx, entry)
			if kept := err == nil; kept != tc.wantKept {
				t.Fatalf("cache entry after a collection: %v, want kept: %v", err, tc.wantKept)
			}
			if !tc.wantKept {
				return
			}
			if _, err := os.Stat(filepath.Join(held, "checkpoint", "core-1.img")); err != nil {
				t.Errorf("StartContainer cannot read the held checkpoint: %v", err)
			}
			// cache-gc spares an entry with a snapshot outside it on top.
			var onTop []string
			if err := sn.Walk(ctx, func(_ context.Context, info snapshots.Info) error {
				if info.Parent == entry && !strings.HasPrefix(info.Name, cacheKey(layer.Digest)+"/") {
					onTop = append(onTop, info.Name)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if len(onTop) != 1 {
				t.Errorf("snapshots outside the cache entry on top of it: %v, want the container's hold", onTop)
			}

			// Removing the container releases the entry.
			if err := cstore.Delete(ctx, "c1"); err != nil {
				t.Fatal(err)
			}
			collect(ctx, t, db)
			if _, err := sn.Stat(ctx, entry); !errdefs.IsNotFound(err) {
				t.Errorf("cache entry after its container was removed: %v, want not found", err)
			}
		})
	}
}

// newMetadataDB returns a metadata store over a local content store and a
// native snapshotter named "native".
func newMetadataDB(t *testing.T) *metadata.DB {
	t.Helper()
	dir := t.TempDir()
	cs, err := local.NewStore(filepath.Join(dir, "content"))
	if err != nil {
		t.Fatal(err)
	}
	sn, err := native.NewSnapshotter(filepath.Join(dir, "native"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sn.Close() })
	bdb, err := bolt.Open(filepath.Join(dir, "metadata.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bdb.Close() })
	db := metadata.NewDB(bdb, cs, map[string]snapshots.Snapshotter{"native": sn})
	if err := db.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	return db
}

func collect(ctx context.Context, t *testing.T, db *metadata.DB) {
	t.Helper()
	if _, err := db.GarbageCollect(ctx); err != nil {
		t.Fatal(err)
	}
}
