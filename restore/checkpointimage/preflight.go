// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"

	eventstypes "github.com/containerd/containerd/api/events"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	keys "rekindle.local/contract/annotations"
	"rekindle.local/contract/rules"
)

// Manifest annotations that record the host a checkpoint was taken on,
// as oci-checkpoint writes them (defined with the rules that read them),
// and the restore policy of the image. All are optional: a fact the image
// does not record is not checked.
const (
	// AnnotationCPUVendor is the vendor_id of the checkpointing CPU.
	AnnotationCPUVendor = rules.AnnotationCPUVendor
	// AnnotationCPUFlags lists, comma separated, the ISA flags of the
	// checkpointing CPU that the restored process may have chosen code
	// paths by; a CPU without one of them would end it with SIGILL.
	AnnotationCPUFlags = rules.AnnotationCPUFlags
	// AnnotationFormat is the version of Rekindle's image format, and
	// FormatVersion the one this preflight reads.
	AnnotationFormat = rules.AnnotationFormat
	FormatVersion    = rules.FormatVersion
	// AnnotationCRIU is the version of the CRIU that made the checkpoint.
	AnnotationCRIU = rules.AnnotationCRIU
	// AnnotationGPUCount is the number of GPUs whose state the checkpoint holds.
	AnnotationGPUCount = rules.AnnotationGPUCount
	// AnnotationGPUModel is their model, as the NVIDIA driver names it.
	AnnotationGPUModel = rules.AnnotationGPUModel
	// AnnotationDriver is the NVIDIA driver version of the checkpointing host.
	AnnotationDriver = rules.AnnotationDriver

	// AnnotationFallback says what to do when the image cannot be restored
	// on a host: "cold" starts the checkpointed container's process afresh
	// from the base image; anything else, or no annotation, fails.
	AnnotationFallback = keys.Fallback
	// FallbackCold is the value of AnnotationFallback that asks for a cold start.
	FallbackCold = keys.FallbackCold
)

// Host holds the facts of this host that a preflight compares.
type Host struct {
	// Arch is the architecture as Go names it (runtime.GOARCH).
	Arch      string
	CPUVendor string
	CPUFlags  map[string]bool
	// GPUModels has one entry per NVIDIA GPU.
	GPUModels []string
	// GPUMinors maps each NVIDIA GPU's device minor (/dev/nvidiaN) to
	// its model.
	GPUMinors map[int64]string
	// Driver is the NVIDIA kernel module's version, empty without one.
	Driver string
	// CRIU is the version of the criu on PATH (runc's), empty when none
	// answers.
	CRIU string
}

// ReadHost reads the facts of this host from the proc file system mounted
// at procRoot.
func ReadHost(procRoot string) Host {
	h := Host{Arch: runtime.GOARCH, CPUFlags: map[string]bool{}}
	if f, err := os.Open(filepath.Join(procRoot, "cpuinfo")); err == nil {
		s := bufio.NewScanner(f)
		s.Buffer(make([]byte, 64<<10), 1<<20)
		for s.Scan() {
			k, v, ok := strings.Cut(s.Text(), ":")
			if !ok {
				if len(h.CPUFlags) > 0 {
					break // the first processor speaks for all
				}
				continue
			}
			switch strings.TrimSpace(k) {
			case "vendor_id":
				h.CPUVendor = strings.TrimSpace(v)
			case "flags":
				for _, fl := range strings.Fields(v) {
					h.CPUFlags[fl] = true
				}
			}
		}
		f.Close()
	}
	infos, _ := filepath.Glob(filepath.Join(procRoot, "driver/nvidia/gpus/*/information"))
	for _, p := range infos {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		model, minor := "", int64(-1)
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			switch k = strings.TrimSpace(k); {
			case !ok:
			case k == "Model":
				model = strings.TrimSpace(v)
			case k == "Device Minor":
				minor, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			}
		}
		h.GPUModels = append(h.GPUModels, model)
		if minor >= 0 {
			if h.GPUMinors == nil {
				h.GPUMinors = map[int64]string{}
			}
			h.GPUMinors[minor] = model
		}
	}
	if b, err := os.ReadFile(filepath.Join(procRoot, "driver/nvidia/version")); err == nil {
		if m := driverVersionRe.FindSubmatch(b); m != nil {
			h.Driver = string(m[1])
		}
	}
	h.CRIU = criuVersion()
	return h
}

var criuVersionRe = regexp.MustCompile(`Version:\s*([0-9][0-9.]*)`)

// criuVersion asks the criu on PATH, the one runc runs, for its version.
var criuVersion = func() string {
	out, err := exec.Command("criu", "--version").Output()
	if err != nil {
		return ""
	}
	if m := criuVersionRe.FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return ""
}

var driverVersionRe = regexp.MustCompile(`Kernel Module(?: for [a-z0-9_]+)?\s+([0-9]+(?:\.[0-9]+)+)`)

// Preflight compares the host facts recorded in a checkpoint image's
// manifest annotations with host h and returns why h cannot restore it,
// nil when nothing recorded rules h out. It catches before any work what
// would otherwise fail deep in the restore (CRIU, the CUDA driver) or,
// worse, after it: a process restored onto a CPU without an instruction
// set it uses dies of SIGILL at its first use. The rules are those of
// oci-checkpoint check: package rules is Rekindle's contract module's, which
// oci-checkpoint imports too, with the test vector both run (rules.Vector).
func Preflight(annotations map[string]string, h Host) []string {
	var reasons []string
	for _, r := range preflight(annotations, h) {
		reasons = append(reasons, r.msg)
	}
	return reasons
}

// A reason is one fact that rules a host out, and its kind: format, arch,
// cpu, criu, gpu or driver.
type reason struct{ kind, msg string }

func preflight(annotations map[string]string, h Host) []reason {
	problems, _ := rules.Check(annotations, rules.Host{
		Arch:      h.Arch,
		CPUVendor: h.CPUVendor,
		CPUFlags:  h.CPUFlags,
		CRIU:      h.CRIU,
		Driver:    h.Driver,
		GPUModels: h.GPUModels,
	})
	var reasons []reason
	for _, p := range problems {
		// An unknown CRIU (none found) is left to runc, which names it.
		if !p.Unknown {
			reasons = append(reasons, reason{p.Kind, p.Reason})
		}
	}
	return reasons
}

// WantsColdFallback reports whether a checkpoint image's annotations ask
// for a cold start when the image cannot be restored.
func WantsColdFallback(annotations map[string]string) bool {
	return annotations[AnnotationFallback] == FallbackCold
}

// PreflightError is a checkpoint image that this host cannot restore.
type PreflightError struct {
	// Image is the checkpoint image.
	Image string
	// Reasons say why, one fact each.
	Reasons []string
}

func (e *PreflightError) Error() string {
	return fmt.Sprintf("checkpoint image %s cannot be restored on this host: %s", e.Image, strings.Join(e.Reasons, "; "))
}

// Unwrap makes a PreflightError a failed precondition.
func (e *PreflightError) Unwrap() error { return errdefs.ErrFailedPrecondition }

// Where a restore that starts cold instead failed, as LogFallback says it.
const (
	// FailedPreflight is a host that Preflight rules out.
	FailedPreflight = "preflight"
	// FailedInRuntime is a runtime (CRIU) that failed to restore.
	FailedInRuntime = "in the runtime"
)

// RuntimeFailure is the reason to start cold after the runtime failed to
// restore a container with failure.
func RuntimeFailure(failure error) []string {
	return []string{"the runtime failed to restore it: " + failure.Error()}
}

// LogFallback logs the warning that container id starts cold from
// baseImage instead of being restored from checkpoint image image, whose
// restore failed at failedAt (FailedPreflight, FailedInRuntime) for
// reasons. Every client's path logs this one line.
func LogFallback(ctx context.Context, id, image, failedAt string, reasons []string, baseImage string) {
	log.G(ctx).WithField("container", id).Warnf("restoring checkpoint image %s failed %s: %s; starting cold from base image %s (fallback %s)",
		image, failedAt, strings.Join(reasons, "; "), baseImage, FallbackCold)
}

// FallbackEventTopic is the topic of the event published when a container
// whose image is a checkpoint image starts cold because this host cannot
// restore the image.
const FallbackEventTopic = "/tasks/restore-fallback"

// FallbackEvent is that event for container id, started cold from
// baseImage instead of being restored from checkpointImage, for reasons.
// It is a ContainerUpdate, which every client can decode: ID is the
// container, Image the base image, and the labels name the checkpoint
// image, the fallback and the reasons.
func FallbackEvent(id, baseImage, checkpointImage string, reasons []string) *eventstypes.ContainerUpdate {
	return &eventstypes.ContainerUpdate{
		ID:    id,
		Image: baseImage,
		Labels: map[string]string{
			"checkpoint.image": checkpointImage,
			"fallback":         FallbackCold,
			"reasons":          strings.Join(reasons, "; "),
		},
	}
}
