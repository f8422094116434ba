package weights

import (
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// align is the offset and length alignment of O_DIRECT reads; a page
// covers the logical block size of the disks we meet.
const align = 4096

// copyJob is one source file and where it goes.
type copyJob struct {
	src, dst string
	size     int64
}

type chunk struct {
	job      int
	off, len int64
}

// openFile is a copy job's source (direct and buffered) and the mapping
// of its destination.
type openFile struct {
	direct, buffered *os.File
	dst              []byte
}

// copyFiles fills each dst (created 0600, preallocated, mapped shared)
// from src with readers goroutines issuing O_DIRECT preads of chunk bytes
// straight into the destination's pages, so each byte is copied once, by
// the disk's DMA. Where O_DIRECT is refused it reads through the page
// cache, saying so in logger. done counts bytes as they land.
func copyFiles(jobs []copyJob, readers int, chunkSize int64, done *atomic.Int64, logger *log.Logger) error {
	files := make([]openFile, len(jobs))
	defer func() {
		for _, f := range files {
			if f.dst != nil {
				unix.Munmap(f.dst)
			}
			if f.direct != nil {
				f.direct.Close()
			}
			if f.buffered != nil {
				f.buffered.Close()
			}
		}
	}()
	var chunks []chunk
	for i, j := range jobs {
		f, err := openJob(j, logger)
		files[i] = f
		if err != nil {
			return err
		}
		for off := int64(0); off < j.size; off += chunkSize {
			chunks = append(chunks, chunk{job: i, off: off, len: min(chunkSize, j.size-off)})
		}
	}
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range max(readers, 1) {
		wg.Go(func() {
			for !failed.Load() {
				i := next.Add(1) - 1
				if i >= int64(len(chunks)) {
					return
				}
				c := chunks[i]
				if err := readChunk(&files[c.job], jobs[c.job], c, done); err != nil {
					once.Do(func() { firstErr = err })
					failed.Store(true)
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

func openJob(j copyJob, logger *log.Logger) (openFile, error) {
	var f openFile
	var err error
	if f.buffered, err = os.Open(j.src); err != nil {
		return f, err
	}
	if d, err := os.OpenFile(j.src, os.O_RDONLY|unix.O_DIRECT, 0); err == nil {
		f.direct = d
	} else {
		logger.Printf("O_DIRECT refused on %s (%v): reading it through the page cache", j.src, err)
	}
	out, err := os.OpenFile(j.dst, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return f, err
	}
	defer out.Close()
	if j.size == 0 {
		return f, nil
	}
	// Reserve the memory now: a full tmpfs fails here with ENOSPC
	// instead of a SIGBUS on a page of the mapping later.
	if err := unix.Fallocate(int(out.Fd()), 0, 0, j.size); err != nil {
		return f, fmt.Errorf("reserve %s for %s in %s: %w", HumanSize(j.size), j.src, j.dst, err)
	}
	// The mapping spans whole pages, so an aligned read of the last
	// chunk stays inside it; the kernel stops the read at the file's end.
	n := (j.size + align - 1) / align * align
	if f.dst, err = unix.Mmap(int(out.Fd()), 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return f, fmt.Errorf("map %s: %w", j.dst, err)
	}
	return f, nil
}

func readChunk(f *openFile, j copyJob, c chunk, done *atomic.Int64) error {
	end := c.off + c.len
	if f.direct != nil {
		buf := f.dst[c.off:min((end+align-1)/align*align, int64(len(f.dst)))]
		n, err := fill(f.direct, buf, c.off, end-c.off)
		done.Add(int64(n))
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("read %s at %d: %w", j.src, c.off+int64(n), err)
		}
		// The device wants another alignment: finish through the cache.
		c.off += int64(n)
	}
	n, err := fill(f.buffered, f.dst[c.off:end], c.off, end-c.off)
	done.Add(int64(n))
	if err != nil {
		return fmt.Errorf("read %s at %d: %w", j.src, c.off+int64(n), err)
	}
	return nil
}

// fill preads into buf from off until want bytes are in; a file shorter
// than its size at validation is an error.
func fill(f *os.File, buf []byte, off, want int64) (int, error) {
	got := 0
	for int64(got) < want {
		n, err := f.ReadAt(buf[got:], off+int64(got))
		got += n
		if int64(got) >= want {
			return int(want), nil
		}
		if err == io.EOF || (err == nil && n == 0) {
			return got, fmt.Errorf("file ended at %d bytes, before its size at validation (changed while loading?)", off+int64(got))
		}
		if err != nil {
			return got, err
		}
	}
	return got, nil
}
