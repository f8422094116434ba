package checkpoint

import (
	"errors"
	"io"
	"runtime"

	"github.com/klauspost/compress/zstd"
)

// frameSize is how much of the tar stream each zstd frame holds. A stream
// encoder compresses on about one core (a 5.8 GB vLLM layer took 40 s on a
// 16-core host); independent frames compress on all of them. Concatenated
// frames are one valid zstd stream for any decoder, and each frame header
// carries its content size.
const frameSize = 8 << 20

// zstdFrames compresses what is written to it in frames of frameSize, one
// goroutine a frame, and writes the frames to w in order.
type zstdFrames struct {
	w io.Writer
	// onFrame, when set, is told each frame's compressed and content
	// sizes, in order, once the frame is written.
	onFrame func(compressed, content int)
	enc     *zstd.Encoder
	buf     []byte
	free    chan []byte
	// Each frame in flight, in order: its result arrives on its channel.
	queue chan chan frameResult
	done  chan struct{}
	firstErr
}

type frameResult struct{ in, out []byte }

var errFramesClosed = errors.New("zstd frames: write after close")

func newZstdFrames(w io.Writer) (*zstdFrames, error) {
	return newZstdFramesOf(w, frameSize, nil)
}

// newZstdFramesOf writes frames of size bytes of content and tells onFrame
// (if not nil) the sizes of each.
func newZstdFramesOf(w io.Writer, size int, onFrame func(compressed, content int)) (*zstdFrames, error) {
	// Each frame in flight holds an encoder's window and tables, its input
	// and its output: bound how many (about 25 MiB each for 8 MiB frames).
	n := min(runtime.GOMAXPROCS(0), 16)
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(n), zstd.WithEncoderCRC(true),
		zstd.WithLowerEncoderMem(true))
	if err != nil {
		return nil, err
	}
	z := &zstdFrames{w: w, onFrame: onFrame, enc: enc, free: make(chan []byte, n+1),
		queue: make(chan chan frameResult, n), done: make(chan struct{})}
	for i := 0; i < n+1; i++ {
		z.free <- make([]byte, 0, size)
	}
	z.buf = <-z.free
	go z.drain()
	return z, nil
}

// drain writes the frames in the order they were queued.
func (z *zstdFrames) drain() {
	defer close(z.done)
	for c := range z.queue {
		r := <-c
		if z.failed() == nil {
			if _, err := z.w.Write(r.out); err != nil {
				z.fail(err)
			} else if z.onFrame != nil {
				z.onFrame(len(r.out), len(r.in))
			}
		}
		z.free <- r.in[:0]
	}
}

func (z *zstdFrames) flush() {
	in, enc := z.buf, z.enc
	c := make(chan frameResult, 1)
	z.queue <- c
	go func() {
		c <- frameResult{in: in, out: enc.EncodeAll(in, make([]byte, 0, len(in)/2))}
	}()
	z.buf = <-z.free
}

func (z *zstdFrames) Write(p []byte) (int, error) {
	if z.enc == nil {
		return 0, errFramesClosed
	}
	return fillBuffers(&z.buf, p, z.failed, z.flush)
}

// Abort stops writing frames to w: what is in flight is dropped, and Close
// returns err. For a stream that failed at its source.
func (z *zstdFrames) Abort(err error) { z.fail(err) }

// Close compresses what is left and waits until every frame is written (or
// dropped, after an error): nothing writes to w once it returns.
func (z *zstdFrames) Close() error {
	if z.enc == nil {
		return errFramesClosed
	}
	if len(z.buf) > 0 && z.failed() == nil {
		z.flush()
	}
	close(z.queue)
	<-z.done
	z.enc.Close()
	z.enc = nil
	return z.failed()
}
