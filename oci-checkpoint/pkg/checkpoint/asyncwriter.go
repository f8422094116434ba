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
	firstErr
}

// firstErr keeps the first error a writer's goroutines report.
type firstErr struct {
	mu  sync.Mutex
	err error
}

func (e *firstErr) fail(err error) {
	e.mu.Lock()
	if e.err == nil {
		e.err = err
	}
	e.mu.Unlock()
}

func (e *firstErr) failed() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// fillBuffers copies p into *buf, calling full each time *buf is full (it
// hands the buffer on and sets *buf to an empty one), and stops at the
// first error failed reports. It returns how much of p it took.
func fillBuffers(buf *[]byte, p []byte, failed func() error, full func()) (int, error) {
	written := 0
	for len(p) > 0 {
		if err := failed(); err != nil {
			return written, err
		}
		k := copy((*buf)[len(*buf):cap(*buf)], p)
		*buf = (*buf)[:len(*buf)+k]
		p, written = p[k:], written+k
		if len(*buf) == cap(*buf) {
			full()
		}
	}
	return written, nil
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
				a.fail(err)
			}
		}
		a.free <- b[:0]
	}
}

func (a *asyncWriter) Write(p []byte) (int, error) {
	if a.buf == nil {
		return 0, errors.New("write after close")
	}
	return fillBuffers(&a.buf, p, a.failed, func() {
		a.full <- a.buf
		a.buf = <-a.free
	})
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
