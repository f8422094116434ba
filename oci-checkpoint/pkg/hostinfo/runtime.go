package hostinfo

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Runtime holds the facts checkpointctl's standard annotations record
// beside the ones Check compares: the OCI runtime, the cgroup version and
// the distribution (some distributions patch the kernel in ways that break
// CRIU).
type Runtime struct {
	Arch          string // GOARCH, as podman writes it (amd64, arm64)
	RuncVersion   string
	CgroupVersion string // v1 or v2
	Distribution  string // os-release ID (debian)
	DistroVersion string // os-release VERSION_ID (12)
}

// OSRelease is the os-release file read; tests point it elsewhere.
var OSRelease = "/etc/os-release"

// CgroupRoot is where the cgroup hierarchy is mounted.
var CgroupRoot = "/sys/fs/cgroup"

// ReadRuntime gathers them; what cannot be read is left empty.
func ReadRuntime() Runtime {
	r := Runtime{Arch: runtime.GOARCH, RuncVersion: runcVersion(), CgroupVersion: cgroupVersion(CgroupRoot)}
	r.Distribution, r.DistroVersion = distribution(OSRelease)
	return r
}

var runcVersionRe = regexp.MustCompile(`(?m)^runc version\s+(\S+)`)

// parseRuncVersion reads `runc --version`'s first line.
func parseRuncVersion(out []byte) string {
	if m := runcVersionRe.FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return ""
}

// runcVersion asks the runc on PATH, else the one beside this program.
func runcVersion() string {
	bin, err := exec.LookPath("runc")
	if err != nil {
		self, _ := os.Executable()
		bin = filepath.Join(filepath.Dir(self), "runc")
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return ""
	}
	return parseRuncVersion(out)
}

// cgroupVersion is v2 when root is a cgroup2 mount (the unified
// hierarchy), v1 otherwise (including hybrid hosts).
func cgroupVersion(root string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return ""
	}
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		return "v2"
	}
	return "v1"
}

// distribution reads ID and VERSION_ID from an os-release file.
func distribution(path string) (id, version string) {
	f, err := os.Open(path)
	if err != nil {
		return "", ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(s.Text()), "=")
		if !ok {
			continue
		}
		v = strings.Trim(v, `"'`)
		switch k {
		case "ID":
			id = v
		case "VERSION_ID":
			version = v
		}
	}
	return id, version
}
