// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"testing"
	"time"
)

func TestTimingsString(t *testing.T) {
	for _, tc := range []struct {
		t    Timings
		want string
	}{
		{Timings{}, "container-setup=0.000s task-create=0.000s criu-restore=0.000s total=0.000s"},
		{Timings{Setup: 250 * time.Millisecond, Create: 30 * time.Millisecond, Restore: 1500 * time.Millisecond},
			"container-setup=0.250s task-create=0.030s criu-restore=1.500s total=1.780s"},
	} {
		if got := tc.t.String(); got != tc.want {
			t.Errorf("%+v: got %q, want %q", tc.t, got, tc.want)
		}
	}
}
