// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/log"
)

const (
	// readAheadChunk is what one reader reads at a time.
	readAheadChunk = 8 << 20
	// readAheadReaders keep the disk's queue busy without taking the
	// CPUs that CRIU's fill threads want once it starts.
	readAheadReaders = 4
)

// ReadAhead reads a checkpoint's memory pages into the page cache while
// the restore gets to them.
//
// A restore from a cold page cache spends its first second or two
// creating the task and, in CRIU, the processes' files and mappings, with
// the disk mostly idle; then CRIU reads the pages images, several
// gigabytes of a GPU engine's host memory, and the disk is the limit.
// Reading them from the start of the restore moves that much of the read
// into the time before it.
type ReadAhead struct {
	cancel context.CancelFunc
	done   chan struct{}
	start  time.Time
	total  int64
	read   atomic.Int64
	// readers counts the readers started, idle those whose thread reads
	// at idle I/O priority.
	readers, idle atomic.Int32
}

type pagesChunk struct {
	path     string
	off, len int64
}

// StartReadAhead starts reading the pages images (pages-*.img, or
// pages-*.img.zst compressed) in the CRIU image directory dir into the
// page cache, largest first, a chunk at a time by a few readers, skipping
// the chunks already cached, until all are read or Stop is called. ctx
// must outlive the restore.
func StartReadAhead(ctx context.Context, dir string) *ReadAhead {
	ctx, cancel := context.WithCancel(ctx)
	ra := &ReadAhead{cancel: cancel, done: make(chan struct{}), start: time.Now()}
	paths, _ := filepath.Glob(filepath.Join(dir, "pages-*.img"))
	// Compressed ones (--compression pages), which the runtime decodes.
	zst, _ := filepath.Glob(filepath.Join(dir, "pages-*.img.zst"))
	paths = append(paths, zst...)
	var files []pagesChunk // a whole file each
	for _, p := range paths {
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
			files = append(files, pagesChunk{p, 0, fi.Size()})
			ra.total += fi.Size()
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].len > files[j].len })
	go func() {
		defer close(ra.done)
		chunks := uncachedChunks(ctx, files)
		var (
			next atomic.Int64
			wg   sync.WaitGroup
		)
		for range min(readAheadReaders, len(chunks)) {
			ra.readers.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				// The restore's own reads, CRIU opening the processes'
				// files one path at a time, must not queue behind these:
				// this thread reads at idle I/O priority. It ends with the
				// goroutine (locked, never unlocked), taking the priority
				// with it.
				runtime.LockOSThread()
				if err := idleIOPriority(); err != nil {
					log.G(ctx).WithError(err).Debug("checkpoint read-ahead: reading at the default I/O priority")
				} else {
					ra.idle.Add(1)
				}
				var r chunkReader
				defer r.close()
				for ctx.Err() == nil {
					i := next.Add(1) - 1
					if i >= int64(len(chunks)) {
						return
					}
					n, err := r.read(chunks[i])
					ra.read.Add(n)
					if err != nil {
						log.G(ctx).WithError(err).Debugf("checkpoint read-ahead: %s", chunks[i].path)
					}
				}
			}()
		}
		wg.Wait()
	}()
	return ra
}

// uncachedChunks cuts files into chunks, leaving out those whose pages are
// all in the page cache (mincore(2), once a file); a file whose residency
// cannot be read is read whole.
func uncachedChunks(ctx context.Context, files []pagesChunk) []pagesChunk {
	page := int64(os.Getpagesize())
	var chunks []pagesChunk
	for _, file := range files {
		f, err := openRegular(file.path)
		if err != nil {
			log.G(ctx).WithError(err).Debugf("checkpoint read-ahead: %s", file.path)
			continue
		}
		vec, _ := residency(f)
		f.Close()
		for off := int64(0); off < file.len; off += readAheadChunk {
			c := pagesChunk{file.path, off, min(readAheadChunk, file.len-off)}
			cached := vec != nil
			for p := c.off / page; cached && p < (c.off+c.len+page-1)/page; p++ {
				cached = p < int64(len(vec)) && vec[p]&1 == 1
			}
			if !cached {
				chunks = append(chunks, c)
			}
		}
	}
	return chunks
}

// Stop ends the read-ahead: each reader stops after the chunk it is
// reading, without Stop waiting for it (an idle-priority read can wait
// long on a busy disk). It says how much was read so far (a chunk that was
// partly cached counts whole; one that was all cached does not), of how
// much, and how long it ran.
func (ra *ReadAhead) Stop() string {
	ra.cancel()
	readers := ra.readers.Load()
	how := "at idle I/O priority"
	if ra.idle.Load() < readers {
		how = "not all at idle I/O priority"
	}
	return fmt.Sprintf("read %d MiB of %d MiB of pages images ahead in %.2fs, %d readers %s",
		ra.read.Load()>>20, ra.total>>20, time.Since(ra.start).Seconds(), readers, how)
}

// chunkReader reads chunks, keeping the file of the last one open: the
// chunks come file by file.
type chunkReader struct {
	buf  []byte
	path string
	f    *os.File
}

// read reads chunk c and returns the bytes read.
func (r *chunkReader) read(c pagesChunk) (int64, error) {
	if c.path != r.path {
		r.close()
		r.path = c.path
		f, err := openRegular(c.path)
		if err != nil {
			return 0, err
		}
		r.f = f
	}
	if r.f == nil {
		return 0, nil
	}
	if r.buf == nil {
		r.buf = make([]byte, readAheadChunk)
	}
	n, err := r.f.ReadAt(r.buf[:c.len], c.off)
	if err == io.EOF {
		err = nil
	}
	return int64(n), err
}

func (r *chunkReader) close() {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
}
