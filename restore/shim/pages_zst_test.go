//go:build linux

// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package shim

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/pkg/testutil"
	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	zpages "rekindle.local/contract/pages"
)

// pages is data that compresses a few times, like a process's memory.
func pages(n int) []byte {
	r := rand.New(rand.NewSource(int64(n)))
	b := make([]byte, n)
	for off := 0; off < n; off += 4096 {
		if r.Intn(3) == 0 {
			r.Read(b[off:min(off+512, n)])
		}
	}
	return b
}

type testFrame struct{ size, content uint32 }

// seekable compresses b in frames of frame bytes in the zstd seekable
// format; edit, when set, may change the table before it is written.
func seekable(t testing.TB, b []byte, frame int, edit func([]testFrame)) []byte {
	enc, err := zstd.NewWriter(nil)
	require.NoError(t, err)
	defer enc.Close()
	var out []byte
	var table []testFrame
	for off := 0; off < len(b); off += frame {
		n := len(out)
		out = enc.EncodeAll(b[off:min(off+frame, len(b))], out)
		table = append(table, testFrame{uint32(len(out) - n), uint32(min(frame, len(b)-off))})
	}
	if edit != nil {
		edit(table)
	}
	sizes := make([][2]uint32, len(table))
	for i, f := range table {
		sizes[i] = [2]uint32{f.size, f.content}
	}
	return append(out, zpages.SeekTable(sizes)...)
}

func imageDir(t testing.TB, files map[string][]byte) string {
	dir := t.TempDir()
	for name, b := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o600))
	}
	return dir
}

func expandTo(t *testing.T, dir string) (string, error) {
	target := t.TempDir()
	images, others, _, err := planExpand(dir)
	if err != nil {
		return target, err
	}
	return target, expandPagesInto(context.Background(), dir, target, images, others, 4)
}

func TestExpandPagesDecodesEachImage(t *testing.T) {
	one, two := pages(5<<20+4096), pages(3*4096)
	dir := imageDir(t, map[string][]byte{
		"pages-1.img.zst": seekable(t, one, 1<<20, nil),
		"pages-2.img.zst": seekable(t, two, 1<<20, nil),
		"pages-3.img.zst": seekable(t, nil, 1<<20, nil),
		"pagemap-1.img":   []byte("pagemap"),
		"inventory.img":   []byte("inventory"),
	})
	target, err := expandTo(t, dir)
	require.NoError(t, err)
	for name, want := range map[string][]byte{"pages-1.img": one, "pages-2.img": two, "pages-3.img": {}, "pagemap-1.img": []byte("pagemap"), "inventory.img": []byte("inventory")} {
		got, err := os.ReadFile(filepath.Join(target, name))
		require.NoError(t, err, name)
		assert.True(t, bytes.Equal(got, want), "%s differs from what the checkpoint holds", name)
	}
	left, _ := filepath.Glob(filepath.Join(target, "*.zst"))
	assert.Empty(t, left, "compressed images copied as well")
}

// TestExpandPagesDecodesTheContractVector: a pages image as oci-checkpoint
// writes it (the contract module's vector) decodes to its content.
func TestExpandPagesDecodesTheContractVector(t *testing.T) {
	v, err := zpages.Vector()
	require.NoError(t, err)
	target, err := expandTo(t, imageDir(t, map[string][]byte{"pages-1.img.zst": v.File}))
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(target, "pages-1.img"))
	require.NoError(t, err)
	assert.Equal(t, len(v.Content), len(got))
	assert.True(t, bytes.Equal(got, v.Content), "pages-1.img differs from the vector's content")
}

func TestExpandPagesRefusesBadImages(t *testing.T) {
	b := pages(3 << 20)
	good := seekable(t, b, 1<<20, nil)
	for _, tc := range []struct {
		name, want string
		file       []byte
	}{
		{"truncated", "seek table", good[:len(good)-3]},
		{"not seekable", "not in the zstd seekable format", good[:len(good)-40]},
		{"frame too large", "more than", seekable(t, b, 1<<20, func(f []testFrame) { f[1].content = zpages.FrameMax + 1 })},
		{"sizes off", "seek table is at", seekable(t, b, 1<<20, func(f []testFrame) { f[0].size-- })},
		{"says less", "frame 2: decodes to more than", seekable(t, b, 1<<20, func(f []testFrame) { f[2].content -= 4096 })},
		{"says more", "frame 0", seekable(t, b, 1<<20, func(f []testFrame) { f[0].content += 4096 })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := expandTo(t, imageDir(t, map[string][]byte{"pages-1.img.zst": tc.file}))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "pages-1.img.zst")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestExpandPagesRefusesOtherThanRegularFiles(t *testing.T) {
	dir := imageDir(t, map[string][]byte{"pages-1.img.zst": seekable(t, pages(8192), 4096, nil)})
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(dir, "inventory.img")))
	_, err := expandTo(t, dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "inventory.img is not a regular file")
}

func TestExpandPagesLeavesUncompressedImagesAlone(t *testing.T) {
	dir := imageDir(t, map[string][]byte{"pages-1.img": pages(8192)})
	target := filepath.Join(t.TempDir(), "criu-pages")
	got, undo, err := ExpandPages(context.Background(), dir, target, Limits{})
	require.NoError(t, err)
	undo()
	assert.Equal(t, dir, got)
	assert.NoDirExists(t, target)
}

func TestExpandPagesIntoMemory(t *testing.T) {
	testutil.RequiresRoot(t)
	b := pages(2 << 20)
	files := map[string][]byte{"pages-7.img.zst": seekable(t, b, 1<<20, nil)}
	// Many small images, as a process of many threads has: each takes a
	// whole page of the tmpfs.
	for i := range 300 {
		files[fmt.Sprintf("core-%d.img", i)] = []byte("core")
	}
	dir := imageDir(t, files)
	target := filepath.Join(t.TempDir(), "criu-pages")
	got, undo, err := ExpandPages(context.Background(), dir, target, Limits{})
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(got, fmt.Sprintf("/proc/%d/fd/", os.Getpid())), "restore from %s", got)
	assert.NoDirExists(t, target, "the mount point is left")
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	assert.NotContains(t, string(mounts), target, "the tmpfs is still in the mount tree")
	var stat unix.Statfs_t
	require.NoError(t, unix.Statfs(got, &stat))
	assert.Equal(t, int64(unix.TMPFS_MAGIC), int64(stat.Type), "not a tmpfs")
	pagesGot, err := os.ReadFile(filepath.Join(got, "pages-7.img"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(pagesGot, b))
	core, err := os.ReadFile(filepath.Join(got, "core-299.img"))
	require.NoError(t, err)
	assert.Equal(t, "core", string(core))
	undo()
	_, err = os.Stat(filepath.Join(got, "pages-7.img"))
	assert.Error(t, err, "the decoded pages outlive undo")
}

func TestExpandPagesFaultIsAnError(t *testing.T) {
	testutil.RequiresRoot(t)
	b := pages(1 << 20)
	z := seekable(t, b, 256<<10, nil)
	frames, content, err := zpages.ReadSeekTable(bytes.NewReader(z), int64(len(z)))
	require.NoError(t, err)
	fd, err := privateTmpfs(filepath.Join(t.TempDir(), "small"), 64<<10, 16)
	require.NoError(t, err)
	defer unix.Close(fd)
	src := filepath.Join(t.TempDir(), "pages-1.img.zst")
	require.NoError(t, os.WriteFile(src, z, 0o600))
	dec, err := zstd.NewReader(nil, zstd.WithDecodeAllCapLimit(true))
	require.NoError(t, err)
	defer dec.Close()
	err = decodeImage(dec, src, fmt.Sprintf("/proc/self/fd/%d/pages-1.img", fd), compressedImage{"pages-1.img.zst", frames, content}, 4)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "faulted")
}

// BenchmarkExpandPages decodes a 512 MiB pages image that compresses
// about five times into a tmpfs, as a restore does. Run it with -cpu 2 to
// see the shim's GOMAXPROCS raised for the decode.
func BenchmarkExpandPages(b *testing.B) {
	testutil.RequiresRoot(b)
	r := rand.New(rand.NewSource(1))
	img := make([]byte, 512<<20)
	for off := 0; off < len(img); off += 4096 {
		r.Read(img[off : off+700])
		copy(img[off+700:off+4096], bytes.Repeat([]byte("torch.Tensor "), 300))
	}
	dir := imageDir(b, map[string][]byte{"pages-1.img.zst": seekable(b, img, 4<<20, nil)})
	images, others, room, err := planExpand(dir)
	require.NoError(b, err)
	b.SetBytes(int64(len(img)))
	b.ResetTimer()
	for range b.N {
		fd, err := privateTmpfs(filepath.Join(b.TempDir(), "criu-pages"), room+(1<<20), 16)
		require.NoError(b, err)
		require.NoError(b, expandPagesInto(context.Background(), dir, fmt.Sprintf("/proc/self/fd/%d", fd), images, others, 4))
		unix.Close(fd)
	}
}
