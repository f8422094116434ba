// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package devshm

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestRoundTrip(t *testing.T) {
	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "sem.a"), []byte("semaphore"), 0o600))
	must(t, os.Link(filepath.Join(src, "sem.a"), filepath.Join(src, "link_remap.3")))
	must(t, os.Mkdir(filepath.Join(src, "d"), 0o750))
	must(t, os.WriteFile(filepath.Join(src, "d", "f"), []byte("x"), 0o4755))
	var buf bytes.Buffer
	n, err := Write(&buf, src, 1<<20)
	must(t, err)
	if n != 10 {
		t.Errorf("wrote %d bytes of content, want 10", n)
	}
	dst := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dst, "sem.a"), []byte("stale"), 0o644)) // replaced
	must(t, Extract(&buf, dst, 1<<20))
	b, err := os.ReadFile(filepath.Join(dst, "link_remap.3"))
	must(t, err)
	if string(b) != "semaphore" {
		t.Errorf("link_remap.3 holds %q", b)
	}
	a, _ := os.Stat(filepath.Join(dst, "sem.a"))
	l, _ := os.Stat(filepath.Join(dst, "link_remap.3"))
	if !os.SameFile(a, l) {
		t.Error("sem.a and link_remap.3 are not one file")
	}
	fi, err := os.Stat(filepath.Join(dst, "d", "f"))
	must(t, err)
	if fi.Mode() != 0o755 {
		t.Errorf("d/f has mode %v, want 0755 (no set-user-ID bit)", fi.Mode())
	}
	di, _ := os.Stat(filepath.Join(dst, "d"))
	if di.Mode().Perm() != 0o750 {
		t.Errorf("d has mode %v", di.Mode())
	}
}

func TestWriteRefuses(t *testing.T) {
	for name, make := range map[string]func(dir string) error{
		"symbolic link": func(dir string) error { return os.Symlink("/etc/shadow", filepath.Join(dir, "s")) },
		"FIFO":          func(dir string) error { return syscall.Mkfifo(filepath.Join(dir, "p"), 0o600) },
		"device":        func(dir string) error { return syscall.Mknod(filepath.Join(dir, "n"), syscall.S_IFCHR|0o600, 0x103) },
		"more than 100 bytes": func(dir string) error {
			f, err := os.Create(filepath.Join(dir, "big"))
			if err == nil {
				err = f.Truncate(1 << 40) // sparse: its size counts
				f.Close()
			}
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			must(t, make(dir))
			_, err := Write(&bytes.Buffer{}, dir, 100)
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Fatalf("Write: %v, want an error naming %q", err, name)
			}
		})
	}
	// The folder itself is never followed through a symbolic link.
	dir := t.TempDir()
	must(t, os.Symlink(t.TempDir(), filepath.Join(dir, "shm")))
	if _, err := Write(&bytes.Buffer{}, filepath.Join(dir, "shm"), 100); err == nil {
		t.Fatal("Write followed a symbolic link for its folder")
	}
}

type entry struct {
	hdr  tar.Header
	data string
}

func archive(t *testing.T, entries ...entry) *bytes.Buffer {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.data))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		must(t, tw.WriteHeader(&h))
		_, err := tw.Write([]byte(e.data))
		must(t, err)
	}
	must(t, tw.Close())
	return &buf
}

func TestExtractRefuses(t *testing.T) {
	reg := func(name, data string) entry { return entry{tar.Header{Typeflag: tar.TypeReg, Name: name}, data} }
	outside := t.TempDir()
	for _, tc := range []struct {
		name    string
		entries []entry
		want    string
	}{
		{"symlink entry", []entry{{tar.Header{Typeflag: tar.TypeSymlink, Name: "s", Linkname: "/etc"}, ""}}, "only directories"},
		{"device entry", []entry{{tar.Header{Typeflag: tar.TypeChar, Name: "n", Devmajor: 1, Devminor: 3}, ""}}, "only directories"},
		{"absolute path", []entry{reg(filepath.Join(outside, "x"), "x")}, "absolute path"},
		{"dot-dot", []entry{reg("a/../../x", "x")}, `".."`},
		{"hard link outside", []entry{{tar.Header{Typeflag: tar.TypeLink, Name: "l", Linkname: "/etc/passwd"}, ""}}, "absolute path"},
		{"hard link to a name not unpacked", []entry{{tar.Header{Typeflag: tar.TypeLink, Name: "l", Linkname: "passwd"}, ""}}, "not a file unpacked before"},
		{"oversize", []entry{reg("a", strings.Repeat("x", 60)), reg("b", strings.Repeat("x", 60))}, "more than 100 bytes"},
		{"file over a directory", []entry{{tar.Header{Typeflag: tar.TypeDir, Name: "d/"}, ""}, reg("d", "x")}, "a directory of that name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := t.TempDir()
			err := Extract(archive(t, tc.entries...), dst, 100)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Extract: %v, want an error with %q", err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
				t.Fatal("a file was written outside the target")
			}
		})
	}
	// A symbolic link already in the target is not followed.
	dst := t.TempDir()
	must(t, os.Symlink(outside, filepath.Join(dst, "d")))
	err := Extract(archive(t, reg("d/x", "x")), dst, 100)
	if err == nil {
		t.Fatal("Extract wrote through a symbolic link")
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
		t.Fatal("a file was written through a symbolic link")
	}
	// A symbolic link where a file goes is replaced, not followed.
	must(t, os.Symlink(filepath.Join(outside, "y"), filepath.Join(dst, "y")))
	must(t, Extract(archive(t, reg("y", "y")), dst, 100))
	if _, err := os.Stat(filepath.Join(outside, "y")); err == nil {
		t.Fatal("a file was written through a symbolic link")
	}
}

func TestWriteExtra(t *testing.T) {
	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "sem.a"), []byte("semaphore"), 0o600))
	must(t, os.WriteFile(filepath.Join(src, "held.tmp"), []byte("held"), 0o600))
	held, err := os.Open(filepath.Join(src, "held.tmp"))
	must(t, err)
	defer held.Close()
	must(t, os.Remove(filepath.Join(src, "held.tmp"))) // open, no name left
	sem, err := os.Open(filepath.Join(src, "sem.a"))
	must(t, err)
	defer sem.Close()
	var buf bytes.Buffer
	_, err = Write(&buf, src, 1<<20, Extra{Name: "link_remap.1", File: sem}, Extra{Name: "link_remap.2", File: held})
	must(t, err)
	dst := t.TempDir()
	must(t, Extract(&buf, dst, 1<<20))
	a, _ := os.Stat(filepath.Join(dst, "sem.a"))
	l, _ := os.Stat(filepath.Join(dst, "link_remap.1"))
	if !os.SameFile(a, l) {
		t.Error("sem.a and link_remap.1 are not one file")
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "link_remap.2")); string(b) != "held" {
		t.Errorf("link_remap.2 holds %q", b)
	}

	// A file of another file system, or a name taken, is refused.
	other, err := os.Open("/proc/self/status")
	must(t, err)
	defer other.Close()
	for _, e := range []Extra{{Name: "link_remap.3", File: other}, {Name: "sem.a", File: sem}, {Name: "../x", File: sem}} {
		if _, err := Write(&bytes.Buffer{}, src, 1<<20, e); err == nil {
			t.Errorf("Write took extra %s from %s", e.Name, e.File.Name())
		}
	}
}
