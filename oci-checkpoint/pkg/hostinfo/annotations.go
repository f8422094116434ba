package hostinfo

import (
	"strconv"
	"strings"

	"rekindle.local/contract/rules"
	"rekindle.local/oci-checkpoint/pkg/annotations"
)

// Annotations returns h as annotations; gpus are the GPUs the
// checkpointed container saw (not all of the host's).
func (h Host) Annotations(gpus []GPU) map[string]string {
	a := map[string]string{
		annotations.CPUVendor: h.CPUVendor,
		annotations.CPUModel:  h.CPUModel,
		annotations.CPUFlags:  strings.Join(h.CPUFlags, ","),
		annotations.Kernel:    h.Kernel,
		annotations.CRIU:      h.CRIU,
		annotations.GPUCount:  strconv.Itoa(len(gpus)),
	}
	if len(gpus) > 0 {
		a[annotations.Driver] = h.Driver
		a[annotations.CUDA] = h.CUDA
		a[annotations.GPUModel] = gpus[0].Model
		var ids []string
		for _, g := range gpus {
			ids = append(ids, g.UUID)
		}
		a[annotations.GPUUUIDs] = strings.Join(ids, ",")
	}
	for k, v := range a {
		if v == "" {
			delete(a, k)
		}
	}
	return a
}

// Problem is one reason this host cannot restore a checkpoint.
type Problem struct {
	What string // format, cpu, criu, driver, gpu
	Msg  string
}

func (p Problem) String() string { return p.What + ": " + p.Msg }

// Check compares the facts a checkpoint recorded (its annotations) with
// this host, by the restore rules containerd's preflight applies too
// (the contract module's rules package). It returns the problems (a restore would fail), said to
// the person at the host, and notes (worth saying, not fatal). A host
// where no criu answers is refused an image that records its CRIU.
func Check(a map[string]string, here Host) (problems []Problem, notes []string) {
	flags := here.allFlags
	if flags == nil {
		flags = map[string]bool{}
		for _, f := range here.CPUFlags {
			flags[f] = true
		}
	}
	h := rules.Host{Arch: here.arch, CPUVendor: here.CPUVendor, CPUModel: here.CPUModel, CPUFlags: flags,
		Kernel: here.Kernel, CRIU: here.CRIU, Driver: here.Driver}
	for _, g := range here.GPUs {
		h.GPUModels = append(h.GPUModels, g.Model)
	}
	ps, notes := rules.Check(a, h)
	for _, p := range ps {
		problems = append(problems, Problem{p.Kind, p.Advice})
	}
	return problems, notes
}

// VersionLess compares dotted numeric versions: 4.1.1 < 4.2, 580.9 < 580.10.
func VersionLess(a, b string) bool { return rules.VersionLess(a, b) }
