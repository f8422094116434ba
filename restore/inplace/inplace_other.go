//go:build !linux

// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package inplace

import (
	"context"
	"io"

	"github.com/containerd/containerd/v2/core/diff"
	"github.com/containerd/containerd/v2/core/mount"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Apply keeps no layer in place here: the caller extracts it.
func Apply(context.Context, ocispec.Descriptor, io.ReaderAt, []mount.Mount, diff.ApplyConfig) (bool, error) {
	return false, nil
}
