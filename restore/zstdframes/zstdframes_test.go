// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package zstdframes

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/diff"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/klauspost/compress/zstd"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// zstdFrames compresses data as independent frames of frameSize bytes,
// each header with its content size, as a parallel encoder writes them.
func zstdFrames(t testing.TB, data []byte, frameSize int) []byte {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	require.NoError(t, err)
	defer enc.Close()
	var out []byte
	for off := 0; off < len(data); off += frameSize {
		out = enc.EncodeAll(data[off:min(off+frameSize, len(data))], out)
	}
	return out
}

// zstdSkippable is a skippable frame of n bytes of payload.
func zstdSkippable(n int) []byte {
	b := []byte{0x5e, 0x2a, 0x4d, 0x18, byte(n), byte(n >> 8), byte(n >> 16), byte(n >> 24)}
	return append(b, bytes.Repeat([]byte{0xee}, n)...)
}

// zstdOneStream compresses data as one frame without a content size, as a
// stream encoder writes it.
func zstdOneStream(t testing.TB, data []byte) []byte {
	var b bytes.Buffer
	enc, err := zstd.NewWriter(&b)
	require.NoError(t, err)
	_, err = enc.Write(data)
	require.NoError(t, err)
	require.NoError(t, enc.Close())
	return b.Bytes()
}

func decompressAll(t *testing.T, compressed []byte) ([]byte, *zstdFrameReader, error) {
	ds, err := Decompress(bytes.NewReader(compressed))
	require.NoError(t, err)
	defer ds.Close()
	zr, ok := ds.(*zstdFrameReader)
	require.True(t, ok, "a zstd stream should go to the frame decoder, got %T", ds)
	out, err := io.ReadAll(ds)
	return out, zr, err
}

// generateData is size bytes, half random and half repeated, so that it
// compresses somewhat.
func generateData(t testing.TB, size int) []byte {
	rnd := rand.New(rand.NewPCG(uint64(size), 7))
	b := make([]byte, size)
	for i := range b[:size/2] {
		b[i] = byte(rnd.Uint32())
	}
	copy(b[size/2:], bytes.Repeat([]byte("rekindle"), size/16+1))
	return b
}

func TestZstdFramesInOrder(t *testing.T) {
	data := generateData(t, 9<<20+12345)
	out, zr, err := decompressAll(t, zstdFrames(t, data, 256<<10))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, out), "frames decoded out of order or wrongly")
	assert.Nil(t, zr.stream, "sized frames should not be left to the stream decoder")
}

func TestZstdFramesSkippable(t *testing.T) {
	data := generateData(t, 1<<20)
	var c []byte
	c = append(c, zstdSkippable(10)...)
	c = append(c, zstdFrames(t, data[:300<<10], 100<<10)...)
	c = append(c, zstdSkippable(0)...)
	c = append(c, zstdFrames(t, data[300<<10:], 100<<10)...)
	c = append(c, zstdSkippable(70000)...)
	out, zr, err := decompressAll(t, c)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, out))
	assert.Nil(t, zr.stream)
}

func TestZstdFramesThenOneStream(t *testing.T) {
	data := generateData(t, 3<<20)
	c := append(zstdFrames(t, data[:1<<20], 128<<10), zstdOneStream(t, data[1<<20:])...)
	out, zr, err := decompressAll(t, c)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, out))
	assert.NotNil(t, zr.stream, "a frame without a content size is decoded as a stream")
}

func TestZstdFramesLargeFrame(t *testing.T) {
	data := bytes.Repeat([]byte("containerd"), (zstdFrameMaxContent+1)/10+1)
	out, zr, err := decompressAll(t, zstdFrames(t, data, len(data)))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, out))
	assert.NotNil(t, zr.stream, "a frame over the size limit is decoded as a stream")
}

func TestZstdFramesCorrupt(t *testing.T) {
	data := generateData(t, 1<<20)
	first := zstdFrames(t, data[:512<<10], 512<<10)
	second := zstdFrames(t, data[512<<10:], 512<<10)
	// A byte of the second frame's content checksum.
	second[len(second)-1] ^= 0xff
	out, _, err := decompressAll(t, append(first, second...))
	require.Error(t, err)
	assert.True(t, bytes.Equal(data[:512<<10], out), "the frame before the corrupt one should come out whole")
}

func TestZstdFramesTruncated(t *testing.T) {
	data := generateData(t, 1<<20)
	c := zstdFrames(t, data, 256<<10)
	_, _, err := decompressAll(t, c[:len(c)-100])
	require.Error(t, err)
}

func TestZstdFramesContentSizeLies(t *testing.T) {
	data := bytes.Repeat([]byte{'a', 'b', 'c'}, 1000)
	c := zstdFrames(t, data, len(data))
	var h zstd.Header
	require.NoError(t, h.Decode(c))
	require.True(t, h.HasFCS)
	// The content size is the header's last field; 3000 bytes take two
	// bytes, stored less 256. Claim 256 bytes fewer.
	require.Equal(t, uint64(len(data)), h.FrameContentSize)
	c[h.HeaderSize-1]--
	_, _, err := decompressAll(t, c)
	require.Error(t, err, "a frame that decodes to more than its header says should fail")
}

func TestZstdFramesCloseEarly(t *testing.T) {
	data := generateData(t, 8<<20)
	c := zstdFrames(t, data, 64<<10)
	before := runtime.NumGoroutine()
	for range 5 {
		ds, err := Decompress(bytes.NewReader(c))
		require.NoError(t, err)
		_, err = io.ReadFull(ds, make([]byte, 100<<10))
		require.NoError(t, err)
		require.NoError(t, ds.Close())
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), before, "decoders left running after Close")
}

var words = strings.Fields("layer snapshot content diff mount image manifest index config blob digest lease namespace task shim")

func BenchmarkZstdFrames(b *testing.B) {
	const size = 256 << 20
	// Memory pages compress about 4 to 6 times: words and small numbers.
	var buf bytes.Buffer
	rnd := rand.New(rand.NewPCG(1, 2))
	for buf.Len() < size {
		fmt.Fprintf(&buf, "%s=%d ", words[rnd.IntN(len(words))], rnd.IntN(1000))
	}
	data := buf.Bytes()[:size]
	for _, frame := range []int{1 << 20, 8 << 20} {
		c := zstdFrames(b, data, frame)
		b.Run(fmt.Sprintf("frames=%dMiB/stream", frame>>20), func(b *testing.B) {
			b.SetBytes(size)
			for range b.N {
				dec, err := zstd.NewReader(bytes.NewReader(c), zstd.WithDecoderLowmem(false))
				require.NoError(b, err)
				_, err = io.Copy(io.Discard, dec)
				require.NoError(b, err)
				dec.Close()
			}
		})
		b.Run(fmt.Sprintf("frames=%dMiB/parallel", frame>>20), func(b *testing.B) {
			b.SetBytes(size)
			for range b.N {
				ds, err := Decompress(bytes.NewReader(c))
				require.NoError(b, err)
				_, err = io.Copy(io.Discard, ds)
				require.NoError(b, err)
				ds.Close()
			}
		})
	}
}

func TestDecompressOtherFormats(t *testing.T) {
	data := generateData(t, 300<<10)
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	_, err := w.Write(data)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	for _, tc := range []struct {
		name     string
		in, want []byte
	}{
		{"gzip", gz.Bytes(), data},
		{"plain", data, data},
		{"empty", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds, err := Decompress(bytes.NewReader(tc.in))
			require.NoError(t, err)
			defer ds.Close()
			assert.NotEqual(t, reflect.TypeOf(&zstdFrameReader{}), reflect.TypeOf(ds))
			out, err := io.ReadAll(ds)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(tc.want, out), "decoded %d bytes, want %d", len(out), len(tc.want))
		})
	}
}

// containerd's layer applier picks its stream processor by the layer's
// media type: a zstd layer must reach the frame decoder, every other type
// the processors containerd registers itself.
func TestStreamProcessorOfZstdLayers(t *testing.T) {
	ctx := context.Background()
	data := generateData(t, 2<<20)
	for _, mt := range []string{ocispec.MediaTypeImageLayerZstd, images.MediaTypeDockerSchema2LayerZstd} {
		p, err := diff.GetProcessor(ctx, diff.NewProcessorChain(mt, bytes.NewReader(zstdFrames(t, data, 256<<10))), nil)
		require.NoError(t, err, mt)
		require.IsType(t, &processor{}, p, mt)
		assert.Equal(t, ocispec.MediaTypeImageLayer, p.MediaType())
		out, err := io.ReadAll(p)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(data, out), mt)
		require.NoError(t, p.Close())
	}
	for _, mt := range []string{ocispec.MediaTypeImageLayerGzip, ocispec.MediaTypeImageLayer} {
		p, err := diff.GetProcessor(ctx, diff.NewProcessorChain(mt, bytes.NewReader(nil)), nil)
		require.NoError(t, err, mt)
		assert.NotEqual(t, reflect.TypeOf(&processor{}), reflect.TypeOf(p), "%s should be left to containerd's own processor", mt)
	}
}
