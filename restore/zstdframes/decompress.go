// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package zstdframes

import (
	"bufio"
	"context"
	"io"

	"github.com/containerd/containerd/v2/core/diff"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/archive/compression"
	"github.com/containerd/typeurl/v2"
	"github.com/klauspost/compress/zstd"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

func init() {
	diff.RegisterProcessor(zstdLayers)
}

// Decompress returns r decompressed: a zstd stream through the frame
// decoder, anything else as containerd's compression.DecompressStream
// reads it.
func Decompress(r io.Reader) (io.ReadCloser, error) {
	// DecompressStream's own buffer is as large: a read it makes of the
	// stream goes past this one's, not through a second copy (an
	// uncompressed checkpoint layer is most of what comes here).
	br := bufio.NewReaderSize(r, 32<<10)
	head, err := br.Peek(zstd.HeaderMaxSize)
	if err != nil && err != io.EOF {
		return nil, err
	}
	if compression.DetectCompression(head) != compression.Zstd {
		return compression.DecompressStream(br)
	}
	return newZstdFrameReader(br)
}

// zstdLayers is the stream processor handler of layers whose media type
// says zstd. Every other type is left to the handlers registered before.
func zstdLayers(ctx context.Context, mediaType string) (diff.StreamProcessorInit, bool) {
	if c, err := images.DiffCompression(ctx, mediaType); err != nil || c != "zstd" {
		return nil, false
	}
	return func(ctx context.Context, stream diff.StreamProcessor, _ map[string]typeurl.Any) (diff.StreamProcessor, error) {
		rc, err := Decompress(stream)
		if err != nil {
			return nil, err
		}
		return &processor{rc}, nil
	}, true
}

// processor hands the decoded layer on as an uncompressed tar.
type processor struct {
	io.ReadCloser
}

func (p *processor) MediaType() string {
	return ocispec.MediaTypeImageLayer
}
