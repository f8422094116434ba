//go:build linux

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
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/klauspost/compress/zstd"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/plugins/snapshots/native"
	zpages "rekindle.local/contract/pages"
)

// compressedPages is content as a pages-N.img.zst: 64 KiB frames in the
// zstd seekable format.
func compressedPages(t *testing.T, content []byte) string {
	t.Helper()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	var out []byte
	var sizes [][2]uint32
	for off := 0; off < len(content); off += 64 << 10 {
		n := len(out)
		end := min(off+64<<10, len(content))
		out = enc.EncodeAll(content[off:end], out)
		sizes = append(sizes, [2]uint32{uint32(len(out) - n), uint32(end - off)})
	}
	return string(append(out, zpages.SeekTable(sizes)...))
}

func decodedFixture(t *testing.T) (*Restorer, snapshots.Snapshotter, *Image, []byte) {
	t.Helper()
	delay := decodeDelay
	decodeDelay = 0
	t.Cleanup(func() { decodeDelay = delay })
	pages := bytes.Repeat([]byte("a page of memory "), 20000)
	cs := newStore(t)
	layer := putBlob(t, cs, ocispec.MediaTypeImageLayer, makeTar(t, []tarEntry{
		{"checkpoint", tar.TypeDir, ""},
		{"checkpoint/core-1.img", tar.TypeReg, "core"},
		{"checkpoint/pages-1.img" + zpages.Suffix, tar.TypeReg, compressedPages(t, pages)},
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
	return r, sn, &Image{Name: "ckpt", Layer: layer}, pages
}

// restoreFrom takes what a restore of container id takes from the cache:
// the held entry and the CRIU images it would read.
func restoreFrom(t *testing.T, r *Restorer, sn snapshots.Snapshotter, ci *Image, id string) string {
	t.Helper()
	ctx := context.Background()
	dir, err := r.holdData(ctx, sn, "native", ci, id)
	if err != nil {
		t.Fatal(err)
	}
	r.inFlight.add(ci.Layer.Digest, 1)
	return r.decodedImages(ctx, sn, "native", ci, id, filepath.Join(dir, "checkpoint"))
}

func waitDecoded(t *testing.T, sn snapshots.Snapshotter, ci *Image) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if info, err := sn.Stat(context.Background(), decodedKey(ci.Layer.Digest)+"-view"); err == nil && info.Labels[labelCacheStamp] != "" {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no decoded copy was made")
}

// decodedAfterARestore restores ci once (c1), waits for the decoded copy
// that restore asks for, and returns the directory of its view.
func decodedAfterARestore(t *testing.T, r *Restorer, sn snapshots.Snapshotter, ci *Image) string {
	t.Helper()
	ctx := context.Background()
	restoreFrom(t, r, sn, ci, "c1")
	r.ReleaseHold(ctx, "native", "c1")
	r.Done(ci.Layer.Digest)
	waitDecoded(t, sn, ci)
	mounts, err := sn.Mounts(ctx, decodedKey(ci.Layer.Digest)+"-view")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := bindDir(mounts)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestACachedRestoreReadsTheDecodedPages(t *testing.T) {
	ctx := context.Background()
	r, sn, ci, pages := decodedFixture(t)

	// The first restore decodes (the shim does), and asks for a copy.
	first := restoreFrom(t, r, sn, ci, "c1")
	if !hasCompressedPages(first) {
		t.Fatalf("first restore reads %s, want the compressed images", first)
	}
	if _, err := sn.Stat(ctx, decodedKey(ci.Layer.Digest)); !errdefs.IsNotFound(err) {
		t.Fatalf("a copy made while a restore is in flight: %v", err)
	}
	r.ReleaseHold(ctx, "native", "c1")
	r.Done(ci.Layer.Digest)
	waitDecoded(t, sn, ci)

	// The next one reads the copy, held while it restores.
	next := restoreFrom(t, r, sn, ci, "c2")
	if hasCompressedPages(next) {
		t.Fatalf("cached restore reads %s, want the decoded copy", next)
	}
	if b, err := os.ReadFile(filepath.Join(next, "pages-1.img")); err != nil || !bytes.Equal(b, pages) {
		t.Fatalf("decoded pages-1.img: %d bytes, %v; want the %d bytes compressed", len(b), err, len(pages))
	}
	if b, err := os.ReadFile(filepath.Join(next, "core-1.img")); err != nil || string(b) != "core" {
		t.Fatalf("core-1.img beside the decoded pages: %q, %v", b, err)
	}
	if _, err := sn.Stat(ctx, decodedHoldKey("c2")); err != nil {
		t.Fatalf("c2 holds no decoded copy: %v", err)
	}
	// A failed restore elsewhere keeps what c2 reads.
	r.Done(ci.Layer.Digest)
	if err := r.Forget(ctx, "native", ci.Layer.Digest); err != nil {
		t.Fatal(err)
	}
	if _, err := sn.Stat(ctx, decodedKey(ci.Layer.Digest)+"-view"); err != nil {
		t.Fatalf("the decoded copy went from under c2: %v", err)
	}
	r.ReleaseHold(ctx, "native", "c2")
	if _, err := sn.Stat(ctx, decodedHoldKey("c2")); !errdefs.IsNotFound(err) {
		t.Fatalf("c2's hold of the decoded copy after its restore: %v", err)
	}
}

func TestDecodedPagesOutOfThePageCacheAreNotRead(t *testing.T) {
	ctx := context.Background()
	r, sn, ci, _ := decodedFixture(t)
	dir := decodedAfterARestore(t, r, sn, ci)
	f, err := os.Open(filepath.Join(dir, "checkpoint", "pages-1.img"))
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Sync()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if share, _ := residentShare(filepath.Join(dir, "checkpoint")); share >= decodedResident {
		t.Skipf("this file system keeps %.0f%% of the file in the page cache after FADV_DONTNEED", 100*share)
	}
	if got := restoreFrom(t, r, sn, ci, "c2"); !hasCompressedPages(got) {
		t.Fatalf("restore with the copy out of the page cache reads %s, want the compressed images", got)
	}
	if _, err := sn.Stat(ctx, decodedHoldKey("c2")); !errdefs.IsNotFound(err) {
		t.Fatalf("a hold of the copy it does not read: %v", err)
	}
}

func TestAChangedDecodedCopyIsDroppedAndMadeAgain(t *testing.T) {
	ctx := context.Background()
	r, sn, ci, pages := decodedFixture(t)
	dir := decodedAfterARestore(t, r, sn, ci)
	time.Sleep(10 * time.Millisecond)
	if err := os.WriteFile(filepath.Join(dir, "checkpoint", "pages-1.img"), []byte("damaged"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := restoreFrom(t, r, sn, ci, "c2"); !hasCompressedPages(got) {
		t.Fatalf("restore over a changed copy reads %s, want the compressed images", got)
	}
	if _, err := sn.Stat(ctx, decodedKey(ci.Layer.Digest)); !errdefs.IsNotFound(err) {
		t.Fatalf("the changed copy is kept: %v", err)
	}
	r.ReleaseHold(ctx, "native", "c2")
	r.Done(ci.Layer.Digest)
	waitDecoded(t, sn, ci)
	got := restoreFrom(t, r, sn, ci, "c3")
	if b, err := os.ReadFile(filepath.Join(got, "pages-1.img")); err != nil || !bytes.Equal(b, pages) {
		t.Fatalf("the copy made again: %d bytes, %v", len(b), err)
	}
}

func TestNoRoomForTheDecodedCopy(t *testing.T) {
	dir := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if err := roomFor(dir, int64(st.Bavail)*int64(st.Bsize)); err == nil {
		t.Fatal("a copy as large as the free space is allowed; want the spare share kept")
	}
	if err := roomFor(dir, 1<<20); err != nil && int64(st.Bavail)*int64(st.Bsize) > int64(st.Blocks)*int64(st.Bsize)/5 {
		t.Fatalf("1 MiB refused on a file system with room: %v", err)
	}
}

func TestAFailedRestoreMakesNoDecodedCopy(t *testing.T) {
	ctx := context.Background()
	r, sn, ci, _ := decodedFixture(t)
	decodeDelay = 200 * time.Millisecond
	restoreFrom(t, r, sn, ci, "c1")
	// As the tasks service ends a failed restore: Done, then ForgetFailed.
	r.Done(ci.Layer.Digest)
	r.ForgetFailed(ctx, "native", "c1", ci.Layer.Digest, os.ErrClosed)
	time.Sleep(3 * decodeDelay)
	if _, err := sn.Stat(ctx, decodedKey(ci.Layer.Digest)); !errdefs.IsNotFound(err) {
		t.Fatalf("a decoded copy after a failed restore: %v", err)
	}
	if _, err := sn.Stat(ctx, cacheKey(ci.Layer.Digest)+"/data"); !errdefs.IsNotFound(err) {
		t.Fatalf("the failed restore's entry is kept: %v", err)
	}
}
