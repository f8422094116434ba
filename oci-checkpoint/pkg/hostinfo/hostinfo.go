// Package hostinfo reads the facts of a host that decide whether a
// checkpoint taken on it can be restored on another: CPU, kernel, CRIU,
// NVIDIA driver and GPUs. They travel as image annotations.
package hostinfo

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ISAFlags are the CPU features a restored process may have chosen code
// paths by (glibc, PyTorch, NumPy dispatch at start); a host missing one
// would crash the restored process with SIGILL.
var ISAFlags = []string{
	"sse4_1", "sse4_2", "popcnt", "aes", "pclmulqdq", "sha_ni",
	"avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "movbe", "adx",
	"avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl", "avx512_vnni",
	"avx512_bf16", "avx512_fp16", "avx512vbmi", "avx_vnni",
	"amx_tile", "amx_bf16", "amx_int8",
	"xsave", "xsavec", "xsaveopt", "xsaves",
}

// GPU is one NVIDIA GPU as the driver lists it.
type GPU struct {
	UUID     string `json:"uuid"`
	PCIBusID string `json:"pci_bus_id"`
	Minor    int    `json:"minor"`
	Model    string `json:"model,omitempty"`
}

// Host holds the facts.
type Host struct {
	CPUVendor string   `json:"cpu_vendor"`
	CPUModel  string   `json:"cpu_model"`
	CPUFlags  []string `json:"cpu_flags"` // the ISAFlags this CPU has
	// allFlags are all of this CPU's flags: an image may record one
	// this oci-checkpoint does not list, and containerd's preflight
	// looks for it among all of them.
	allFlags map[string]bool
	Kernel   string `json:"kernel"`
	CRIU     string `json:"criu_version,omitempty"`
	Driver   string `json:"nvidia_driver,omitempty"`
	CUDA     string `json:"cuda_version,omitempty"`
	GPUs     []GPU  `json:"gpus"`
	// arch is the architecture as Go names it: this program's, which
	// Read sets (runtime.GOARCH); tests set another.
	arch string
}

// Proc is where /proc is read from; tests point it at a fake tree.
var Proc = "/proc"

// Read gathers the host's facts. Missing parts (no GPU, no criu on PATH)
// are left empty, not errors.
func Read() Host {
	h := Host{arch: runtime.GOARCH}
	h.CPUVendor, h.CPUModel, h.CPUFlags, h.allFlags = cpu(filepath.Join(Proc, "cpuinfo"))
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		h.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	h.CRIU = criuVersion()
	h.Driver = driverVersion(filepath.Join(Proc, "driver/nvidia/version"))
	h.GPUs = GPUs()
	if len(h.GPUs) > 0 {
		h.CUDA = cudaVersion()
	}
	return h
}

func cpu(path string) (vendor, model string, flags []string, have map[string]bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", nil, nil
	}
	defer f.Close()
	have = map[string]bool{}
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if !ok {
			if vendor != "" && model != "" && len(have) > 0 {
				break // the first processor is enough
			}
			continue
		}
		switch strings.TrimSpace(k) {
		case "vendor_id":
			vendor = strings.TrimSpace(v)
		case "model name":
			model = strings.TrimSpace(v)
		case "flags":
			for _, fl := range strings.Fields(v) {
				have[fl] = true
			}
		}
	}
	for _, fl := range ISAFlags {
		if have[fl] {
			flags = append(flags, fl)
		}
	}
	return vendor, model, flags, have
}

var criuVersionRe = regexp.MustCompile(`Version:\s*([0-9][0-9.]*)`)

// criuVersion asks the criu on PATH, else the one installed beside this
// program (the stack's bin directory).
func criuVersion() string {
	bin, err := exec.LookPath("criu")
	if err != nil {
		self, _ := os.Executable()
		bin = filepath.Join(filepath.Dir(self), "criu")
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return ""
	}
	if m := criuVersionRe.FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return ""
}

var driverRe = regexp.MustCompile(`Kernel Module(?: for [a-z0-9_]+)?\s+([0-9]+(?:\.[0-9]+)+)`)

func driverVersion(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if m := driverRe.FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return ""
}

var cudaRe = regexp.MustCompile(`CUDA Version:\s*([0-9.]+)`)

func cudaVersion() string {
	out, err := exec.Command("nvidia-smi").Output()
	if err != nil {
		return ""
	}
	if m := cudaRe.FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return ""
}

// GPUs lists the host's NVIDIA GPUs from /proc/driver/nvidia/gpus, by minor.
func GPUs() []GPU {
	dirs, _ := filepath.Glob(filepath.Join(Proc, "driver/nvidia/gpus/*/information"))
	var out []GPU
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		g := GPU{PCIBusID: filepath.Base(filepath.Dir(p)), Minor: -1}
		for _, line := range bytes.Split(b, []byte("\n")) {
			k, v, ok := strings.Cut(string(line), ":")
			if !ok {
				continue
			}
			v = strings.TrimSpace(v)
			switch strings.TrimSpace(k) {
			case "Model":
				g.Model = v
			case "GPU UUID":
				g.UUID = v
			case "Bus Location":
				g.PCIBusID = v
			case "Device Minor":
				g.Minor, _ = strconv.Atoi(v)
			}
		}
		if g.UUID != "" {
			out = append(out, g)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Minor < out[j].Minor })
	return out
}

// DeviceMinors turns /dev/nvidiaN device numbers into the GPUs they are,
// in minor order; names that are not GPU nodes (nvidiactl, nvidia-uvm)
// are the caller's to leave out.
func DeviceMinors(devs map[string]uint64, gpus []GPU) []GPU {
	byMinor := map[int]GPU{}
	for _, g := range gpus {
		byMinor[g.Minor] = g
	}
	var out []GPU
	seen := map[int]bool{}
	for name, rdev := range devs {
		if _, err := strconv.Atoi(strings.TrimPrefix(name, "nvidia")); err != nil {
			continue
		}
		m := int(unix.Minor(rdev))
		if g, ok := byMinor[m]; ok && !seen[m] {
			seen[m] = true
			out = append(out, g)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Minor < out[j].Minor })
	return out
}
