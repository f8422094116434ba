package checkpoint

import (
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
)

func TestSandboxDevShm(t *testing.T) {
	const sb = "0123abcd"
	shm := "/run/containerd/io.containerd.grpc.v1.cri/sandboxes/" + sb + "/shm"
	spec := func(src string, ann bool) *specs.Spec {
		s := &specs.Spec{Mounts: []specs.Mount{{Destination: "/dev/shm", Type: "bind", Source: src}}}
		if ann {
			s.Annotations = map[string]string{criSandboxIDAnnotation: sb}
		}
		return s
	}
	for _, tc := range []struct {
		name string
		spec *specs.Spec
		want string
	}{
		{"the sandbox's", spec(shm, true), shm},
		{"hostIPC: the host's", spec("/dev/shm", true), ""},
		{"another sandbox's", spec("/run/containerd/io.containerd.grpc.v1.cri/sandboxes/other/shm", true), ""},
		{"not a CRI container", spec(shm, false), ""},
		{"no spec", nil, ""},
	} {
		if got := sandboxDevShm(tc.spec); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
