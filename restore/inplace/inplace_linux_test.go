// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package inplace

import (
	"archive/tar"
	"bytes"
	"context"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/diff"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"
	keys "rekindle.local/contract/annotations"
	"rekindle.local/contract/layout"
)

// blob is a layer's blob as containerd's local content store hands it to
// the applier: a reader that also gives its file.
type blob struct{ f *os.File }

func (b blob) ReadAt(p []byte, off int64) (int, error) { return b.f.ReadAt(p, off) }
func (b blob) Close() error                            { return nil }
func (b blob) File() *os.File                          { return b.f }

func (b blob) Size() int64 {
	fi, err := b.f.Stat()
	if err != nil {
		return -1
	}
	return fi.Size()
}

// layer writes a tar of files (directories made for their parents) as a
// blob in the test's directory; it returns the blob's descriptor, asking
// to be kept in place, and the blob opened.
func layer(t *testing.T, files map[string][]byte) (ocispec.Descriptor, blob) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	dirs := map[string]bool{}
	for _, n := range names {
		if d := filepath.Dir(n); d != "." && !dirs[d] {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
				t.Fatal(err)
			}
		}
		if err := tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(files[n]))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(files[n]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return ocispec.Descriptor{
		MediaType:   ocispec.MediaTypeImageLayer,
		Digest:      digest.FromBytes(buf.Bytes()),
		Size:        int64(buf.Len()),
		Annotations: map[string]string{keys.LayerInPlace: keys.LayerInPlaceEROFS},
	}, blob{f}
}

func checkpointFiles() map[string][]byte {
	big := make([]byte, 1<<20+7)
	rand.New(rand.NewSource(1)).Read(big)
	return map[string][]byte{"checkpoint/pages-1.img": big, "checkpoint/core-1.img": []byte("core"), "spec.dump": []byte("{}")}
}

func requireMkfsErofs(t *testing.T) {
	out, err := exec.Command("mkfs.erofs", "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--tar=") {
		t.Skip("no mkfs.erofs with --tar in PATH (erofs-utils 1.7 or later)")
	}
}

// snapshot is a snapshot of one directory, as the native and overlay
// snapshotters give the applier.
func snapshot(t *testing.T) (string, []mount.Mount) {
	dir := t.TempDir()
	return dir, []mount.Mount{{Type: "bind", Source: dir, Options: []string{"rbind", "rw"}}}
}

// TestApplyKeepsACheckpointLayerInPlace: the snapshot holds the EROFS index
// and a hard link of the blob, and mounting the index gives the layer's files.
func TestApplyKeepsACheckpointLayerInPlace(t *testing.T) {
	requireMkfsErofs(t)
	files := checkpointFiles()
	desc, b := layer(t, files)
	dir, mounts := snapshot(t)
	var progress int64
	kept, err := Apply(context.Background(), desc, b, mounts, diff.ApplyConfig{Progress: func(n int64) { progress = n }})
	if err != nil || !kept {
		t.Fatalf("kept %v, %v; want the layer kept in place", kept, err)
	}
	if progress != desc.Size {
		t.Errorf("progress %d, want the layer's %d bytes", progress, desc.Size)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{layout.InPlaceIndex, layout.InPlaceBlob}; !slices.Equal(names, want) {
		t.Fatalf("snapshot holds %v, want %v", names, want)
	}
	orig, _ := b.f.Stat()
	link, _ := os.Stat(filepath.Join(dir, layout.InPlaceBlob))
	if link == nil || !os.SameFile(orig, link) {
		t.Fatalf("%s is not a hard link of the blob", layout.InPlaceBlob)
	}
	if os.Getuid() != 0 {
		t.Skip("mounting the index needs root")
	}
	mnt := t.TempDir()
	if err := unix.Mount(filepath.Join(dir, layout.InPlaceIndex), mnt, "erofs", unix.MS_RDONLY,
		"device="+filepath.Join(dir, layout.InPlaceBlob)); err != nil {
		t.Skipf("cannot mount erofs from files here (Linux 6.12 or later with CONFIG_EROFS_FS): %v", err)
	}
	defer unix.Unmount(mnt, 0)
	for name, want := range files {
		if got, err := os.ReadFile(filepath.Join(mnt, name)); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s through the index: %d bytes, %v; want the %d written", name, len(got), err, len(want))
		}
	}
}

// TestApplyLeavesOthersToTheExtraction: where a layer cannot or should not
// be kept in place, Apply says so and writes nothing; the applier then
// extracts it.
func TestApplyLeavesOthersToTheExtraction(t *testing.T) {
	requireMkfsErofs(t)
	failing := t.TempDir()
	if err := os.WriteFile(filepath.Join(failing, "mkfs.erofs"), []byte("#!/bin/sh\necho refused >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	type reader interface {
		ReadAt([]byte, int64) (int, error)
		Close() error
		Size() int64
	}
	for _, tc := range []struct {
		name   string
		files  map[string][]byte
		edit   func(*ocispec.Descriptor)
		plain  bool   // the blob is no local file
		path   string // PATH for mkfs.erofs
		mounts func(dir string) []mount.Mount
	}{
		{name: "not asked for", edit: func(d *ocispec.Descriptor) { d.Annotations = nil }},
		{name: "a compressed layer", edit: func(d *ocispec.Descriptor) { d.MediaType = ocispec.MediaTypeImageLayerGzip }},
		{name: "not a checkpoint layer", files: map[string][]byte{"etc/hostname": []byte("x"), "bin/sh": []byte("#!")}},
		{name: "the blob is not a local file", plain: true},
		{name: "no mkfs.erofs", path: "empty"},
		{name: "mkfs.erofs fails", path: failing},
		{name: "the snapshot is not one directory", mounts: func(dir string) []mount.Mount {
			return []mount.Mount{{Type: "overlay", Source: "overlay", Options: []string{"lowerdir=" + dir}}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := tc.files
			if files == nil {
				files = checkpointFiles()
			}
			desc, b := layer(t, files)
			if tc.edit != nil {
				tc.edit(&desc)
			}
			switch tc.path {
			case "":
			case "empty":
				t.Setenv("PATH", t.TempDir())
			default:
				t.Setenv("PATH", tc.path)
			}
			dir, mounts := snapshot(t)
			if tc.mounts != nil {
				mounts = tc.mounts(dir)
			}
			var ra reader = b
			if tc.plain {
				ra = struct{ reader }{b}
			}
			kept, err := Apply(context.Background(), desc, ra, mounts, diff.ApplyConfig{})
			if err != nil || kept {
				t.Fatalf("kept %v, %v; want the layer left to the extraction", kept, err)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Fatalf("the snapshot holds %d entries, want none", len(entries))
			}
		})
	}
}
