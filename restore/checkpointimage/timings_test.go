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
