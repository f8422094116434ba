// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
)

func TestCheckGPUs(t *testing.T) {
	h := Host{GPUMinors: map[int64]string{0: "NVIDIA H200", 1: "NVIDIA H200", 2: "NVIDIA H100 80GB HBM3"}}
	tp2 := map[string]string{AnnotationGPUCount: "2", AnnotationGPUModel: "NVIDIA H200"}
	spec := func(minors ...int64) *specs.Spec {
		s := &specs.Spec{Linux: &specs.Linux{Devices: []specs.LinuxDevice{
			{Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255},
			{Path: "/dev/nvidia-uvm", Type: "c", Major: 510, Minor: 0},
		}}}
		for _, m := range minors {
			s.Linux.Devices = append(s.Linux.Devices, specs.LinuxDevice{Type: "c", Major: 195, Minor: m})
		}
		return s
	}
	for _, tc := range []struct {
		name string
		ann  map[string]string
		spec *specs.Spec
		want []string // each a part of one reason; none: no reason
	}{
		{name: "as many GPUs of the model", ann: tp2, spec: spec(0, 1)},
		{name: "more GPUs", ann: map[string]string{AnnotationGPUCount: "2"}, spec: spec(0, 1, 2)},
		{name: "one GPU for two", ann: tp2, spec: spec(1),
			want: []string{"the checkpoint holds the state of 2 GPU(s), the container is given 1: give it 2"}},
		{name: "another model", ann: tp2, spec: spec(0, 2),
			want: []string{"taken on NVIDIA H200, the container is given /dev/nvidia2, a NVIDIA H100 80GB HBM3"}},
		{name: "no GPU device in the spec", ann: tp2, spec: spec()},
		{name: "no spec", ann: tp2},
		{name: "a checkpoint without GPU state", ann: map[string]string{AnnotationGPUCount: "0"}, spec: spec()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckGPUs(tc.ann, tc.spec, h)
			if len(got) != len(tc.want) {
				t.Fatalf("reasons %q, want %d", got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("reason %q, want it to say %q", got[i], w)
				}
			}
		})
	}
}
