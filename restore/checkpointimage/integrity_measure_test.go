// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/pkg/archive"
	"github.com/containerd/containerd/v2/plugins/content/local"
)

// TestMeasureVerify prints what verifying a checkpoint layer costs: a tar
// of REKINDLE_MEASURE_VERIFY_MB (a pages image of random bytes) in a local
// content store, read through VerifyBlob from the page cache and cold
// (the blob's pages dropped with fadvise), and extracted with
// ExtractLayer, which verifies on the way. Run by hand:
//
//	REKINDLE_MEASURE_VERIFY_MB=2048 go test -run TestMeasureVerify -v ./checkpointimage
func TestMeasureVerify(t *testing.T) {
	mb, _ := strconv.Atoi(os.Getenv("REKINDLE_MEASURE_VERIFY_MB"))
	if mb <= 0 {
		t.Skip("set REKINDLE_MEASURE_VERIFY_MB to measure")
	}
	ctx := context.Background()
	root := t.TempDir()
	cs, err := local.NewStore(filepath.Join(root, "content"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.Writer(ctx, content.WithRef("layer"))
	if err != nil {
		t.Fatal(err)
	}
	dg := digest.SHA256.Digester()
	mw := io.MultiWriter(w, dg.Hash())
	tw := tar.NewWriter(mw)
	size := int64(mb) << 20
	_ = tw.WriteHeader(&tar.Header{Name: "checkpoint/", Typeflag: tar.TypeDir, Mode: 0o755})
	_ = tw.WriteHeader(&tar.Header{Name: "checkpoint/pages-1.img", Typeflag: tar.TypeReg, Mode: 0o600, Size: size})
	buf := make([]byte, 4<<20)
	_, _ = rand.Read(buf)
	for n := int64(0); n < size; n += int64(len(buf)) {
		if _, err := tw.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := w.Status()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx, st.Offset, dg.Digest()); err != nil {
		t.Fatal(err)
	}
	layer := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: dg.Digest(), Size: st.Offset}
	blob := filepath.Join(root, "content", "blobs", "sha256", layer.Digest.Encoded())

	drop := func() {
		f, err := os.Open(blob)
		if err != nil {
			t.Fatal(err)
		}
		_ = f.Sync()
		_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		f.Close()
	}
	rate := func(d time.Duration) float64 { return float64(layer.Size) / d.Seconds() / 1e9 }
	for _, cold := range []bool{true, false, false} {
		if cold {
			drop()
		}
		start := time.Now()
		if err := VerifyBlob(ctx, cs, layer); err != nil {
			t.Fatal(err)
		}
		d := time.Since(start)
		t.Logf("VerifyBlob of %d MB (cold=%v): %s, %.2f GB/s", layer.Size>>20, cold, d.Round(time.Millisecond), rate(d))
	}
	for i := range 2 {
		dir := filepath.Join(root, "x"+strconv.Itoa(i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := ExtractLayer(ctx, cs, layer, dir); err != nil {
			t.Fatal(err)
		}
		d := time.Since(start)
		t.Logf("ExtractLayer (verifying) of %d MB from the page cache: %s, %.2f GB/s", layer.Size>>20, d.Round(time.Millisecond), rate(d))
		os.RemoveAll(dir)
	}
	// The extraction without the check, for the difference.
	dir := filepath.Join(root, "plain")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ra, err := cs.ReaderAt(ctx, layer)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := archive.Apply(ctx, dir, content.NewReader(ra)); err != nil {
		t.Fatal(err)
	}
	d := time.Since(start)
	ra.Close()
	t.Logf("extraction without the check (archive.Apply) of %d MB from the page cache: %s, %.2f GB/s", layer.Size>>20, d.Round(time.Millisecond), rate(d))
	os.RemoveAll(dir)

	ra, err = cs.ReaderAt(ctx, layer)
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	n, err := io.Copy(io.Discard, io.NewSectionReader(ra, 0, ra.Size()))
	ra.Close()
	if err != nil {
		t.Fatal(err)
	}
	d = time.Since(start)
	t.Logf("plain read of %d MB from the page cache (no hash): %s, %.2f GB/s", n>>20, d.Round(time.Millisecond), rate(d))
}
