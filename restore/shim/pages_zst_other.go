//go:build !linux && !windows

// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package shim

import (
	"context"
	"errors"
)

func ExpandPages(ctx context.Context, dir, target string, _ Limits) (string, func(), error) {
	if ok, err := hasCompressedPages(dir); err != nil || !ok {
		return dir, func() {}, err
	}
	return "", func() {}, errors.New("compressed pages images are decoded only on Linux")
}
