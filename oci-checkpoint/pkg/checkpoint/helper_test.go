package checkpoint

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"

	"rekindle.local/oci-checkpoint/pkg/inroot"
)

func TestHostID(t *testing.T) {
	maps := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 1000}, {ContainerID: 1000, HostID: 5000, Size: 1}}
	for _, tc := range []struct {
		id   uint32
		maps []specs.LinuxIDMapping
		want uint32
	}{
		{0, nil, 0},
		{1000, nil, 1000},
		{0, maps, 100000},
		{999, maps, 100999},
		{1000, maps, 5000},
		{2000, maps, 2000},
	} {
		if got := hostID(tc.id, tc.maps); got != tc.want {
			t.Errorf("hostID(%d, %v) = %d, want %d", tc.id, tc.maps, got, tc.want)
		}
	}
}

// TestVerifyHelper runs copies of sleep(1) as the helper: the one written,
// a rewritten one and another file put in its place.
func TestVerifyHelper(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep(1)")
	}
	bin, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	run := func(path string) uint32 {
		cmd := exec.Command(path, "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return uint32(cmd.Process.Pid)
	}
	for _, tc := range []struct {
		name  string
		after func(t *testing.T, path string) // between the write and the exec
		err   string
	}{
		{name: "the file written"},
		{
			name: "another file in its place",
			after: func(t *testing.T, path string) {
				must(t, os.Rename(path, path+".old"))
				must(t, os.WriteFile(path, bin, 0o755))
			},
			err: "no process of the container runs the wake helper",
		},
		{
			name: "the file rewritten",
			after: func(t *testing.T, path string) {
				f, err := os.OpenFile(path, os.O_WRONLY, 0)
				must(t, err)
				_, err = f.WriteAt([]byte{bin[len(bin)-1] ^ 0xff}, int64(len(bin)-1))
				must(t, err)
				must(t, f.Close())
			},
			err: "the container rewrote the wake helper",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			root, err := inroot.Open(dir)
			must(t, err)
			defer root.Close()
			held, err := root.WriteFileHeld("/helper", bin, 0o755)
			must(t, err)
			defer held.Close()
			path := filepath.Join(dir, "helper")
			if tc.after != nil {
				tc.after(t, path)
			}
			other := run(sleep) // a process of the container that is not the helper
			err = verifyHelper(held, bin, []uint32{other, run(path)})
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			t.Log(err)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("want an error with %q, got %v", tc.err, err)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
