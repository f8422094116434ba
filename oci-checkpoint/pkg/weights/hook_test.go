package weights

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestHookContainer(t *testing.T) {
	for _, tc := range []struct {
		name, state, id, cname, err string
	}{
		{"nerdctl", `{"ociVersion":"1.2.0","id":"abc","status":"creating","bundle":"/b","annotations":{"nerdctl/name":"eng-1"}}`, "abc", "eng-1", ""},
		{"CRI", `{"id":"abc","annotations":{"io.kubernetes.cri.container-name":"engine"}}`, "abc", "engine", ""},
		{"no name", `{"id":"abc"}`, "abc", "", ""},
		{"no id", `{"annotations":{}}`, "", "", "names no container id"},
		{"not JSON", `hello`, "", "", "run by runc as a createRuntime hook"},
	} {
		st, cname, err := HookContainer(strings.NewReader(tc.state))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: got %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || st.ID != tc.id || cname != tc.cname {
			t.Errorf("%s: got %q %q %v, want %q %q", tc.name, st.ID, cname, err, tc.id, tc.cname)
		}
	}
}

func TestShimLog(t *testing.T) {
	bundle := t.TempDir()
	fifo := filepath.Join(bundle, "log")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// containerd holds the read end open, as here.
	r, err := os.OpenFile(fifo, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	shimLog(bundle, `weight set m was not loaded on this host`)
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil || !strings.Contains(line, `level=info msg="weight set m was not loaded on this host"`) {
		t.Fatalf("fifo got %q, %v", line, err)
	}
	// A regular file named log is not written to.
	plain := t.TempDir()
	os.WriteFile(filepath.Join(plain, "log"), nil, 0o600)
	shimLog(plain, "x")
	if b, _ := os.ReadFile(filepath.Join(plain, "log")); len(b) != 0 {
		t.Fatalf("wrote %q into a regular file", b)
	}
}
