package hostinfo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func fakeProc(t *testing.T, files map[string]string) {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := Proc
	Proc = dir
	t.Cleanup(func() { Proc = old })
}

const gpuInfo = `Model: 		 NVIDIA H200
IRQ:   		 123
GPU UUID: 	 %s
Video BIOS: 	 96.00.a5.00.01
Bus Type: 	 PCIe
Device Minor: 	 %s
Bus Location: 	 %s
`

func TestReadFromProc(t *testing.T) {
	fakeProc(t, map[string]string{
		"cpuinfo": "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n" +
			"flags\t\t: fpu sse4_2 avx avx2 avx512f amx_tile junk\n\nprocessor\t: 1\nvendor_id\t: Other\n",
		"driver/nvidia/version":                       "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Tue Oct 14 2025\nGCC version: gcc\n",
		"driver/nvidia/gpus/0000:1a:00.0/information": sprintf(gpuInfo, "GPU-11111111-2222-3333-4444-555555555555", "1", "0000:1a:00.0"),
		"driver/nvidia/gpus/0000:0f:00.0/information": sprintf(gpuInfo, "GPU-aaaaaaaa-2222-3333-4444-555555555555", "0", "0000:0f:00.0"),
	})

	h := Read()
	if h.CPUVendor != "GenuineIntel" || !strings.Contains(h.CPUModel, "8480") {
		t.Errorf("cpu: %q %q", h.CPUVendor, h.CPUModel)
	}
	if got := strings.Join(h.CPUFlags, ","); got != "sse4_2,avx,avx2,avx512f,amx_tile" {
		t.Errorf("flags: %s", got)
	}
	if h.Driver != "580.159.04" {
		t.Errorf("driver: %q", h.Driver)
	}
	if len(h.GPUs) != 2 || h.GPUs[0].Minor != 0 || h.GPUs[0].UUID != "GPU-aaaaaaaa-2222-3333-4444-555555555555" || h.GPUs[1].PCIBusID != "0000:1a:00.0" {
		t.Errorf("gpus by minor: %+v", h.GPUs)
	}
	devs := map[string]uint64{"nvidia1": unix.Mkdev(195, 1), "nvidiactl": unix.Mkdev(195, 255), "nvidia-uvm": unix.Mkdev(510, 0)}
	seen := DeviceMinors(devs, h.GPUs)
	if len(seen) != 1 || seen[0].UUID != "GPU-11111111-2222-3333-4444-555555555555" {
		t.Errorf("devices seen by a container with /dev/nvidia1: %+v", seen)
	}
}

func sprintf(format string, args ...string) string {
	for _, a := range args {
		format = strings.Replace(format, "%s", a, 1)
	}
	return format
}

func TestCheck(t *testing.T) {
	ckpt := Host{CPUVendor: "GenuineIntel", CPUModel: "Xeon 8480+", CPUFlags: []string{"avx2", "avx512f", "amx_tile"},
		Kernel: "6.8", CRIU: "4.2.1", Driver: "580.159.04",
		GPUs: []GPU{{UUID: "GPU-a", Model: "NVIDIA H200"}, {UUID: "GPU-b", Model: "NVIDIA H200"}}}
	a := ckpt.Annotations(ckpt.GPUs)
	for _, tc := range []struct {
		name string
		here func(h *Host)
		want []string // substrings of the problems, in order; none = restorable
	}{
		{"same host", func(h *Host) {}, nil},
		{"newer criu and driver", func(h *Host) { h.CRIU = "4.3"; h.Driver = "590.1" }, nil},
		{"missing flag", func(h *Host) { h.CPUFlags = []string{"avx2"} }, []string{"lacks avx512f, amx_tile"}},
		{"other vendor", func(h *Host) { h.CPUVendor = "AuthenticAMD" }, []string{"checkpointed on a GenuineIntel CPU (Xeon 8480+), this host has an AuthenticAMD CPU (Xeon 8480+): restore on a host with a GenuineIntel CPU"}},
		{"older criu", func(h *Host) { h.CRIU = "4.1.1" }, []string{"CRIU 4.1.1 here is older than 4.2.1"}},
		{"no criu", func(h *Host) { h.CRIU = "" }, []string{"criu is not on PATH"}},
		{"older driver", func(h *Host) { h.Driver = "575.57.08" }, []string{"driver 575.57.08 here is older"}},
		{"fewer gpus", func(h *Host) { h.GPUs = h.GPUs[:1] }, []string{"needs 2 NVIDIA H200 GPUs, this host has 1: restore on a host with 2 or more"}},
		{"no gpu", func(h *Host) { h.GPUs = nil }, []string{"no NVIDIA GPU"}},
		{"other model", func(h *Host) {
			h.GPUs = []GPU{{Model: "NVIDIA B200"}, {Model: "NVIDIA B200"}}
		}, []string{"checkpointed on NVIDIA H200, this host has NVIDIA B200: CUDA state restores only onto the same GPU model"}},
		{"mixed host, too few of the model", func(h *Host) {
			h.GPUs = []GPU{{Model: "NVIDIA B200"}, {Model: "NVIDIA H200"}, {Model: "NVIDIA B200"}}
		}, []string{"needs 2 GPUs of model NVIDIA H200, this host has 1 of that model (and NVIDIA B200)"}},
		{"mixed host, enough of the model", func(h *Host) {
			h.GPUs = []GPU{{Model: "NVIDIA B200"}, {Model: "NVIDIA H200"}, {Model: "NVIDIA H200"}}
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			here := ckpt
			here.GPUs = append([]GPU(nil), ckpt.GPUs...)
			tc.here(&here)
			problems, _ := Check(a, here)
			if len(problems) != len(tc.want) {
				t.Fatalf("problems %v, want %d matching %q", problems, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(problems[i].Msg, w) {
					t.Errorf("problem %d: %q lacks %q", i, problems[i].Msg, w)
				}
			}
		})
	}
	// A CPU checkpoint carries no GPU facts and restores on GPU-less hosts.
	cpu := ckpt
	cpu.GPUs = nil
	if p, _ := Check(cpu.Annotations(nil), Host{CPUVendor: "GenuineIntel", CPUFlags: ckpt.CPUFlags, CRIU: "4.2.1"}); len(p) != 0 {
		t.Errorf("CPU checkpoint on a GPU-less host: %v", p)
	}
}

func TestVersionLess(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		less bool
	}{{"4.1.1", "4.2", true}, {"4.2", "4.2.0", false}, {"580.9", "580.10", true}, {"590.1", "580.159.04", false}} {
		if got := VersionLess(tc.a, tc.b); got != tc.less {
			t.Errorf("VersionLess(%s, %s) = %v", tc.a, tc.b, got)
		}
	}
}
