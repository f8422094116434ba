package hostinfo

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

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
	What string // cpu, criu, driver, gpu
	Msg  string
}

func (p Problem) String() string { return p.What + ": " + p.Msg }

// Check compares the facts a checkpoint recorded (its annotations) with
// this host. It returns the problems (a restore would fail) and notes
// (worth saying, not fatal).
func Check(a map[string]string, here Host) (problems []Problem, notes []string) {
	if f := a[annotations.Format]; f != "" && f != annotations.FormatVersion {
		problems = append(problems, Problem{"format", fmt.Sprintf("the image has Rekindle format %s, this oci-checkpoint reads %s: upgrade it", f, annotations.FormatVersion)})
	}
	if v := a[annotations.CPUVendor]; v != "" && here.CPUVendor != "" && v != here.CPUVendor {
		problems = append(problems, Problem{"cpu", fmt.Sprintf("checkpointed on a %s CPU (%s), this host has %s (%s): restore on a host with a %s CPU", v, a[annotations.CPUModel], here.CPUVendor, here.CPUModel, v)})
	}
	if fl := a[annotations.CPUFlags]; fl != "" {
		have := here.allFlags
		if have == nil {
			have = map[string]bool{}
			for _, f := range here.CPUFlags {
				have[f] = true
			}
		}
		var missing []string
		for _, f := range strings.Split(fl, ",") {
			if f != "" && !have[f] {
				missing = append(missing, f)
			}
		}
		if len(missing) > 0 {
			problems = append(problems, Problem{"cpu", fmt.Sprintf("this host's CPU (%s) lacks %s, which the CPU it was checkpointed on (%s) has and the restored process may use: restore on a host whose CPU has them, or checkpoint on the oldest CPU of the fleet", here.CPUModel, strings.Join(missing, ", "), a[annotations.CPUModel])})
		}
	}
	if v := a[annotations.CRIU]; v != "" {
		switch {
		case here.CRIU == "":
			problems = append(problems, Problem{"criu", "criu is not on PATH: install the Rekindle stack (make install)"})
		case VersionLess(here.CRIU, v):
			problems = append(problems, Problem{"criu", fmt.Sprintf("CRIU %s here is older than %s, which made the checkpoint: upgrade CRIU", here.CRIU, v)})
		}
	}
	n, _ := strconv.Atoi(a[annotations.GPUCount])
	if n > 0 {
		switch {
		case len(here.GPUs) == 0:
			problems = append(problems, Problem{"gpu", fmt.Sprintf("the checkpoint holds CUDA state for %d GPU(s) (%s) and this host has no NVIDIA GPU", n, a[annotations.GPUModel])})
		case len(here.GPUs) < n:
			problems = append(problems, Problem{"gpu", fmt.Sprintf("the checkpoint needs %d GPUs, this host has %d", n, len(here.GPUs))})
		}
		// Counted by model: a host may mix models, and only GPUs of the
		// checkpoint's model can take its CUDA state.
		if m := a[annotations.GPUModel]; m != "" && len(here.GPUs) > 0 {
			same, models := 0, []string{}
			for _, g := range here.GPUs {
				if g.Model == m {
					same++
				} else if !slices.Contains(models, g.Model) {
					models = append(models, g.Model)
				}
			}
			switch {
			case same == 0:
				problems = append(problems, Problem{"gpu", fmt.Sprintf("checkpointed on %s, this host has %s: CUDA state restores only onto the same GPU model", m, strings.Join(models, ", "))})
			case same < n && len(here.GPUs) >= n:
				problems = append(problems, Problem{"gpu", fmt.Sprintf("the checkpoint needs %d GPUs of model %s, this host has %d of that model (and %s): CUDA state restores only onto the same GPU model", n, m, same, strings.Join(models, ", "))})
			}
		}
		if d := a[annotations.Driver]; d != "" && here.Driver != "" && VersionLess(here.Driver, d) {
			problems = append(problems, Problem{"driver", fmt.Sprintf("NVIDIA driver %s here is older than %s, which made the checkpoint: upgrade the driver", here.Driver, d)})
		}
		if d := a[annotations.Driver]; d != "" && here.Driver != "" && d != here.Driver && !VersionLess(here.Driver, d) {
			notes = append(notes, fmt.Sprintf("NVIDIA driver %s here, %s at checkpoint", here.Driver, d))
		}
	}
	if k := a[annotations.Kernel]; k != "" && k != here.Kernel {
		notes = append(notes, fmt.Sprintf("kernel %s here, %s at checkpoint", here.Kernel, k))
	}
	return problems, notes
}

// VersionLess compares dotted numeric versions: 4.1.1 < 4.2, 580.9 < 580.10.
func VersionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) || i < len(bs); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}
