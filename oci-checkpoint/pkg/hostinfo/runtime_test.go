package hostinfo

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseRuncVersion(t *testing.T) {
	for out, want := range map[string]string{
		"runc version 1.5.2+rekindle\nspec: 1.3.0\ngo: go1.26.8\n": "1.5.2+rekindle",
		"runc version 1.1.12\ncommit: v1.1.12-0-g51d5e946\n":       "1.1.12",
		"crun version 1.8\n": "",
		"":                   "",
	} {
		if got := parseRuncVersion([]byte(out)); got != want {
			t.Errorf("parseRuncVersion(%q) = %q, want %q", out, got, want)
		}
	}
}

func TestDistribution(t *testing.T) {
	p := filepath.Join(t.TempDir(), "os-release")
	os.WriteFile(p, []byte("PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nID=debian\n"), 0o644)
	if id, v := distribution(p); id != "debian" || v != "12" {
		t.Errorf("distribution = %q %q, want debian 12", id, v)
	}
	if id, v := distribution(filepath.Join(t.TempDir(), "none")); id != "" || v != "" {
		t.Errorf("distribution of a missing file = %q %q", id, v)
	}
}

func TestCgroupVersion(t *testing.T) {
	if got := cgroupVersion("/sys/fs/cgroup"); got != "v1" && got != "v2" {
		t.Errorf("cgroupVersion(/sys/fs/cgroup) = %q, want v1 or v2", got)
	}
	// A plain directory is no unified hierarchy.
	if got := cgroupVersion(t.TempDir()); got != "v1" {
		t.Errorf("cgroupVersion(tmpdir) = %q, want v1", got)
	}
	if got := cgroupVersion("/no/such/dir"); got != "" {
		t.Errorf("cgroupVersion(missing) = %q, want empty", got)
	}
}
