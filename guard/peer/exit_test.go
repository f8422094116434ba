// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package peer

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pair returns runc's end as a conn and the other end as a file that a
// child inherits, as CRIU's forks inherit it.
func exitPair(t *testing.T) (*net.UnixConn, *os.File) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_LOCAL, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "runc")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.UnixConn), os.NewFile(uintptr(fds[1]), "criu")
}

// A CRIU killed while a child of its holds the socket: Await returns at
// once naming the signal, where a read alone would block.
func TestAwaitCRIUKilled(t *testing.T) {
	conn, other := exitPair(t)
	// sh stands for CRIU; its child sleep holds the socket on.
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	cmd.ExtraFiles = []*os.File{other}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer unix.Kill(-cmd.Process.Pid, unix.SIGKILL) // the child left holding the socket
	other.Close()
	e, err := WatchExit(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Err(); err != nil {
		t.Fatalf("Err of a running process: %v", err)
	}
	time.AfterFunc(100*time.Millisecond, func() { _ = cmd.Process.Kill() })
	done := make(chan error, 1)
	go func() { done <- e.Await(conn) }()
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Await did not return when the process died")
	}
	if err == nil || !strings.Contains(err.Error(), "killed by signal 9 (SIGKILL)") {
		t.Fatalf("Await: %v, want an error naming SIGKILL", err)
	}
	// Not reaped: runc's Wait still sees it.
	st, werr := cmd.Process.Wait()
	if werr != nil || st.Success() {
		t.Fatalf("Wait after Await: %v %v", st, werr)
	}
}

// A message sent before CRIU exited is read first.
func TestAwaitMessageBeforeExit(t *testing.T) {
	conn, other := exitPair(t)
	cmd := exec.Command("sh", "-c", "printf x >&3; exit 3")
	cmd.ExtraFiles = []*os.File{other}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	other.Close()
	e, err := WatchExit(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for e.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if err := e.Await(conn); err != nil {
		t.Fatalf("Await with a message queued: %v", err)
	}
	buf := make([]byte, 16)
	if n, _ := conn.Read(buf); string(buf[:n]) != "x" {
		t.Fatalf("read %q, want x", buf[:n])
	}
	if err := e.Err(); err == nil || !strings.Contains(err.Error(), "exited with status 3") {
		t.Fatalf("Err: %v, want exited with status 3", err)
	}
	_, _ = cmd.Process.Wait()
}
