//go:build !linux

// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"context"

	"github.com/containerd/containerd/v2/core/mount"
)

func applyToOverlayUpper(context.Context, []mount.Mount, string) (bool, error) {
	return false, nil
}
