//go:build !linux && !windows

/*
   Copyright The containerd Authors.

   Licensed under the Apache License, Version 2.0 (the "License");
   you may not use this file except in compliance with the License.
   You may obtain a copy of the License at

       http://www.apache.org/licenses/LICENSE-2.0

   Unless required by applicable law or agreed to in writing, software
   distributed under the License is distributed on an "AS IS" BASIS,
   WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
   See the License for the specific language governing permissions and
   limitations under the License.
*/

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
