package inroot

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// readWithin runs ReadFile in a goroutine and fails the test if it has not
// returned within 5s: a ReadFile that blocks must not hang the test run.
func readWithin(t *testing.T, r *Root, name string) ([]byte, error) {
	t.Helper()
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := r.ReadFile(name)
		done <- result{b, err}
	}()
	select {
	case res := <-done:
		return res.b, res.err
	case <-time.After(5 * time.Second):
		t.Fatalf("ReadFile(%q) still blocked after 5s", name)
		return nil, nil
	}
}

// A FIFO the container put in place of a file it should write must be
// refused at once: an open for reading would wait for a writer forever.
func TestReadFileRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(dir, "status"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := readWithin(t, r, "/status")
	if err == nil {
		t.Fatalf("ReadFile of a FIFO: %q and no error", b)
	}
	want := filepath.Join(dir, "status") + " is a FIFO, not a regular file"
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q lacks %q", err, want)
	}
}

// Other non-regular files are refused too, each named.
func TestReadFileRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := readWithin(t, r, "/d"); err == nil || !strings.Contains(err.Error(), "is a directory, not a regular file") {
		t.Fatalf("ReadFile of a directory: %v", err)
	}
	if err := os.Symlink("d", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	if _, err := readWithin(t, r, "/l"); err == nil || !strings.Contains(err.Error(), "is a symlink") {
		t.Fatalf("ReadFile of a symlink: %v", err)
	}
}

// A file above MaxReadSize is refused without being read whole; one of
// exactly MaxReadSize still reads.
func TestReadFileCapsTheSize(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	// sparse: a large file costs no disk (a code without the cap reads it
	// whole and fails here rather than running out of memory)
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := readWithin(t, r, "/big")
	if err == nil {
		t.Fatalf("ReadFile of a 64 MiB file: %d bytes and no error", len(b))
	}
	if want := big + " is larger than 1048576 bytes"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q lacks %q", err, want)
	}
	if err := os.Truncate(big, MaxReadSize+1); err != nil {
		t.Fatal(err)
	}
	if _, err := readWithin(t, r, "/big"); err == nil {
		t.Fatal("ReadFile of a file one byte over the cap: no error")
	}
	full := bytes.Repeat([]byte("x"), MaxReadSize)
	if err := os.WriteFile(filepath.Join(dir, "full"), full, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := readWithin(t, r, "/full"); err != nil || !bytes.Equal(b, full) {
		t.Fatalf("ReadFile of a file of exactly MaxReadSize bytes: %d bytes, %v", len(b), err)
	}
}

// A small regular file, the usual case, reads whole, and an empty one reads
// as empty.
func TestReadFileReadsARegularFile(t *testing.T) {
	dir := t.TempDir()
	want := []byte(`{"outcome": "resumed"}` + "\n")
	if err := os.WriteFile(filepath.Join(dir, "status"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "empty"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if b, err := readWithin(t, r, "status"); err != nil || !bytes.Equal(b, want) {
		t.Fatalf("ReadFile: %q, %v", b, err)
	}
	if b, err := readWithin(t, r, "/empty"); err != nil || len(b) != 0 {
		t.Fatalf("ReadFile of an empty file: %q, %v", b, err)
	}
}

// A file whose size says nothing (/proc reports 0), or that grew since its
// fstat, is cut at the cap as it is read.
func TestReadFileCapsWhatItReads(t *testing.T) {
	whole, err := os.ReadFile("/proc/kallsyms")
	if err != nil || len(whole) <= MaxReadSize {
		t.Skipf("no /proc/kallsyms larger than %d bytes to read here (%d bytes, %v)", MaxReadSize, len(whole), err)
	}
	r, err := Open("/proc")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if b, err := readWithin(t, r, "kallsyms"); err == nil || !strings.Contains(err.Error(), "is larger than 1048576 bytes") {
		t.Fatalf("ReadFile of /proc/kallsyms (%d bytes): %d bytes, %v", len(whole), len(b), err)
	}
}

func TestChownDirRefusesASymlink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "own"), 0o755); err != nil {
		t.Fatal(err)
	}
	host := t.TempDir()
	if err := os.Symlink(host, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.ChownDir("/own", 1234, 4321); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "own"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 1234 || st.Gid != 4321 {
		t.Fatalf("own is %d:%d, want 1234:4321", st.Uid, st.Gid)
	}
	if err := r.ChownDir("/link", 1234, 4321); err == nil {
		t.Fatal("ChownDir followed a symlink")
	}
	if err := unix.Stat(host, &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid == 1234 {
		t.Fatal("the symlink's target was given away")
	}
}
