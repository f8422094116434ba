package weights

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

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
