// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package zstdframes

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/semaphore"
)

const (
	// zstdFrameMaxContent is the largest frame decoded on its own.
	zstdFrameMaxContent = 32 << 20
	// zstdFrameBudget bounds the memory of the frames in flight.
	zstdFrameBudget = 256 << 20
	// zstdFrameMaxWorkers: beyond this the consumer of the stream, not
	// the decoders, sets the pace.
	zstdFrameMaxWorkers = 16
)

type zstdFrame struct {
	data   []byte
	weight int64
	stream *zstd.Decoder // the rest of the input, as one stream
	err    error
}

type zstdFrameJob struct {
	src []byte
	fcs int
	out chan<- zstdFrame
}

type zstdFrameReader struct {
	order   chan chan zstdFrame
	budget  *semaphore.Weighted
	ctx     context.Context
	cancel  context.CancelFunc
	workers sync.WaitGroup

	cur    []byte
	frame  []byte // cur's buffer
	weight int64
	stream *zstd.Decoder
	err    error

	mu        sync.Mutex
	streamDec *zstd.Decoder // closed by Close even if never reached
}

// newZstdFrameReader decodes the zstd stream in br.
func newZstdFrameReader(br *bufio.Reader) (*zstdFrameReader, error) {
	n := min(runtime.GOMAXPROCS(0), zstdFrameMaxWorkers)
	dec, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(n),
		zstd.WithDecoderLowmem(false),
		zstd.WithDecodeAllCapLimit(true),
	)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	zr := &zstdFrameReader{
		order:  make(chan chan zstdFrame, zstdFrameBudget/(64<<10)),
		budget: semaphore.NewWeighted(zstdFrameBudget),
		ctx:    ctx,
		cancel: cancel,
	}
	jobs := make(chan zstdFrameJob, n)
	zr.workers.Add(n)
	for range n {
		go func() {
			defer zr.workers.Done()
			for j := range jobs {
				j.out <- decodeZstdFrame(dec, j)
			}
		}()
	}
	go func() {
		zr.workers.Wait()
		dec.Close()
	}()
	go func() {
		defer close(jobs)
		defer close(zr.order)
		zr.split(br, jobs)
	}()
	return zr, nil
}

// zstdFramePool recycles the frames' buffers: at hundreds of MB/s, fresh
// ones would cost more in zeroing and collection than the decoding.
var zstdFramePool sync.Pool

func getZstdFrameBuf(n int) []byte {
	if b, ok := zstdFramePool.Get().(*[]byte); ok && cap(*b) >= n {
		return (*b)[:0]
	}
	return make([]byte, 0, n)
}

func putZstdFrameBuf(b []byte) {
	if cap(b) > 0 {
		zstdFramePool.Put(&b)
	}
}

func decodeZstdFrame(dec *zstd.Decoder, j zstdFrameJob) zstdFrame {
	weight := int64(len(j.src) + j.fcs)
	data, err := dec.DecodeAll(j.src, getZstdFrameBuf(j.fcs))
	putZstdFrameBuf(j.src)
	if err == nil && len(data) != j.fcs {
		err = fmt.Errorf("zstd: frame decoded to %d bytes, its header says %d", len(data), j.fcs)
	}
	return zstdFrame{data: data, weight: weight, err: err}
}

// split cuts r into frames and hands each to the decoders, or the rest of
// r to a stream decoder. Each result is queued in r's order.
func (zr *zstdFrameReader) split(br *bufio.Reader, jobs chan<- zstdFrameJob) {
	for {
		head, err := br.Peek(zstd.HeaderMaxSize)
		if len(head) == 0 {
			if err != io.EOF {
				zr.queue(zstdFrame{err: err})
			}
			return
		}
		var h zstd.Header
		if err := h.Decode(head); err == nil && h.Skippable {
			if _, err := io.CopyN(io.Discard, br, int64(h.HeaderSize)+int64(h.SkippableSize)); err != nil {
				zr.queue(zstdFrame{err: fmt.Errorf("zstd: skippable frame: %w", err)})
				return
			}
			continue
		} else if err != nil || !h.HasFCS || h.FrameContentSize > zstdFrameMaxContent || h.DictionaryID != 0 {
			zr.queueStream(br)
			return
		}
		fcs := int(h.FrameContentSize)
		src, err := readZstdFrame(br, h, 2*fcs+(1<<20))
		if err != nil {
			if errors.Is(err, errZstdFrameUnusual) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				zr.queueStream(io.MultiReader(bytes.NewReader(src), br))
			} else {
				zr.queue(zstdFrame{err: err})
			}
			return
		}
		weight := int64(len(src) + fcs)
		if err := zr.budget.Acquire(zr.ctx, weight); err != nil {
			return
		}
		out := make(chan zstdFrame, 1)
		select {
		case zr.order <- out:
		case <-zr.ctx.Done():
			return
		}
		select {
		case jobs <- zstdFrameJob{src: src, fcs: fcs, out: out}:
		case <-zr.ctx.Done():
			return
		}
	}
}

var errZstdFrameUnusual = errors.New("zstd frame left to the stream decoder")

// readZstdFrame reads one frame whose header h has been peeked: the header,
// every block (RFC 8878 section 3.1.1.2) and the checksum. What was read is
// returned also on error.
func readZstdFrame(r io.Reader, h zstd.Header, limit int) ([]byte, error) {
	src := getZstdFrameBuf(h.HeaderSize + limit/2)[:h.HeaderSize]
	if _, err := io.ReadFull(r, src); err != nil {
		return src, err
	}
	for {
		n := len(src)
		src = append(src, 0, 0, 0)
		if _, err := io.ReadFull(r, src[n:]); err != nil {
			return src[:n], err
		}
		bh := uint32(src[n]) | uint32(src[n+1])<<8 | uint32(src[n+2])<<16
		size := int(bh >> 3)
		switch (bh >> 1) & 3 {
		case 1: // RLE: one byte repeated
			size = 1
		case 3: // reserved: the stream decoder names the error
			return src, errZstdFrameUnusual
		}
		if len(src)+size > limit {
			return src, errZstdFrameUnusual
		}
		src = append(src, make([]byte, size)...)
		if _, err := io.ReadFull(r, src[n+3:]); err != nil {
			return src[:n+3], err
		}
		if bh&1 != 0 {
			break
		}
	}
	if h.HasCheckSum {
		n := len(src)
		src = append(src, 0, 0, 0, 0)
		if _, err := io.ReadFull(r, src[n:]); err != nil {
			return src[:n], err
		}
	}
	return src, nil
}

func (zr *zstdFrameReader) queue(f zstdFrame) {
	out := make(chan zstdFrame, 1)
	out <- f
	select {
	case zr.order <- out:
	case <-zr.ctx.Done():
	}
}

func (zr *zstdFrameReader) queueStream(r io.Reader) {
	zr.mu.Lock()
	defer zr.mu.Unlock()
	if zr.ctx.Err() != nil {
		return
	}
	dec, err := zstd.NewReader(r, zstd.WithDecoderLowmem(false))
	if err != nil {
		zr.queue(zstdFrame{err: err})
		return
	}
	zr.streamDec = dec
	zr.queue(zstdFrame{stream: dec})
}

func (zr *zstdFrameReader) Read(p []byte) (int, error) {
	for len(zr.cur) == 0 {
		switch {
		case zr.err != nil:
			return 0, zr.err
		case zr.stream != nil:
			return zr.stream.Read(p)
		}
		zr.next()
	}
	n := copy(p, zr.cur)
	zr.cur = zr.cur[n:]
	return n, nil
}

// next moves to the next frame in order, giving back the last one's share
// of the budget.
func (zr *zstdFrameReader) next() {
	zr.budget.Release(zr.weight)
	putZstdFrameBuf(zr.frame)
	zr.cur, zr.frame, zr.weight = nil, nil, 0
	out, ok := <-zr.order
	if !ok {
		zr.err = io.EOF
		return
	}
	f := <-out
	switch {
	case f.err != nil:
		zr.err = f.err
	case f.stream != nil:
		zr.stream = f.stream
	default:
		zr.cur, zr.frame, zr.weight = f.data, f.data, f.weight
	}
}

// Close stops the decoders. The goroutine reading the input ends when its
// read returns.
func (zr *zstdFrameReader) Close() error {
	zr.cancel() // first: the splitter may hold mu while it waits on the reader
	zr.mu.Lock()
	defer zr.mu.Unlock()
	if zr.streamDec != nil {
		zr.streamDec.Close()
	}
	return nil
}
