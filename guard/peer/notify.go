// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

// Package peer checks the messages runc reads from its RPC socket with
// CRIU: each comes from CRIU itself, and a restore's notifications come in
// the order CRIU sends them. runc acts on a notification as root (it runs
// the config's hooks with the pid it names, brings up that pid's
// loopback); a restored task that got hold of the socket could otherwise
// drive runc, and the answer runc waits for could come from anyone.
package peer

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	criurpc "github.com/checkpoint-restore/go-criu/v8/rpc"
	"golang.org/x/sys/unix"
)

// restoreOrder is the order in which CRIU's restore (criu/cr-restore.c)
// runs its action scripts, each once. orphan-pts-master comes from a task
// restoring a pty, any number of times, while the tasks' files are opened.
var restoreOrder = map[string]int{
	"pre-restore":           1,
	"setup-namespaces":      2,
	"post-setup-namespaces": 3,
	"orphan-pts-master":     4,
	"post-restore":          5,
	"network-unlock":        6,
	"pre-resume":            7,
	"post-resume":           8,
}

// Peer is runc's side of one CRIU RPC session.
type Peer struct {
	criu    int
	restore bool
	ptys    bool // the request asked CRIU to pass orphan pty masters
	last    int  // restoreOrder of the last notification
}

// New returns the checks for a session with CRIU running as pid criu,
// serving req.
func New(criu int, req *criurpc.CriuReq) *Peer {
	return &Peer{
		criu:    criu,
		restore: req.GetType() == criurpc.CriuReqType_RESTORE,
		ptys:    req.GetOpts().GetOrphanPtsMaster(),
	}
}

// Listen makes the kernel attach the sender's credentials to every
// message socket fd (runc's end of the pair) receives.
func Listen(fd int) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		return fmt.Errorf("SO_PASSCRED on the socket to CRIU: %w", err)
	}
	return nil
}

// Receive checks resp, read from the socket with its control messages
// oob, and returns those runc's handlers read: the descriptors CRIU
// passes, without the sender's credentials.
func (p *Peer) Receive(resp *criurpc.CriuResp, oob []byte) ([]byte, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("a message from CRIU with unreadable control data: %w", err)
	}
	var cred *unix.Ucred
	var rights []int
	for i := range msgs {
		m := &msgs[i]
		switch {
		case m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_CREDENTIALS:
			if cred, err = unix.ParseUnixCredentials(m); err != nil {
				return nil, err
			}
		case m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_RIGHTS:
			fds, err := unix.ParseUnixRights(m)
			if err != nil {
				return nil, err
			}
			rights = append(rights, fds...)
		default:
			return nil, fmt.Errorf("a message from CRIU with control data of level %d type %d", m.Header.Level, m.Header.Type)
		}
	}
	var out []byte
	if len(rights) > 0 {
		out = unix.UnixRights(rights...)
	}
	if err := p.check(resp, cred); err != nil {
		closeAll(rights)
		return nil, err
	}
	return out, nil
}

func (p *Peer) check(resp *criurpc.CriuResp, cred *unix.Ucred) error {
	if cred == nil {
		return errors.New("a message on the socket to CRIU carries no sender credentials (SO_PASSCRED is not set)")
	}
	script := resp.GetNotify().GetScript()
	notify := resp.GetType() == criurpc.CriuReqType_NOTIFY
	from := int(cred.Pid)
	switch {
	case from == p.criu:
	case notify && script == "orphan-pts-master" && descends(from, p.criu):
		// A task CRIU is restoring opens the pty and sends its master.
	default:
		what := resp.GetType().String()
		if notify {
			what = "notification " + strconv.Quote(script)
		}
		return fmt.Errorf("refusing a %s on the socket to CRIU from pid %d (uid %d), which is not CRIU (pid %d)",
			what, from, cred.Uid, p.criu)
	}
	if !notify || !p.restore {
		return nil
	}
	rank, ok := restoreOrder[script]
	switch {
	case !ok:
		return fmt.Errorf("refusing notification %q from CRIU: a restore sends none such", script)
	case script == "orphan-pts-master" && !p.ptys:
		return errors.New("refusing notification \"orphan-pts-master\" from CRIU: runc did not ask for pty masters")
	case rank < p.last || (rank == p.last && script != "orphan-pts-master"):
		return fmt.Errorf("refusing notification %q from CRIU: out of the restore's order", script)
	}
	p.last = rank
	return nil
}

// descends reports whether pid is a descendant of ancestor, by the
// parents /proc names.
func descends(pid, ancestor int) bool {
	for range 64 {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return false
		}
		// pid (comm) state ppid ...: comm may hold spaces and parens.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 {
			return false
		}
		if pid, err = strconv.Atoi(f[1]); err != nil || pid <= 1 {
			return false
		}
		if pid == ancestor {
			return true
		}
	}
	return false
}

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}
