package checkpoint

import (
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
)

func TestHostID(t *testing.T) {
	maps := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 1000}, {ContainerID: 1000, HostID: 5000, Size: 1}}
	for _, tc := range []struct {
		id   uint32
		maps []specs.LinuxIDMapping
		want uint32
	}{
		{0, nil, 0},
		{1000, nil, 1000},
		{0, maps, 100000},
		{999, maps, 100999},
		{1000, maps, 5000},
		{2000, maps, 2000},
	} {
		if got := hostID(tc.id, tc.maps); got != tc.want {
			t.Errorf("hostID(%d, %v) = %d, want %d", tc.id, tc.maps, got, tc.want)
		}
	}
}
