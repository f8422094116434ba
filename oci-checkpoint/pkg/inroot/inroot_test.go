package inroot

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReadRemove(t *testing.T) {
	dir := t.TempDir()
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.WriteFile("/.rekindle/devices.json", []byte("[]"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, ".rekindle/devices.json"))
	if err != nil || string(got) != "[]" {
		t.Fatalf("file on disk: %q, %v", got, err)
	}
	if b, err := r.ReadFile(".rekindle/devices.json"); err != nil || string(b) != "[]" {
		t.Fatalf("ReadFile: %q, %v", b, err)
	}
	if err := r.Remove("/.rekindle/devices.json"); err != nil {
		t.Fatal(err)
	}
	if err := r.Remove("/.rekindle/devices.json"); err != nil {
		t.Fatalf("removing a missing file: %v", err)
	}
	if err := r.Remove("/nodir/x"); err != nil {
		t.Fatalf("removing under a missing dir: %v", err)
	}
}

// A symlink the container planted must resolve inside the root, never on
// the host.
func TestSymlinkStaysInRoot(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, ".rekindle")); err != nil {
		t.Fatal(err)
	}
	r, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_ = r.WriteFile("/.rekindle/wake", []byte("x"), 0o644)
	if _, err := os.Stat(filepath.Join(outside, "wake")); err == nil {
		t.Fatalf("write escaped the root into %s", outside)
	}
	if err := os.Symlink("/etc/hostname", filepath.Join(root, "f")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadFile("/f"); err == nil {
		t.Fatal("ReadFile followed a symlink")
	}
}

// A read that fails part way must fail ReadFile, not return what came
// before the error. /proc/self/mem is a regular file whose first page is
// unmapped in every process: reading it fails with EIO.
func TestReadFileReportsReadErrors(t *testing.T) {
	r, err := Open("/proc/self")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if b, err := r.ReadFile("mem"); err == nil {
		t.Fatalf("ReadFile of /proc/self/mem: %d bytes and no error", len(b))
	}
}
