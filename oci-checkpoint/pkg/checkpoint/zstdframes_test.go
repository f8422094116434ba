package checkpoint

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/archive/compression"
	"github.com/klauspost/compress/zstd"
)

// pagesLike is data that compresses as a process's pages do (a few x):
// runs of text and zeros between random bytes.
func pagesLike(n int, seed int64) []byte {
	r := rand.New(rand.NewSource(seed))
	b := make([]byte, n)
	for off := 0; off < n; {
		k := min(n-off, 1+r.Intn(16<<10))
		switch r.Intn(3) {
		case 0:
			r.Read(b[off : off+k])
		case 1:
			copy(b[off:off+k], bytes.Repeat([]byte("torch.nn.Module vllm "), k/20+1))
		}
		off += k
	}
	return b
}

func compressFrames(t testing.TB, src []byte, chunk int) []byte {
	var dst bytes.Buffer
	z, err := newZstdFrames(&dst)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(src); off += chunk {
		if _, err := z.Write(src[off:min(off+chunk, len(src))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return dst.Bytes()
}

func TestZstdFramesDecodeAsOneStreamInOrder(t *testing.T) {
	src := pagesLike(5*frameSize+12345, 1)
	out := compressFrames(t, src, 100_003)
	// As containerd reads a layer: one stream, whatever its frames.
	r, err := compression.DecompressStream(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src) {
		t.Fatalf("decoded %d bytes, not the %d written, in order", len(got), len(src))
	}
	if len(out) >= len(src)/2 {
		t.Fatalf("compressed %d bytes to %d: not compressed", len(src), len(out))
	}
	// Six frames, each with its content size in its header.
	var frames int
	for rest := out; len(rest) > 0; frames++ {
		var h zstd.Header
		if err := h.Decode(rest); err != nil || !h.HasFCS {
			t.Fatalf("frame %d: %v, content size in header: %v", frames, err, h.HasFCS)
		}
		d, _ := zstd.NewReader(nil)
		one, err := d.DecodeAll(rest[:frameLen(t, rest)], nil)
		d.Close()
		if err != nil || uint64(len(one)) != h.FrameContentSize {
			t.Fatalf("frame %d: %d bytes, header says %d: %v", frames, len(one), h.FrameContentSize, err)
		}
		rest = rest[frameLen(t, rest):]
	}
	if frames != 6 {
		t.Fatalf("%d frames, want 6 of at most %d bytes", frames, frameSize)
	}
}

// frameLen walks one frame's blocks (RFC 8878: header, blocks, checksum).
func frameLen(t testing.TB, b []byte) int {
	var h zstd.Header
	if err := h.Decode(b); err != nil {
		t.Fatal(err)
	}
	n := h.HeaderSize
	for {
		bh := int(b[n]) | int(b[n+1])<<8 | int(b[n+2])<<16
		last, typ, size := bh&1 == 1, (bh>>1)&3, bh>>3
		if typ == 1 { // RLE: one byte
			size = 1
		}
		n += 3 + size
		if last {
			break
		}
	}
	if h.HasCheckSum {
		n += 4
	}
	return n
}

type failingWriter struct{ after int }

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.after -= len(p); f.after < 0 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

func TestZstdFramesReturnTheWritersError(t *testing.T) {
	z, err := newZstdFrames(&failingWriter{after: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	src := pagesLike(3*frameSize, 2)
	var werr error
	for off := 0; off < len(src) && werr == nil; off += 1 << 20 {
		_, werr = z.Write(src[off : off+1<<20])
	}
	if cerr := z.Close(); cerr == nil || cerr.Error() != "disk full" {
		t.Fatalf("Close = %v, want the writer's error", cerr)
	}
	if werr != nil && werr.Error() != "disk full" {
		t.Fatalf("Write = %v", werr)
	}
}

// recordingWriter fails the test if written to once closed is set.
type recordingWriter struct {
	t      *testing.T
	n      atomic.Int64
	closed atomic.Bool
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	if w.closed.Load() {
		w.t.Error("a frame was written after Close returned")
	}
	time.Sleep(time.Millisecond) // a slow disk: frames queue up
	w.n.Add(int64(len(p)))
	return len(p), nil
}

func TestZstdFramesAbortedWriteNothingAfterClose(t *testing.T) {
	w := &recordingWriter{t: t}
	z, err := newZstdFrames(w)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := z.Write(pagesLike(4*frameSize+100, 4)); err != nil {
		t.Fatal(err)
	}
	failed := errors.New("file grew while packaging")
	z.Abort(failed)
	if err := z.Close(); err != failed {
		t.Fatalf("Close = %v, want the abort's error", err)
	}
	w.closed.Store(true)
	time.Sleep(50 * time.Millisecond)
	if _, err := z.Write([]byte("more")); err != errFramesClosed {
		t.Fatalf("Write after Close = %v, want %v", err, errFramesClosed)
	}
	if err := z.Close(); err != errFramesClosed {
		t.Fatalf("second Close = %v", err)
	}
}

// BenchmarkZstdLayer compresses the same data as one stream (what
// containerd's CompressStream does) and as frames (what a checkpoint layer is
// written as), side by side: pages-like data, or the file named in
// REKINDLE_BENCH_PAGES (e.g. a pages image of a real checkpoint).
func BenchmarkZstdLayer(b *testing.B) {
	src := pagesLike(256<<20, 3)
	if f := os.Getenv("REKINDLE_BENCH_PAGES"); f != "" {
		var err error
		if src, err = os.ReadFile(f); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("stream", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		var out bytes.Buffer
		for i := 0; i < b.N; i++ {
			out.Reset()
			w, err := compression.CompressStream(&out, compression.Zstd)
			if err != nil {
				b.Fatal(err)
			}
			w.Write(src)
			w.Close()
		}
		b.ReportMetric(float64(len(src))/float64(out.Len()), "x")
	})
	b.Run("frames", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		var out []byte
		for i := 0; i < b.N; i++ {
			out = compressFrames(b, src, 1<<20)
		}
		b.ReportMetric(float64(len(src))/float64(len(out)), "x")
	})
}
