package checkpoint

import (
	"bytes"
	"context"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
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
	left, _ := filepath.Glob(filepath.Join(TmpDir(root), "*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// containerd's store walk, which its garbage collector sweeps by, sees only
// digests while a layer is being written and after a killed create, and a
// later create removes what the killed one left (not a live one's file).
func TestBlobFileKeepsTheStoreWalkable(t *testing.T) {
	root := t.TempDir()
	cs, err := local.NewStore(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	data := []byte("an unreferenced blob")
	if err := content.WriteBlob(ctx, cs, "ref", bytes.NewReader(data), ocispec.Descriptor{Digest: digest.FromBytes(data), Size: int64(len(data))}); err != nil {
		t.Fatal(err)
	}
	walk := func(when string) {
		t.Helper()
		var got []digest.Digest
		if err := cs.Walk(ctx, func(i content.Info) error { got = append(got, i.Digest); return nil }); err != nil {
			t.Fatalf("%s: walk: %v", when, err)
		}
		if len(got) != 1 || got[0] != digest.FromBytes(data) {
			t.Fatalf("%s: the walk reports %v, want only %s", when, got, digest.FromBytes(data))
		}
	}
	live, err := createBlob(root)
	if err != nil {
		t.Fatal(err)
	}
	live.Write(make([]byte, directAlign))
	walk("while a layer is written")
	// A killed create: its file stays, unlocked.
	killed := filepath.Join(TmpDir(root), "layer-killed")
	if err := os.WriteFile(killed, []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	walk("after a killed create")
	next, err := createBlob(root)
	if err != nil {
		t.Fatal(err)
	}
	defer next.remove()
	if _, err := os.Stat(killed); !os.IsNotExist(err) {
		t.Errorf("the killed create's file is still there: %v", err)
	}
	if _, err := os.Stat(live.tmp); err != nil {
		t.Errorf("a live create's file was removed: %v", err)
	}
	live.remove()
	// The collector can delete the unreferenced blob.
	if err := cs.Delete(ctx, digest.FromBytes(data)); err != nil {
		t.Fatal(err)
	}
}
