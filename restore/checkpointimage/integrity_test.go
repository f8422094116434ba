// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/containerd/v2/plugins/snapshots/native"
)

// storeBlob puts data in a local content store under root and returns its
// descriptor and its file.
func storeBlob(t *testing.T, root string, data []byte) (content.Store, ocispec.Descriptor, string) {
	t.Helper()
	cs, err := local.NewStore(root)
	if err != nil {
		t.Fatal(err)
	}
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(data), Size: int64(len(data))}
	if err := content.WriteBlob(context.Background(), cs, "blob", bytes.NewReader(data), desc); err != nil {
		t.Fatal(err)
	}
	return cs, desc, filepath.Join(root, "blobs", "sha256", desc.Digest.Encoded())
}

func TestVerifyBlob(t *testing.T) {
	data := bytes.Repeat([]byte("checkpoint"), 100000)
	for _, tc := range []struct {
		name   string
		damage func(path string) error
		want   string
	}{
		{"intact", func(string) error { return nil }, ""},
		{"overwritten", func(p string) error {
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt([]byte("damage"), 4096)
			return err
		}, "does not match its digest"},
		{"truncated", func(p string) error { return os.Truncate(p, 1000) }, fmt.Sprintf("is 1000 bytes where the image says %d", len(data))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, desc, path := storeBlob(t, t.TempDir(), data)
			if err := os.Chmod(path, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := tc.damage(path); err != nil {
				t.Fatal(err)
			}
			err := VerifyBlob(context.Background(), cs, desc)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var d *DamagedLayerError
			if !errors.As(err, &d) || !errdefs.IsDataLoss(err) {
				t.Fatalf("got %v, want a DamagedLayerError", err)
			}
			d.Image = "rekindle.local/ckpt:x"
			want := []string{tc.want, desc.Digest.String(), "nerdctl rmi rekindle.local/ckpt:x", "pull it again"}
			// containerd's own store names its file (the patched tree's
			// readerat.go); a plain checkout's does not.
			if ra, err := cs.ReaderAt(context.Background(), desc); err == nil {
				if blobPath(ra) != "" {
					want = append(want, path)
				}
				ra.Close()
			}
			for _, s := range want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%q lacks %q", err, s)
				}
			}
		})
	}
}

func TestExtractLayerRefusesADamagedBlob(t *testing.T) {
	layer := makeTar(t, []tarEntry{{"checkpoint/", tar.TypeDir, ""}, {"checkpoint/pages-1.img", tar.TypeReg, strings.Repeat("p", 1<<16)}})
	cs, desc, path := storeBlob(t, t.TempDir(), layer)
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// In a file's content: tar itself finds nothing wrong.
	if _, err := f.WriteAt([]byte("damage"), 2048); err != nil {
		t.Fatal(err)
	}
	f.Close()
	err = ExtractLayer(context.Background(), cs, desc, t.TempDir())
	var d *DamagedLayerError
	if !errors.As(err, &d) || !strings.Contains(err.Error(), "does not match its digest") {
		t.Fatalf("got %v, want a DamagedLayerError", err)
	}
}

func TestEntryStampChangesWithAPagesImage(t *testing.T) {
	dir := t.TempDir()
	pages := filepath.Join(dir, "checkpoint", "pages-1.img")
	if err := os.MkdirAll(filepath.Dir(pages), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pages, []byte("pages"), 0o600); err != nil {
		t.Fatal(err)
	}
	before, _, err := entryStamp(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again, _, _ := entryStamp(dir); again != before {
		t.Fatalf("stamp changed without a write: %s, %s", before, again)
	}
	time.Sleep(10 * time.Millisecond)
	// Same size, other bytes: only the times tell.
	if err := os.WriteFile(pages, []byte("PAGES"), 0o600); err != nil {
		t.Fatal(err)
	}
	if after, _, _ := entryStamp(dir); after == before {
		t.Fatal("stamp unchanged after a pages image was written")
	}
}

func TestIsCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, tc := range []struct {
		ctx  context.Context
		err  error
		want bool
	}{
		{context.Background(), errors.New("criu failed"), false},
		{context.Background(), fmt.Errorf("start: %w", context.Canceled), true},
		{context.Background(), fmt.Errorf("start: %w", context.DeadlineExceeded), true},
		{ctx, errors.New("transport closed"), true},
	} {
		if tc.ctx == ctx {
			cancel()
		}
		if got := IsCancel(tc.ctx, tc.err); got != tc.want {
			t.Errorf("IsCancel(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// cacheFixture returns a Restorer over a native snapshotter and a checkpoint
// image of one pages image, its layer extracted into the cache and held
// by container c1, and the data's directory.
func cacheFixture(t *testing.T) (*Restorer, snapshots.Snapshotter, *Image, string) {
	t.Helper()
	cs := newStore(t)
	layer := putBlob(t, cs, ocispec.MediaTypeImageLayer, makeTar(t, []tarEntry{
		{"checkpoint", tar.TypeDir, ""},
		{"checkpoint/pages-1.img", tar.TypeReg, strings.Repeat("pages", 1000)},
	}))
	sn, err := native.NewSnapshotter(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sn.Close() })
	r := &Restorer{Content: cs, Snapshotter: func(name string) snapshots.Snapshotter {
		if name == "native" {
			return sn
		}
		return nil
	}}
	ci := &Image{Name: "ckpt", Layer: layer}
	dir, err := r.holdData(context.Background(), sn, "native", ci, "c1")
	if err != nil {
		t.Fatal(err)
	}
	return r, sn, ci, dir
}

func TestHoldKeepsTheDataFromForgetAndACancelKeepsTheEntry(t *testing.T) {
	ctx := context.Background()
	r, sn, ci, _ := cacheFixture(t)
	data := cacheKey(ci.Layer.Digest) + "/data"
	if info, err := sn.Stat(ctx, holdKey("c1")); err != nil || info.Parent != data {
		t.Fatalf("hold of c1: %+v, %v; want a view of %s", info, err, data)
	}

	// The caller gave up: nothing goes, the hold stays.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	r.ForgetFailed(cctx, "native", "c1", ci.Layer.Digest, fmt.Errorf("start: %w", context.Canceled))
	for _, key := range []string{data, cacheKey(ci.Layer.Digest) + "/data-view", holdKey("c1")} {
		if _, err := sn.Stat(ctx, key); err != nil {
			t.Errorf("%s after a cancelled Start: %v", key, err)
		}
	}

	// Another container's hold keeps the entry after c1 really failed.
	if _, err := r.holdData(ctx, sn, "native", ci, "c2"); err != nil {
		t.Fatal(err)
	}
	r.ForgetFailed(ctx, "native", "c1", ci.Layer.Digest, errors.New("criu failed"))
	if _, err := sn.Stat(ctx, holdKey("c1")); !errdefs.IsNotFound(err) {
		t.Errorf("c1's hold after its failed restore: %v", err)
	}
	if _, err := sn.Stat(ctx, data); err != nil {
		t.Errorf("data held by c2 dropped: %v", err)
	}

	// c2 restored: its hold goes, and a failure then drops the entry.
	r.ReleaseHold(ctx, "native", "c2")
	r.ForgetFailed(ctx, "native", "c3", ci.Layer.Digest, errors.New("criu failed"))
	if _, err := sn.Stat(ctx, data); !errdefs.IsNotFound(err) {
		t.Errorf("data after a failed restore with no hold left: %v", err)
	}
}

func TestAChangedPagesImageRebuildsTheEntry(t *testing.T) {
	ctx := context.Background()
	r, sn, ci, dir := cacheFixture(t)
	r.ReleaseHold(ctx, "native", "c1")
	time.Sleep(10 * time.Millisecond)
	f, err := os.OpenFile(filepath.Join(dir, "checkpoint", "pages-1.img"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("XXXXX"), 100); err != nil {
		t.Fatal(err)
	}
	f.Close()
	dir, err = r.checkpointData(ctx, sn, "native", ci)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "checkpoint", "pages-1.img"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != strings.Repeat("pages", 1000) {
		t.Fatal("the changed pages image was kept")
	}
}

// liveContainers is a container store that knows only which ids exist.
type liveContainers struct {
	containers.Store
	ids map[string]bool
}

func (l liveContainers) Get(_ context.Context, id string) (containers.Container, error) {
	if !l.ids[id] {
		return containers.Container{}, fmt.Errorf("container %q: %w", id, errdefs.ErrNotFound)
	}
	return containers.Container{ID: id}, nil
}

// A restore that follows the removal of the last container restored from
// a damaged entry rebuilds it, before the GC has taken that container's
// snapshots; a container that still exists keeps the entry.
func TestAChangedEntryRebuildsOnceItsContainersAreRemoved(t *testing.T) {
	ctx := context.Background()
	r, sn, ci, dir := cacheFixture(t)
	live := liveContainers{ids: map[string]bool{"c1": true}}
	r.Containers = live
	time.Sleep(10 * time.Millisecond)
	if err := os.Truncate(filepath.Join(dir, "checkpoint", "pages-1.img"), 100); err != nil {
		t.Fatal(err)
	}
	// Refused, and again: nothing of the entry went, to be trusted anew.
	for i := 0; i < 2; i++ {
		if _, err := r.checkpointData(ctx, sn, "native", ci); err == nil || !strings.Contains(err.Error(), "1 restored container(s) still use the entry") {
			t.Fatalf("damaged entry held by a live container (try %d): %v; want it refused as in use", i+1, err)
		}
	}

	delete(live.ids, "c1")
	dir, err := r.checkpointData(ctx, sn, "native", ci)
	if err != nil {
		t.Fatalf("damaged entry after its container was removed: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "checkpoint", "pages-1.img")); err != nil || string(b) != strings.Repeat("pages", 1000) {
		t.Fatalf("pages image after the rebuild: %d bytes, %v", len(b), err)
	}
	if _, err := sn.Stat(ctx, holdKey("c1")); !errdefs.IsNotFound(err) {
		t.Errorf("the removed container's hold: %v; want it gone", err)
	}
}
