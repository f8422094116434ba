package rules

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The rules' verdicts are tested by the vector both readers run
// (Vector, testdata/restore-rules.json); these pin what each says.

// TestTheContractImportsTheStandardLibraryOnly: containerd's restore
// imports the contract's packages, and its build adds no module but this
// one. Every file of the module is read, tests but these aside.
func TestTheContractImportsTheStandardLibraryOnly(t *testing.T) {
	files, err := filepath.Glob("../*/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files found beside ../rules: %v", err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if first, _, _ := strings.Cut(p, "/"); strings.Contains(first, ".") {
				t.Errorf("%s imports %s, outside the standard library", name, p)
			}
		}
	}
}

func TestProblemWording(t *testing.T) {
	h := Host{CPUVendor: "GenuineIntel", CPUModel: "Xeon", CPUFlags: map[string]bool{"avx2": true},
		CRIU: "4.2.1", Driver: "580.95.05", GPUModels: []string{"NVIDIA H100"}}
	for _, tc := range []struct {
		name           string
		a              map[string]string
		host           func(*Host)
		reason, advice string
		unknown        bool
	}{
		{name: "format", a: map[string]string{AnnotationFormat: "2"},
			reason: "Rekindle format 2, this containerd reads 1", advice: "this oci-checkpoint reads 1: upgrade it"},
		{name: "vendor", a: map[string]string{AnnotationCPUVendor: "AuthenticAMD", AnnotationCPUModel: "EPYC"},
			reason: "checkpointed on an AuthenticAMD CPU, this host has a GenuineIntel CPU",
			advice: "checkpointed on an AuthenticAMD CPU (EPYC), this host has a GenuineIntel CPU (Xeon): restore on a host with an AuthenticAMD CPU"},
		{name: "vendor, no model", a: map[string]string{AnnotationCPUVendor: "AuthenticAMD"}, host: func(h *Host) { h.CPUModel = "" },
			reason: "checkpointed on an AuthenticAMD CPU, this host has a GenuineIntel CPU",
			advice: "checkpointed on an AuthenticAMD CPU, this host has a GenuineIntel CPU: restore"},
		{name: "arch", a: map[string]string{AnnotationArch: "arm64"}, host: func(h *Host) { h.Arch = "amd64" },
			reason: "checkpointed on arm64, this host is amd64", advice: "restore on an arm64 host"},
		{name: "malformed criu", a: map[string]string{AnnotationCRIU: "banana"},
			reason: `annotation org.rekindle.criu.version is "banana", not a CRIU version (digits and dots, such as 4.2.1)`,
			advice: "the image was not written by oci-checkpoint, or was changed since"},
		{name: "malformed gpu count", a: map[string]string{AnnotationGPUCount: "-3"},
			reason: `annotation org.rekindle.gpu.count is "-3", not a count of GPUs (a whole number, 0 or more, such as 2)`, advice: "checkpoint the engine again"},
		{name: "malformed driver", a: map[string]string{AnnotationGPUCount: "1", AnnotationGPUModel: "NVIDIA H100", AnnotationDriver: "latest"},
			reason: `annotation org.rekindle.nvidia.driver is "latest", not an NVIDIA driver version`, advice: "correct the annotation"},
		{name: "malformed cpu flags", a: map[string]string{AnnotationCPUFlags: "avx2;rm -rf"},
			reason: `annotation org.rekindle.cpu.flags is "avx2;rm -rf", not a comma-separated list of CPU flags`, advice: "checkpoint the engine again"},
		{name: "flags", a: map[string]string{AnnotationCPUFlags: "avx2, avx512f"},
			reason: "this host's CPU lacks avx512f, which the checkpointed process may use",
			advice: "this host's CPU (Xeon) lacks avx512f"},
		{name: "older criu", a: map[string]string{AnnotationCRIU: "4.3"},
			reason: "CRIU 4.2.1 here is older than 4.3, which made the checkpoint", advice: "which made the checkpoint: upgrade CRIU"},
		{name: "no criu", a: map[string]string{AnnotationCRIU: "4.3"}, host: func(h *Host) { h.CRIU = "" },
			reason: "no criu answers", advice: "criu is not on PATH", unknown: true},
		{name: "no gpu", a: map[string]string{AnnotationGPUCount: "1"}, host: func(h *Host) { h.GPUModels = nil },
			reason: "the checkpoint holds the state of 1 GPU(s), this host has 0", advice: "the checkpoint holds CUDA state for 1 GPU and this host has no NVIDIA GPU: restore on a host with 1 GPU"},
		{name: "no gpu, a model", a: map[string]string{AnnotationGPUCount: "2", AnnotationGPUModel: "NVIDIA H200"}, host: func(h *Host) { h.GPUModels = nil },
			reason: "this host has 0", advice: "CUDA state for 2 NVIDIA H200 GPUs and this host has no NVIDIA GPU: restore on a host with 2 NVIDIA H200 GPUs"},
		{name: "fewer gpus", a: map[string]string{AnnotationGPUCount: "2"},
			reason: "holds the state of 2 GPU(s), this host has 1", advice: "needs 2 GPUs, this host has 1: restore on a host with 2 or more"},
		{name: "other model", a: map[string]string{AnnotationGPUCount: "1", AnnotationGPUModel: "NVIDIA B200"},
			host:   func(h *Host) { h.GPUModels = []string{"NVIDIA H100", "NVIDIA H100"} },
			reason: "checkpointed on NVIDIA B200, this host has NVIDIA H100, NVIDIA H100",
			advice: "checkpointed on NVIDIA B200, this host has NVIDIA H100: CUDA state"},
		{name: "older driver", a: map[string]string{AnnotationGPUCount: "1", AnnotationDriver: "580.159.04"},
			reason: "NVIDIA driver 580.95.05 here is older than 580.159.04, which made the checkpoint", advice: ": upgrade the driver"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := h
			if tc.host != nil {
				tc.host(&host)
			}
			p, _ := Check(tc.a, host)
			if len(p) != 1 {
				t.Fatalf("problems %v, want one", p)
			}
			if !strings.Contains(p[0].Reason, tc.reason) || !strings.Contains(p[0].Advice, tc.advice) || p[0].Unknown != tc.unknown {
				t.Errorf("%+v, want reason %q, advice %q, unknown %v", p[0], tc.reason, tc.advice, tc.unknown)
			}
		})
	}
}

func TestNotes(t *testing.T) {
	a := map[string]string{AnnotationGPUCount: "1", AnnotationDriver: "580.95.05", AnnotationKernel: "6.8"}
	_, notes := Check(a, Host{GPUModels: []string{"NVIDIA H100"}, Driver: "590.1", Kernel: "6.12"})
	if want := "NVIDIA driver 590.1 here, 580.95.05 at checkpoint; kernel 6.12 here, 6.8 at checkpoint"; strings.Join(notes, "; ") != want {
		t.Errorf("notes %q, want %q", notes, want)
	}
}
