// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"fmt"
	"strconv"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// nvidiaMajor is the character major of /dev/nvidiaN; minors from 254 up
// are the driver's control nodes, not GPUs.
const (
	nvidiaMajor    = 195
	nvidiaMaxMinor = 253
)

// CheckGPUs returns why the new container's spec cannot hold a restore of
// a checkpoint whose annotations record the state of N GPUs of a model:
// it gives the container fewer GPUs, or GPUs of another model. The CUDA
// driver would refuse such a restore only inside CRIU, once the
// processes exist; this says so before any work, naming both sides.
// A spec that gives no NVIDIA device at all is left to Preflight and the
// runtime (a host without CDI, or the devices bound in otherwise).
func CheckGPUs(annotations map[string]string, spec *specs.Spec, h Host) []string {
	n, _ := strconv.Atoi(annotations[AnnotationGPUCount])
	if n <= 0 || spec == nil || spec.Linux == nil {
		return nil
	}
	var minors []int64
	for _, d := range spec.Linux.Devices {
		if d.Type == "c" && d.Major == nvidiaMajor && d.Minor <= nvidiaMaxMinor {
			minors = append(minors, d.Minor)
		}
	}
	if len(minors) == 0 {
		return nil
	}
	var reasons []string
	if len(minors) < n {
		reasons = append(reasons, fmt.Sprintf("the checkpoint holds the state of %d GPU(s), the container is given %d: give it %d (one --device nvidia.com/gpu=N each)", n, len(minors), n))
	}
	if want := annotations[AnnotationGPUModel]; want != "" {
		for _, m := range minors {
			if got, ok := h.GPUMinors[m]; ok && got != want {
				reasons = append(reasons, fmt.Sprintf("the checkpoint was taken on %s, the container is given /dev/nvidia%d, a %s", want, m, got))
			}
		}
	}
	return reasons
}
