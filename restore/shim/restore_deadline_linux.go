// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package shim

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

var (
	// restoreKillGrace is how long runc has to fail and remove what it
	// created once what it started is killed, before it is killed too.
	restoreKillGrace = 10 * time.Second
	// restoreKillEvery: CRIU may not have started yet at the deadline.
	restoreKillEvery = 100 * time.Millisecond
)

// RestoreWithin runs restore, this process's runc restore of container
// id, until deadline or ctx's end. Then it kills what runc started
// (CRIU, which runc starts without a parent-death signal, and the
// processes CRIU restored so far; not the hooks runc runs, such as the
// poststop hook of its cleanup), again until restore returns: runc
// sees CRIU fail and removes the container's cgroup, state and mounts
// itself, which it cannot do if it is killed first, as ctx's end alone
// would do. runc is killed only if it has not returned within
// restoreKillGrace. timedOut says whether the deadline was reached.
func RestoreWithin(ctx context.Context, id string, deadline time.Time, restore func(context.Context) error) (timedOut bool, err error) {
	rctx, killRunc := context.WithCancel(context.WithoutCancel(ctx))
	defer killRunc()
	var expired atomic.Bool
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		select {
		case <-done:
			return
		case <-ctx.Done():
		case <-t.C:
			expired.Store(true)
		}
		grace := time.NewTimer(restoreKillGrace)
		defer grace.Stop()
		tick := time.NewTicker(restoreKillEvery)
		defer tick.Stop()
		for {
			left := stopAndKill(id)
			select {
			case <-done:
				return
			case <-tick.C:
			case <-grace.C:
				// A hook that did not end goes with runc.
				left = append(left, runcTree(id)...)
				killRunc()
				// CRIU, if left, goes to this subreaper with runc.
				killTree(left)
				return
			}
		}
	}()
	err = restore(rctx)
	close(done)
	<-stopped
	if expired.Load() || ctx.Err() != nil {
		// A process CRIU forked after the last look (a fill or
		// read-ahead helper) was reparented to this subreaper when
		// CRIU died, no longer below runc.
		killTree(adoptedCRIU())
	}
	return expired.Load(), err
}

// adoptedCRIU returns the CRIU processes this subreaper has adopted and
// every process below them.
func adoptedCRIU() []int {
	roots, below := childTrees(isCRIU)
	return append(roots, below...)
}

func isCRIU(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
	return err == nil && strings.TrimSpace(string(b)) == "criu"
}

// restoreTree returns what this process's runc restore of container id
// restores with, parents before their children: CRIU, the tasks it
// restored as runc's children (in the container's PID namespace), and
// every process below them. Not runc, and not the hooks runc runs: a
// poststop hook it runs while it cleans up (nerdctl's frees the ports
// and the address) must finish.
func restoreTree(id string) []int {
	children := procChildren()
	var top []int
	for _, runc := range children[os.Getpid()] {
		if !isRestoreOf(runc, id) {
			continue
		}
		for _, pid := range children[runc] {
			if isCRIU(pid) || ownPIDNamespace(pid) {
				top = append(top, pid)
			}
		}
	}
	return append(top, below(children, top)...)
}

// runcTree returns every process under this process's runc restore of
// container id, hooks included; not runc itself.
func runcTree(id string) []int {
	_, below := childTrees(func(pid int) bool { return isRestoreOf(pid, id) })
	return below
}

// ownPIDNamespace says whether pid is in another PID namespace than this
// process: a restored task, not a hook.
func ownPIDNamespace(pid int) bool {
	self, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return false
	}
	ns, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "ns", "pid"))
	return err == nil && ns != self
}

// procChildren maps each process to its children, read from /proc.
func procChildren() map[int][]int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := parentOf(pid); ok {
			children[ppid] = append(children[ppid], pid)
		}
	}
	return children
}

// childTrees returns this process's children that match, and every
// process below them, parents before their children, read from /proc.
func childTrees(match func(pid int) bool) (roots, rest []int) {
	children := procChildren()
	for _, pid := range children[os.Getpid()] {
		if match(pid) {
			roots = append(roots, pid)
		}
	}
	return roots, below(children, roots)
}

// below returns every process below roots, parents before children.
func below(children map[int][]int, roots []int) (below []int) {
	for next := roots; len(next) > 0; {
		var level []int
		for _, pid := range next {
			level = append(level, children[pid]...)
		}
		below = append(below, level...)
		next = level
	}
	return below
}

// parentOf reads a process's parent from /proc/PID/stat.
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false
	}
	// The command name, in parentheses, may hold anything.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// isRestoreOf says whether pid runs `runc ... restore ... id`, as go-runc
// calls it: the container ID last.
func isRestoreOf(pid int, id string) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	if len(args) < 2 || args[len(args)-1] != id {
		return false
	}
	for _, a := range args[1 : len(args)-1] {
		if a == "restore" {
			return true
		}
	}
	return false
}

// stopAndKill kills what the restore of id restores with: stopped first, so
// that CRIU forks no helper while it is looked at, then what is below
// CRIU, and CRIU once those are gone, so that runc, seeing CRIU die, finds
// the container's cgroup empty when it removes it.
func stopAndKill(id string) []int {
	var tree []int
	stopped := map[int]bool{}
	for i := 0; i < 10; i++ {
		next := restoreTree(id)
		for _, pid := range next {
			unix.Kill(pid, unix.SIGSTOP)
			stopped[pid] = true
		}
		// The same members, not just as many: a hook forking short-lived
		// helpers (nerdctl's, running CNI plugins) keeps the count while
		// a new child is stopped that the last look missed.
		same := len(next) == len(tree)
		for _, pid := range next {
			same = same && slices.Contains(tree, pid)
		}
		tree = next
		if same {
			break
		}
	}
	// A process stopped in an earlier look that left the tree (its parent
	// died) went to this subreaper; stopped for good, it would hold the
	// pipes runc waits on.
	inTree := make(map[int]bool, len(tree))
	for _, pid := range tree {
		inTree[pid] = true
	}
	self := os.Getpid()
	for pid := range stopped {
		if ppid, ok := parentOf(pid); ok && ppid == self && !inTree[pid] && !isRestoreOf(pid, id) {
			unix.Kill(pid, unix.SIGKILL)
		}
	}
	top := make(map[int]bool) // runc's children: CRIU
	for _, pid := range tree {
		if ppid, ok := parentOf(pid); ok && isRestoreOf(ppid, id) {
			top[pid] = true
		}
	}
	deadline := time.Now().Add(time.Second)
	for _, pid := range tree {
		if !top[pid] {
			unix.Kill(pid, unix.SIGKILL)
		}
	}
	for _, pid := range tree {
		for !top[pid] && !exited(pid) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	for pid := range top {
		unix.Kill(pid, unix.SIGKILL)
	}
	return tree
}

// exited reports whether pid is gone or a zombie.
func exited(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && bytes.HasPrefix(b[i+1:], []byte(" Z"))
}

func killTree(pids []int) []int {
	for _, pid := range pids {
		unix.Kill(pid, unix.SIGKILL)
	}
	return pids
}
