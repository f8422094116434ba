//go:build !linux

// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"context"

	"github.com/opencontainers/go-digest"

	"github.com/containerd/containerd/v2/core/snapshots"
)

// Only Linux keeps decoded copies of compressed pages images.
type decodes struct{}

func (r *Restorer) decodedImages(_ context.Context, _ snapshots.Snapshotter, _ string, _ *Image, _, images string) string {
	return images
}

func (r *Restorer) startDecode(digest.Digest) {}

func (r *Restorer) cancelDecode(digest.Digest) {}

func decodedHoldKey(id string) string { return restoreKeyPrefix + id + "/decoded" }
