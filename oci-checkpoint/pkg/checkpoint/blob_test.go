package checkpoint

import (
	"bytes"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"
)

// A blob written through asyncWriter lands under its digest with exactly
// the bytes given, also when its length is not a multiple of the block size
// (O_DIRECT pads the last write and finish cuts it back).
func TestBlobFileWritesUnderItsDigest(t *testing.T) {
	root := t.TempDir()
	src := make([]byte, 5<<20+777)
	rand.New(rand.NewSource(2)).Read(src)
	bf, err := createBlob(root)
	if err != nil {
		t.Fatal(err)
	}
	d := digest.Canonical.Digester()
	a, err := newAsyncWriter(bf, d.Hash(), 1<<20, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write(src); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	want := digest.FromBytes(src)
	if d.Digest() != want {
		t.Fatalf("hashed %s, want %s", d.Digest(), want)
	}
	if err := bf.finish(want); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "blobs", "sha256", want.Encoded()))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src) {
		t.Fatalf("blob has %d bytes, want the %d written", len(got), len(src))
	}
	left, _ := filepath.Glob(filepath.Join(root, "blobs", "sha256", ".rekindle-*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}
