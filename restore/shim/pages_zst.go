//go:build !windows

// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package shim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	zpages "rekindle.local/contract/pages"
)

// A checkpoint may carry CRIU's pages images compressed, as
// pages-N.img.zst in the zstd seekable format (zstd's
// contrib/seekable_format: independent frames, then a table of their
// sizes in a skippable frame), as package pages of Rekindle's contract
// module describes and oci-checkpoint writes it. CRIU reads pages images
// with pread at any offset and cannot read these; the restore decodes
// them first, every frame on its own, on every core.
const (
	// pagesDecoders: beyond this the page faults, not the decoders, set
	// the pace.
	pagesDecoders = 16
	// pagesImagesAtOnce bound the frames read ahead of the decoders.
	pagesImagesAtOnce = 4
	// pagesCopiers copy the other images, each a small read.
	pagesCopiers = 8
)

type compressedImage struct {
	name    string // pages-N.img.zst
	frames  []zpages.Frame
	content int64
}

// hasCompressedPages says whether the CRIU image directory dir holds a
// compressed pages image.
func hasCompressedPages(dir string) (bool, error) {
	m, err := filepath.Glob(filepath.Join(dir, "pages-*.img"+zpages.Suffix))
	return len(m) > 0, err
}

// planExpand reads the CRIU image directory dir: its compressed pages
// images and the rest, which must be regular files, and the room all of
// them take decoded in a tmpfs (whole pages each).
func planExpand(dir string) (images []compressedImage, others []string, total int64, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, 0, err
	}
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() {
			return nil, nil, 0, fmt.Errorf("%s is not a regular file", name)
		}
		fi, err := e.Info()
		if err != nil {
			return nil, nil, 0, err
		}
		if !strings.HasPrefix(name, "pages-") || !strings.HasSuffix(name, ".img"+zpages.Suffix) {
			others = append(others, name)
			total += roundUpPage(fi.Size())
			continue
		}
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return nil, nil, 0, err
		}
		frames, content, err := zpages.ReadSeekTable(f, fi.Size())
		f.Close()
		if err != nil {
			return nil, nil, 0, fmt.Errorf("%s: %w", name, err)
		}
		images = append(images, compressedImage{name, frames, content})
		total += roundUpPage(content)
	}
	return images, others, total, nil
}

func roundUpPage(n int64) int64 {
	p := int64(os.Getpagesize())
	return (n + p - 1) / p * p
}

// memAvailable is the kernel's estimate of the memory available for new
// work (MemAvailable in /proc/meminfo), in bytes; -1 if unknown.
func memAvailable() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		var kb int64
		if n, _ := fmt.Sscanf(l, "MemAvailable: %d kB", &kb); n == 1 {
			return kb << 10
		}
	}
	return -1
}

// DecodePages writes the CRIU images of dir into target, an empty
// directory, as the restore reads them: the compressed pages images
// decoded by at most decoders goroutines. It returns the bytes they take
// decoded. The checkpoint cache keeps such a copy of an entry that
// restores often (restore/checkpointimage, decoded.go); room refuses,
// before anything is written, more than its file system can take.
func DecodePages(ctx context.Context, dir, target string, decoders int, room func(int64) error) (int64, error) {
	images, others, total, err := planExpand(dir)
	if err != nil {
		return 0, err
	}
	if err := room(total); err != nil {
		return 0, err
	}
	return total, expandPagesInto(ctx, dir, target, images, others, max(decoders, 1))
}

// expandPagesInto writes the CRIU images of dir into target, an empty
// directory: the others copied, the compressed pages images decoded by at
// most decoders goroutines.
func expandPagesInto(ctx context.Context, dir, target string, images []compressedImage, others []string, decoders int) error {
	// The shim runs on GOMAXPROCS 4 (its manager) or 2 (pkg/shim), which
	// would hold the decoders to as many cores: take the host's while
	// decoding.
	if procs, prev := decoders, runtime.GOMAXPROCS(0); prev < procs {
		runtime.GOMAXPROCS(procs)
		defer runtime.GOMAXPROCS(prev)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(decoders),
		zstd.WithDecodeAllCapLimit(true), zstd.WithDecoderMaxMemory(zpages.FrameMax))
	if err != nil {
		return err
	}
	defer dec.Close()
	// Everything at once, the largest images first: a process's images
	// are one large file and many small ones, each a read from a cold
	// disk, and a few images decoding together keep every decoder busy.
	// The decoder itself bounds how many frames decode at a time.
	sort.Slice(images, func(i, j int) bool { return images[i].content > images[j].content })
	var (
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
		slots    = make(chan struct{}, pagesImagesAtOnce)
	)
	fail := func(err error) { once.Do(func() { firstErr = err }) }
	names := make(chan string, len(others))
	for _, name := range others {
		names <- name
	}
	close(names)
	for range pagesCopiers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range names {
				if err := copyImage(filepath.Join(dir, name), filepath.Join(target, name)); err != nil {
					fail(err)
				}
			}
		}()
	}
	for _, img := range images {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			if err := ctx.Err(); err != nil {
				fail(err)
				return
			}
			if err := decodeImage(dec, filepath.Join(dir, img.name), filepath.Join(target, strings.TrimSuffix(img.name, zpages.Suffix)), img, decoders); err != nil {
				fail(fmt.Errorf("%s: %w", img.name, err))
			}
		}()
	}
	wg.Wait()
	return firstErr
}

func copyImage(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// decodeImage decodes the frames of img, the file src, into dst at their
// places, several at once: each worker reads a frame and decodes it
// straight into a shared mapping of dst.
func decodeImage(dec *zstd.Decoder, src, dst string, img compressedImage, decoders int) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	if img.content == 0 {
		return nil
	}
	if err := out.Truncate(img.content); err != nil {
		return err
	}
	mem, err := unix.Mmap(int(out.Fd()), 0, int(img.content), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	defer unix.Munmap(mem)

	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
	)
	fail := func(err error) { once.Do(func() { firstErr = err }) }
	for range min(decoders, len(img.frames)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A write to the mapping past the file system's room faults
			// (SIGBUS): make that this decode's error, not the shim's end.
			debug.SetPanicOnFault(true)
			defer func() {
				if r := recover(); r != nil {
					fail(fmt.Errorf("writing the decoded pages faulted (out of room?): %v", r))
					next.Store(int64(len(img.frames)))
				}
			}()
			var buf []byte
			for {
				i := next.Add(1) - 1
				if i >= int64(len(img.frames)) {
					return
				}
				f := img.frames[i]
				if int64(cap(buf)) < f.Size {
					buf = make([]byte, f.Size)
				}
				if _, err := in.ReadAt(buf[:f.Size], f.Off); err != nil {
					fail(fmt.Errorf("read frame %d: %w", i, err))
					next.Store(int64(len(img.frames)))
					return
				}
				at := mem[f.ContentOff : f.ContentOff : f.ContentOff+f.Content]
				got, err := dec.DecodeAll(buf[:f.Size], at)
				if errors.Is(err, zstd.ErrDecoderSizeExceeded) {
					err = fmt.Errorf("decodes to more than the %d bytes its table says", f.Content)
				} else if err == nil && int64(len(got)) != f.Content {
					err = fmt.Errorf("%d bytes, its table says %d", len(got), f.Content)
				} else if err == nil && f.Content > 0 && &got[0] != &mem[f.ContentOff] {
					err = errors.New("not decoded in place")
				}
				if err != nil {
					fail(fmt.Errorf("frame %d: %w", i, err))
					next.Store(int64(len(img.frames)))
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}
