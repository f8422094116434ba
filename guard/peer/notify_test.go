// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package peer

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	criurpc "github.com/checkpoint-restore/go-criu/v8/rpc"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// A child run with NOTIFY_SEND=SCRIPT sends that notification on fd 3, as
// a restored task holding the socket could.
func TestMain(m *testing.M) {
	if script := os.Getenv("NOTIFY_SEND"); script != "" {
		f := os.NewFile(3, "sock")
		b, _ := notification(script).MarshalVT()
		if _, err := f.Write(b); err != nil {
			os.Exit(1)
		}
		if os.Getenv("NOTIFY_WAIT") != "" {
			_, _ = io.Copy(io.Discard, os.Stdin)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func notification(script string) *criurpc.CriuResp {
	return &criurpc.CriuResp{Type: criurpc.CriuReqType_NOTIFY.Enum(), Success: proto.Bool(true),
		Notify: &criurpc.CriuNotify{Script: proto.String(script), Pid: proto.Int32(1)}}
}

// pair is runc's end (listening for credentials) and CRIU's.
func pair(t *testing.T) (*net.UnixConn, *os.File) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_LOCAL, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := Listen(fds[0]); err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "runc")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	other := os.NewFile(uintptr(fds[1]), "criu")
	t.Cleanup(func() { other.Close() })
	return c.(*net.UnixConn), other
}

// receive reads one message and checks it as a Peer of CRIU pid criu.
func receive(t *testing.T, c *net.UnixConn, p *Peer) ([]byte, error) {
	t.Helper()
	buf, oob := make([]byte, 4096), make([]byte, 4096)
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		t.Fatal(err)
	}
	resp := new(criurpc.CriuResp)
	if err := resp.UnmarshalVT(buf[:n]); err != nil {
		t.Fatal(err)
	}
	return p.Receive(resp, oob[:oobn])
}

func restoreReq(ptys bool) *criurpc.CriuReq {
	return &criurpc.CriuReq{Type: criurpc.CriuReqType_RESTORE.Enum(), Opts: &criurpc.CriuOpts{OrphanPtsMaster: proto.Bool(ptys)}}
}

func TestReceiveFromAnotherProcess(t *testing.T) {
	c, other := pair(t)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "NOTIFY_SEND=setup-namespaces")
	cmd.ExtraFiles = []*os.File{other}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sender: %v: %s", err, out)
	}
	// CRIU is this process: the child is not.
	_, err := receive(t, c, New(os.Getpid(), restoreReq(false)))
	want := fmt.Sprintf(`refusing a notification "setup-namespaces" on the socket to CRIU from pid %d (uid 0), which is not CRIU (pid %d)`, cmd.Process.Pid, os.Getpid())
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
}

// A task CRIU restores, its child, sends the pty masters; it is alive then.
func TestReceiveOrphanPtyFromARestoredTask(t *testing.T) {
	for _, ptys := range []bool{true, false} {
		c, other := pair(t)
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "NOTIFY_SEND=orphan-pts-master", "NOTIFY_WAIT=1")
		cmd.ExtraFiles = []*os.File{other}
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		_, err = receive(t, c, New(os.Getpid(), restoreReq(ptys)))
		stdin.Close()
		_ = cmd.Wait()
		switch {
		case ptys && err != nil:
			t.Errorf("a pty master from CRIU's child refused: %v", err)
		case !ptys && (err == nil || !strings.Contains(err.Error(), "runc did not ask for pty masters")):
			t.Errorf("a pty master runc did not ask for: %v", err)
		}
	}
}

func TestReceiveOrder(t *testing.T) {
	for _, tc := range []struct {
		name    string
		scripts []string
		ptys    bool
		err     string // of the last
	}{
		{name: "CRIU's order", scripts: []string{"pre-restore", "setup-namespaces", "post-setup-namespaces", "post-restore", "network-unlock", "pre-resume", "post-resume"}},
		{name: "pty masters", ptys: true, scripts: []string{"setup-namespaces", "orphan-pts-master", "orphan-pts-master", "post-restore"}},
		{name: "a pty master runc did not ask for", scripts: []string{"setup-namespaces", "orphan-pts-master"}, err: "runc did not ask for pty masters"},
		{name: "setup-namespaces twice", scripts: []string{"setup-namespaces", "post-restore", "setup-namespaces"}, err: `refusing notification "setup-namespaces" from CRIU: out of the restore's order`},
		{name: "post-restore twice", scripts: []string{"post-restore", "post-restore"}, err: "out of the restore's order"},
		{name: "a dump's notification", scripts: []string{"post-dump"}, err: `refusing notification "post-dump" from CRIU: a restore sends none such`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, other := pair(t)
			p := New(os.Getpid(), restoreReq(tc.ptys))
			var err error
			for _, s := range tc.scripts {
				if err != nil {
					t.Fatalf("refused before the last: %v", err)
				}
				b, _ := notification(s).MarshalVT()
				if _, werr := other.Write(b); werr != nil {
					t.Fatal(werr)
				}
				_, err = receive(t, c, p)
			}
			if tc.err == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("want an error with %q, got %v", tc.err, err)
			}
		})
	}
}

// The descriptors CRIU passes reach runc's handlers; the credentials do not.
func TestReceiveKeepsRights(t *testing.T) {
	c, other := pair(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	b, _ := notification("orphan-pts-master").MarshalVT()
	if err := unix.Sendmsg(int(other.Fd()), b, unix.UnixRights(int(w.Fd())), nil, 0); err != nil {
		t.Fatal(err)
	}
	p := New(os.Getpid(), restoreReq(true))
	oob, err := receive(t, c, p)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil || len(msgs) != 1 || msgs[0].Header.Type != unix.SCM_RIGHTS {
		t.Fatalf("control messages %+v (%v), want one SCM_RIGHTS", msgs, err)
	}
	fds, _ := unix.ParseUnixRights(&msgs[0])
	for _, fd := range fds {
		unix.Close(fd)
	}
	if len(fds) != 1 {
		t.Fatalf("%d descriptors passed on, want 1", len(fds))
	}
}
