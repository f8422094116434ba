// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// coldImages writes CRIU image files of the given sizes in a new directory
// and evicts them from the page cache.
func coldImages(t *testing.T, sizes map[string]int) string {
	t.Helper()
	dir := t.TempDir()
	for name, size := range sizes {
		b := make([]byte, size)
		rand.Read(b)
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		f.Close()
		if pct, err := cachedPercent(p); err != nil || pct > 10 {
			t.Skipf("cannot evict %s from the page cache (%d%% cached, %v): a memory file system?", p, pct, err)
		}
	}
	return dir
}

func cached(t *testing.T, dir, name string) int {
	t.Helper()
	pct, err := cachedPercent(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return pct
}

// TestReadAhead: the pages images are read into the page cache, the other
// images are left to CRIU, and a second read-ahead of the cached images
// reads nothing.
func TestReadAhead(t *testing.T) {
	dir := coldImages(t, map[string]int{"pages-1.img": 20 << 20, "pages-2.img": 3<<20 + 4096, "pages-3.img.zst": 1 << 20, "core-1.img": 1 << 20})
	ra := StartReadAhead(context.Background(), dir)
	<-ra.done
	if got := ra.Stop(); !strings.HasPrefix(got, "read 24 MiB of 24 MiB of pages images ahead") ||
		!strings.HasSuffix(got, "4 readers at idle I/O priority") {
		t.Errorf("first: %s", got)
	}
	for name, want := range map[string]int{"pages-1.img": 100, "pages-2.img": 100, "pages-3.img.zst": 100, "core-1.img": 0} {
		if got := cached(t, dir, name); got != want {
			t.Errorf("%s: %d%% in the page cache, want %d%%", name, got, want)
		}
	}
	ra = StartReadAhead(context.Background(), dir)
	<-ra.done
	if got := ra.Stop(); !strings.HasPrefix(got, "read 0 MiB of 24 MiB") {
		t.Errorf("second, all cached: %s", got)
	}
}

// TestReadAheadStops: Stop returns at once, and the readers stop after
// the chunk each is reading; a cancelled context reads nothing.
func TestReadAheadStops(t *testing.T) {
	dir := coldImages(t, map[string]int{"pages-1.img": 256 << 20})
	ra := StartReadAhead(context.Background(), dir)
	ra.Stop()
	select {
	case <-ra.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the readers did not stop within 10 s of Stop")
	}
	// Each of the 4 readers may have been in its first or second chunk.
	if got := cached(t, dir, "pages-1.img"); got > 25 {
		t.Errorf("pages-1.img: %d%% in the page cache after a stopped read-ahead, want at most 8 chunks' 25%%", got)
	}

	dir = coldImages(t, map[string]int{"pages-1.img": 16 << 20})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ra = StartReadAhead(ctx, dir)
	<-ra.done
	if got := ra.Stop(); !strings.HasPrefix(got, "read 0 MiB of 16 MiB") {
		t.Errorf("cancelled: %s", got)
	}
	if got := cached(t, dir, "pages-1.img"); got != 0 {
		t.Errorf("pages-1.img: %d%% in the page cache after a cancelled read-ahead", got)
	}
}

// TestReadAheadSkipsLinks: a pages image that is not a regular file is
// not read (nor one a link points to).
func TestReadAheadSkipsLinks(t *testing.T) {
	dir := coldImages(t, map[string]int{"target.img": 8 << 20})
	if err := os.Symlink(filepath.Join(dir, "target.img"), filepath.Join(dir, "pages-1.img")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "pages-2.img"), 0o600); err != nil {
		t.Fatal(err)
	}
	ra := StartReadAhead(context.Background(), dir)
	<-ra.done
	if got := ra.Stop(); !strings.HasPrefix(got, "read 0 MiB of 0 MiB") {
		t.Errorf("links and FIFOs: %s", got)
	}
	if got := cached(t, dir, "target.img"); got != 0 {
		t.Errorf("the link's target is %d%% in the page cache", got)
	}
}

// TestChunkReaderOpensRegularFilesOnly: a file swapped for a FIFO or a
// link after the listing is refused at open, without blocking.
func TestChunkReaderOpensRegularFilesOnly(t *testing.T) {
	dir := t.TempDir()
	fifo, link := filepath.Join(dir, "pages-1.img"), filepath.Join(dir, "pages-2.img")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/hostname", link); err != nil {
		t.Fatal(err)
	}
	var r chunkReader
	defer r.close()
	for _, p := range []string{fifo, link} {
		if n, err := r.read(pagesChunk{p, 0, 4096}); err == nil || n != 0 {
			t.Errorf("%s: read %d bytes, err %v; want it refused", p, n, err)
		}
	}
}

// TestReadAheadNoImages: a directory without pages images reads nothing.
func TestReadAheadNoImages(t *testing.T) {
	if got := StartReadAhead(context.Background(), t.TempDir()).Stop(); !strings.HasPrefix(got, "read 0 MiB of 0 MiB") {
		t.Errorf("empty: %s", got)
	}
}

// TestIdleIOPriority: the read-ahead's threads read in the idle class.
func TestIdleIOPriority(t *testing.T) {
	got := make(chan uintptr, 1)
	go func() {
		runtime.LockOSThread() // and ends with the goroutine
		if err := idleIOPriority(); err != nil {
			t.Error(err)
		}
		prio, _, _ := unix.Syscall(unix.SYS_IOPRIO_GET, 1, 0, 0)
		got <- prio
	}()
	if prio := <-got; prio>>13 != 3 {
		t.Errorf("I/O priority %#x, want the idle class (3 << 13)", prio)
	}
}
