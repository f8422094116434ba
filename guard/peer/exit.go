// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package peer

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Exit watches CRIU's process through a pidfd, beside runc's reads of
// the socket: the socket alone does not end when CRIU dies, as the tasks
// CRIU forked hold its end, and runc would wait for an answer forever.
type Exit struct {
	pid int
	fd  int
}

// WatchExit watches pid, a child of this process not yet waited for.
func WatchExit(pid int) (*Exit, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd of CRIU (pid %d): %w", pid, err)
	}
	return &Exit{pid: pid, fd: fd}, nil
}

// Close releases the pidfd.
func (e *Exit) Close() {
	if e.fd >= 0 {
		_ = unix.Close(e.fd)
		e.fd = -1
	}
}

// Await waits until conn has something to read (nil: a message, an end
// or an error for the read to see) or CRIU has exited with nothing left
// on conn (an error naming how CRIU died). A message CRIU sent before it
// died is always read first.
func (e *Exit) Await(conn syscall.Conn) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var readable bool
	var perr error
	cerr := rc.Control(func(sock uintptr) {
		fds := []unix.PollFd{{Fd: int32(sock), Events: unix.POLLIN}, {Fd: int32(e.fd), Events: unix.POLLIN}}
		for {
			_, perr = unix.Poll(fds, -1)
			if !errors.Is(perr, unix.EINTR) {
				break
			}
		}
		readable = fds[0].Revents != 0
	})
	switch {
	case cerr != nil:
		return cerr
	case perr != nil:
		return fmt.Errorf("waiting for CRIU (pid %d): %w", e.pid, perr)
	case readable:
		return nil
	}
	if err := e.Err(); err != nil {
		return err
	}
	return fmt.Errorf("waiting for CRIU (pid %d): its pidfd is readable but it has not exited", e.pid)
}

// Err returns an error naming how CRIU died if it has exited, nil while
// it runs. A read that failed may have seen CRIU's end of the socket
// closed by its exit before the exit is complete: Err gives it a second.
// It does not reap CRIU: runc's Wait does.
func (e *Exit) Err() error {
	fds := []unix.PollFd{{Fd: int32(e.fd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, 1000); !errors.Is(err, unix.EINTR) {
			break
		}
	}
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PIDFD, e.fd, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil {
		return nil
	}
	ci := (*childInfo)(unsafe.Pointer(&info))
	if ci.Pid == 0 { // WNOHANG: still running
		return nil
	}
	return fmt.Errorf("criu (pid %d) %s before it finished (see its log); what it restored is killed", e.pid, describe(ci.Code, ci.Status))
}

// childInfo is siginfo_t as waitid fills it for a child (SIGCHLD).
type childInfo struct {
	Signo  int32
	Errno  int32
	Code   int32
	_      int32
	Pid    int32
	Uid    uint32
	Status int32
}

// si_code of a SIGCHLD (asm-generic/siginfo.h).
const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

// describe says how a child ended, from si_code and si_status.
func describe(code, status int32) string {
	switch code {
	case cldExited:
		return fmt.Sprintf("exited with status %d", status)
	case cldKilled, cldDumped:
		return fmt.Sprintf("died, killed by signal %d (%s)", status, unix.SignalName(syscall.Signal(status)))
	}
	return fmt.Sprintf("ended (si_code %d, status %d)", code, status)
}
