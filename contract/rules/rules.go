// Package rules holds the restore rules of a Rekindle checkpoint image:
// the facts of the host a checkpoint was taken on, recorded as manifest
// annotations, against the facts of a host that would restore it, giving
// the problems that rule that host out and notes worth saying.
//
// oci-checkpoint check (oci-checkpoint/pkg/hostinfo) and containerd's
// restore preflight both import these rules (the contract module,
// restore/checkpointimage/preflight.go),
// and both run their test vector (Vector). So they import the standard
// library only: containerd's build adds no module but this one.
package rules

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The manifest annotations the rules read, as oci-checkpoint writes them.
// All are optional: a fact an image does not record is not checked.
const (
	// AnnotationFormat is the version of Rekindle's image format, and
	// FormatVersion the one these rules read; it changes when the image
	// layout changes incompatibly.
	AnnotationFormat = "org.rekindle.format"
	FormatVersion    = "1"
	// AnnotationCPUVendor and AnnotationCPUModel are the vendor_id and
	// model name of the checkpointing CPU.
	AnnotationCPUVendor = "org.rekindle.cpu.vendor"
	AnnotationCPUModel  = "org.rekindle.cpu.model"
	// AnnotationCPUFlags lists, comma separated, the ISA flags of the
	// checkpointing CPU that the restored process may have chosen code
	// paths by; a CPU without one of them would end it with SIGILL.
	AnnotationCPUFlags = "org.rekindle.cpu.flags"
	// AnnotationKernel is the checkpointing host's kernel release.
	AnnotationKernel = "org.rekindle.kernel"
	// AnnotationCRIU is the version of the CRIU that made the checkpoint.
	AnnotationCRIU = "org.rekindle.criu.version"
	// AnnotationDriver is the NVIDIA driver version of the checkpointing host.
	AnnotationDriver = "org.rekindle.nvidia.driver"
	// AnnotationGPUCount is the number of GPUs whose state the checkpoint holds.
	AnnotationGPUCount = "org.rekindle.gpu.count"
	// AnnotationGPUModel is their model, as the NVIDIA driver names it.
	AnnotationGPUModel = "org.rekindle.gpu.model"
	// AnnotationArch is the checkpointing host's architecture as Go names
	// it (amd64, arm64): checkpointctl's standard annotation, which
	// oci-checkpoint writes beside its own.
	AnnotationArch = "org.criu.checkpoint.host.arch"
)

// Host holds the facts of a host that would restore a checkpoint. An
// empty fact is unknown, and not compared.
type Host struct {
	// Arch is the architecture as Go names it (runtime.GOARCH).
	Arch      string
	CPUVendor string
	CPUModel  string
	// CPUFlags holds all of the CPU's flags: an image may record one
	// that the checkpointing side's list of ISA flags did not name.
	CPUFlags map[string]bool
	Kernel   string
	// CRIU is the version of the criu that would restore, empty when
	// none answers.
	CRIU string
	// Driver is the NVIDIA kernel module's version, empty without one.
	Driver string
	// GPUModels has one entry per NVIDIA GPU.
	GPUModels []string
}

// A Problem is one fact that rules a host out: a restore would fail.
type Problem struct {
	// Kind is the kind of fact: format, arch, cpu, criu, gpu or driver.
	Kind string
	// Reason says it in one line, as a restorer that refuses the host
	// logs it.
	Reason string
	// Advice says it to a person at the host: both sides' facts and
	// what to do.
	Advice string
	// Unknown marks a fact this host did not report (no criu answers):
	// a restorer whose runtime names it better may leave it to that
	// runtime.
	Unknown bool
}

func (p Problem) String() string { return p.Kind + ": " + p.Advice }

// Check compares the facts a checkpoint recorded (its annotations a)
// with host h. It returns the problems (a restore would fail), in the
// order format, arch, cpu, criu, gpu, driver, and notes (worth saying, not
// fatal). An annotation whose value is not of its form (a CRIU version of
// "banana", a GPU count of -3) is a problem of its fact's kind, naming the
// annotation and the form: what it records cannot be compared.
func Check(a map[string]string, h Host) (problems []Problem, notes []string) {
	add := func(kind, reason, advice string) {
		problems = append(problems, Problem{Kind: kind, Reason: reason, Advice: advice})
	}
	a = validated(a, add)
	if f := a[AnnotationFormat]; f != "" && f != FormatVersion {
		add("format", fmt.Sprintf("the image has Rekindle format %s, this containerd reads %s", f, FormatVersion),
			fmt.Sprintf("the image has Rekindle format %s, this oci-checkpoint reads %s: upgrade it", f, FormatVersion))
	}
	if v := a[AnnotationArch]; v != "" && h.Arch != "" && v != h.Arch {
		add("arch", fmt.Sprintf("checkpointed on %s, this host is %s", v, h.Arch),
			fmt.Sprintf("checkpointed on an %s host, this host is %s: a process restores only on the architecture it was checkpointed on; restore on an %s host", v, h.Arch, v))
	}
	if v := a[AnnotationCPUVendor]; v != "" && h.CPUVendor != "" && v != h.CPUVendor {
		add("cpu", fmt.Sprintf("checkpointed on %s CPU, this host has %s CPU", withArticle(v), withArticle(h.CPUVendor)),
			fmt.Sprintf("checkpointed on %s CPU%s, this host has %s CPU%s: restore on a host with %s CPU",
				withArticle(v), parens(a[AnnotationCPUModel]), withArticle(h.CPUVendor), parens(h.CPUModel), withArticle(v)))
	}
	var missing []string
	for _, fl := range strings.Split(a[AnnotationCPUFlags], ",") {
		if fl = strings.TrimSpace(fl); fl != "" && !h.CPUFlags[fl] {
			missing = append(missing, fl)
		}
	}
	if len(missing) > 0 {
		add("cpu", fmt.Sprintf("this host's CPU lacks %s, which the checkpointed process may use", strings.Join(missing, ", ")),
			fmt.Sprintf("this host's CPU%s lacks %s, which the CPU it was checkpointed on%s has and the restored process may use: restore on a host whose CPU has them, or checkpoint on the oldest CPU of the fleet", parens(h.CPUModel), strings.Join(missing, ", "), parens(a[AnnotationCPUModel])))
	}
	if v := a[AnnotationCRIU]; v != "" {
		switch {
		case h.CRIU == "":
			problems = append(problems, Problem{Kind: "criu", Unknown: true, Reason: "no criu answers on this host",
				Advice: "criu is not on PATH: install the Rekindle stack (make install)"})
		case VersionLess(h.CRIU, v):
			add("criu", fmt.Sprintf("CRIU %s here is older than %s, which made the checkpoint", h.CRIU, v),
				fmt.Sprintf("CRIU %s here is older than %s, which made the checkpoint: upgrade CRIU", h.CRIU, v))
		}
	}
	n, _ := strconv.Atoi(a[AnnotationGPUCount])
	if n <= 0 {
		// No GPU state: the GPU facts do not matter.
		return problems, append(notes, kernelNote(a, h)...)
	}
	switch {
	case len(h.GPUModels) == 0:
		add("gpu", fmt.Sprintf("the checkpoint holds the state of %d GPU(s), this host has 0", n),
			fmt.Sprintf("the checkpoint holds CUDA state for %s and this host has no NVIDIA GPU: restore on a host with %s", gpus(n, a[AnnotationGPUModel]), gpus(n, a[AnnotationGPUModel])))
	case len(h.GPUModels) < n:
		add("gpu", fmt.Sprintf("the checkpoint holds the state of %d GPU(s), this host has %d", n, len(h.GPUModels)),
			fmt.Sprintf("the checkpoint needs %s, this host has %d: restore on a host with %d or more", gpus(n, a[AnnotationGPUModel]), len(h.GPUModels), n))
	}
	// Counted by model: a host may mix models, and only GPUs of the
	// checkpoint's model can take its CUDA state.
	if m := a[AnnotationGPUModel]; m != "" && len(h.GPUModels) > 0 {
		same, others := 0, []string{}
		for _, g := range h.GPUModels {
			if g == m {
				same++
			} else if !slices.Contains(others, g) {
				others = append(others, g)
			}
		}
		switch {
		case same == 0:
			add("gpu", fmt.Sprintf("checkpointed on %s, this host has %s", m, strings.Join(h.GPUModels, ", ")),
				fmt.Sprintf("checkpointed on %s, this host has %s: CUDA state restores only onto the same GPU model", m, strings.Join(others, ", ")))
		case same < n && len(h.GPUModels) >= n:
			add("gpu", fmt.Sprintf("the checkpoint holds the state of %d GPU(s) of model %s, this host has %d of that model", n, m, same),
				fmt.Sprintf("the checkpoint needs %d GPUs of model %s, this host has %d of that model (and %s): CUDA state restores only onto the same GPU model", n, m, same, strings.Join(others, ", ")))
		}
	}
	if d := a[AnnotationDriver]; d != "" && h.Driver != "" && d != h.Driver {
		if VersionLess(h.Driver, d) {
			add("driver", fmt.Sprintf("NVIDIA driver %s here is older than %s, which made the checkpoint", h.Driver, d),
				fmt.Sprintf("NVIDIA driver %s here is older than %s, which made the checkpoint: upgrade the driver", h.Driver, d))
		} else {
			notes = append(notes, fmt.Sprintf("NVIDIA driver %s here, %s at checkpoint", h.Driver, d))
		}
	}
	return problems, append(notes, kernelNote(a, h)...)
}

// The forms of the annotations the rules compare.
var (
	versionForm = regexp.MustCompile(`^[0-9]+(\.[0-9]+)*$`)
	countForm   = regexp.MustCompile(`^[0-9]{1,4}$`)
	flagForm    = regexp.MustCompile(`^[a-z0-9_]+$`)
)

// validated returns a without the annotations whose values are not of
// their form, each of which it adds as a problem of its fact's kind.
func validated(a map[string]string, add func(kind, reason, advice string)) map[string]string {
	bad := func(key, kind, value, form string) {
		reason := fmt.Sprintf("annotation %s is %q, not %s", key, value, form)
		add(kind, reason, reason+": the image was not written by oci-checkpoint, or was changed since; checkpoint the engine again, or correct the annotation")
	}
	var drop []string
	for _, f := range []struct {
		key, kind string
		re        *regexp.Regexp
		form      string
	}{
		{AnnotationCRIU, "criu", versionForm, "a CRIU version (digits and dots, such as 4.2.1)"},
		{AnnotationDriver, "driver", versionForm, "an NVIDIA driver version (digits and dots, such as 580.95.05)"},
		{AnnotationGPUCount, "gpu", countForm, "a count of GPUs (a whole number, 0 or more, such as 2)"},
	} {
		if v := a[f.key]; v != "" && !f.re.MatchString(v) {
			bad(f.key, f.kind, v, f.form)
			drop = append(drop, f.key)
		}
	}
	if v := a[AnnotationCPUFlags]; v != "" {
		for _, fl := range strings.Split(v, ",") {
			if fl = strings.TrimSpace(fl); fl != "" && !flagForm.MatchString(fl) {
				bad(AnnotationCPUFlags, "cpu", v, "a comma-separated list of CPU flags as /proc/cpuinfo names them (such as sse4_2,avx2)")
				drop = append(drop, AnnotationCPUFlags)
				break
			}
		}
	}
	if len(drop) == 0 {
		return a
	}
	out := maps.Clone(a)
	for _, k := range drop {
		delete(out, k)
	}
	return out
}

// withArticle puts "a" or "an" before word: an AuthenticAMD, a GenuineIntel.
func withArticle(word string) string {
	if word != "" && strings.ContainsRune("AEIOUaeiou", rune(word[0])) {
		return "an " + word
	}
	return "a " + word
}

// parens is " (s)", or nothing for an empty s.
func parens(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

// gpus says n GPUs of model: "1 GPU", "2 NVIDIA H200 GPUs".
func gpus(n int, model string) string {
	s := strconv.Itoa(n)
	if model != "" {
		s += " " + model
	}
	if n == 1 {
		return s + " GPU"
	}
	return s + " GPUs"
}

// kernelNote notes a kernel other than the checkpointing host's: CRIU
// restores across kernels, but a failure is worth reading with it.
func kernelNote(a map[string]string, h Host) []string {
	if k := a[AnnotationKernel]; k != "" && k != h.Kernel {
		return []string{fmt.Sprintf("kernel %s here, %s at checkpoint", h.Kernel, k)}
	}
	return nil
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
