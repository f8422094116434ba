//go:build !linux && !windows

// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package shim

import (
	"context"
	"time"
)

func RestoreWithin(ctx context.Context, _ string, deadline time.Time, restore func(context.Context) error) (bool, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	err := restore(ctx)
	return ctx.Err() == context.DeadlineExceeded, err
}

// UnbindRestoreRoot and RemoveRestoreLeftovers: runc's restore is Linux's.
func UnbindRestoreRoot(_, _ string) error { return nil }

func RemoveRestoreLeftovers(_, _, _ string) error { return nil }
