package checkpoint

import (
	"errors"
	"hash"
	"io"
	"sync"

	"golang.org/x/sys/unix"
)

// asyncWriter hands full buffers to a goroutine that writes them to w (and
// hashes them into h, when given, at the same time), so that producing the
// next bytes (reading files, building the tar) overlaps with writing and
// hashing the previous ones. Buffers are page-aligned, for O_DIRECT; every
// buffer but the last reaches w full. Not safe for concurrent use.
type asyncWriter struct {
	w    io.Writer
	h    hash.Hash
	buf  []byte
	full chan []byte
	free chan []byte
	done chan struct{}
	bufs [][]byte
	n    int64 // bytes written to w, valid after Close

	mu  sync.Mutex
	err error
}

func newAsyncWriter(w io.Writer, h hash.Hash, size, count int) (*asyncWriter, error) {
	a := &asyncWriter{w: w, h: h, full: make(chan []byte, count), free: make(chan []byte, count), done: make(chan struct{})}
	for i := 0; i < count; i++ {
		b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			a.unmap()
			return nil, err
		}
		a.bufs = append(a.bufs, b)
		a.free <- b[:0]
	}
	a.buf = <-a.free
	go a.drain()
	return a, nil
}

func (a *asyncWriter) unmap() {
	for _, b := range a.bufs {
		unix.Munmap(b)
	}
	a.bufs = nil
}

func (a *asyncWriter) drain() {
	defer close(a.done)
	for b := range a.full {
		if a.failed() == nil {
			var wg sync.WaitGroup
			if a.h != nil {
				wg.Add(1)
				go func() { a.h.Write(b); wg.Done() }()
			}
			n, err := a.w.Write(b)
			wg.Wait()
			a.n += int64(n)
			if err == nil && n < len(b) {
				err = io.ErrShortWrite
			}
			if err != nil {
				a.mu.Lock()
				a.err = err
				a.mu.Unlock()
			}
		}
		a.free <- b[:0]
	}
}

func (a *asyncWriter) failed() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

func (a *asyncWriter) Write(p []byte) (int, error) {
	if a.buf == nil {
		return 0, errors.New("write after close")
	}
	written := 0
	for len(p) > 0 {
		if err := a.failed(); err != nil {
			return written, err
		}
		k := copy(a.buf[len(a.buf):cap(a.buf)], p)
		a.buf = a.buf[:len(a.buf)+k]
		p, written = p[k:], written+k
		if len(a.buf) == cap(a.buf) {
			a.full <- a.buf
			a.buf = <-a.free
		}
	}
	return written, nil
}

// Close writes what is buffered, waits for the writer goroutine, frees the
// buffers and returns the first write error.
func (a *asyncWriter) Close() error {
	if a.buf == nil {
		return a.failed()
	}
	if len(a.buf) > 0 {
		a.full <- a.buf
	}
	a.buf = nil
	close(a.full)
	<-a.done
	a.unmap()
	return a.failed()
}
