package checkpoint

import (
	"bytes"
	"errors"
	"math/rand"
	"testing"
)

func TestAsyncWriterKeepsOrder(t *testing.T) {
	src := make([]byte, 3<<20+123)
	rand.New(rand.NewSource(1)).Read(src)
	var dst bytes.Buffer
	a, err := newAsyncWriter(&dst, nil, 64<<10, 3)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(src); {
		n := min(len(src)-off, 1+rand.Intn(200<<10))
		if k, err := a.Write(src[off : off+n]); err != nil || k != n {
			t.Fatalf("Write = %d, %v", k, err)
		}
		off += n
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst.Bytes(), src) || a.n != int64(len(src)) {
		t.Fatalf("wrote %d bytes (counted %d), want the %d given, in order", dst.Len(), a.n, len(src))
	}
}

type failAfter struct{ left int }

var errFull = errors.New("no space left on device")

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.left {
		n := f.left
		f.left = 0
		return n, errFull
	}
	f.left -= len(p)
	return len(p), nil
}

func TestAsyncWriterReportsWriteError(t *testing.T) {
	a, err := newAsyncWriter(&failAfter{left: 100 << 10}, nil, 32<<10, 2)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16<<10)
	for i := 0; i < 1000 && err == nil; i++ {
		_, err = a.Write(buf)
	}
	if cerr := a.Close(); !errors.Is(cerr, errFull) {
		t.Fatalf("Close = %v, want %v", cerr, errFull)
	}
	if !errors.Is(err, errFull) {
		t.Fatalf("Write kept succeeding after the destination failed: %v", err)
	}
}
