// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"unsafe"

	criucore "github.com/checkpoint-restore/go-criu/v8/crit/images/criu-core"
	"github.com/moby/sys/capability"
	"golang.org/x/sys/unix"

	"github.com/opencontainers/runc/libcontainer/configs"
)

// rlimitNames are the resources CRIU restores a limit of, by number.
var rlimitNames = [...]string{
	"RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_DATA", "RLIMIT_STACK", "RLIMIT_CORE", "RLIMIT_RSS",
	"RLIMIT_NPROC", "RLIMIT_NOFILE", "RLIMIT_MEMLOCK", "RLIMIT_AS", "RLIMIT_LOCKS",
	"RLIMIT_SIGPENDING", "RLIMIT_MSGQUEUE", "RLIMIT_NICE", "RLIMIT_RTPRIO", "RLIMIT_RTTIME",
}

// schedOther is SCHED_OTHER, which x/sys/unix does not name, and
// schedFlagResetOnFork sched_attr's SCHED_FLAG_RESET_ON_FORK.
const (
	schedOther           = 0
	schedFlagResetOnFork = 0x01
)

// invalidUID is an unset loginuid.
const invalidUID = math.MaxUint32

// limits is what a start of the container's process would give it of the
// task state CRIU restores besides credentials: hard resource limits,
// scheduling, oom_score_adj and loginuid. CRIU sets each while it still
// holds every capability, so without a check the images choose them.
type limits struct {
	hard   [len(rlimitNames)]uint64
	policy uint32
	prio   uint32 // the real-time priority
	nice   int32  // the lowest
	// resetOnFork is whether the config's scheduler sets
	// SCHED_RESET_ON_FORK, which a task cannot drop without CAP_SYS_NICE.
	resetOnFork bool
	oomAdj      int // the lowest, where the config grants no CAP_SYS_RESOURCE
	loginuid    uint32
}

// limitsOf returns what a start would give: the process's or else the
// config's rlimits, scheduler and oom_score_adj, and for the rest what the
// process would inherit from runc.
func limitsOf(p *Process, config *configs.Config) (*limits, error) {
	var l limits
	for r := range l.hard {
		var rl unix.Rlimit
		if err := unix.Getrlimit(r, &rl); err != nil {
			return nil, fmt.Errorf("runc's own %s: %w", rlimitNames[r], err)
		}
		l.hard[r] = rl.Max
	}
	rlimits := config.Rlimits
	if len(p.Rlimits) > 0 {
		rlimits = p.Rlimits
	}
	for _, rl := range rlimits {
		if rl.Type >= 0 && rl.Type < len(l.hard) {
			l.hard[rl.Type] = rl.Hard
		}
	}

	sched := config.Scheduler
	if p.Scheduler != nil {
		sched = p.Scheduler
	}
	if sched != nil {
		attr, err := configs.ToSchedAttr(sched)
		if err != nil {
			return nil, err
		}
		l.policy, l.prio, l.nice = attr.Policy, attr.Priority, attr.Nice
		l.resetOnFork = attr.Flags&schedFlagResetOnFork != 0
	} else if err := ownSched(&l); err != nil {
		return nil, err
	}

	if config.OomScoreAdj != nil {
		l.oomAdj = *config.OomScoreAdj
	} else {
		v, err := readProcInt("oom_score_adj")
		if err != nil {
			return nil, err
		}
		l.oomAdj = int(v)
	}
	l.loginuid = invalidUID
	if v, err := readProcInt("loginuid"); err == nil {
		l.loginuid = uint32(v)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return &l, nil
}

// ownSched sets l's scheduling to runc's own, which a start inherits.
func ownSched(l *limits) error {
	if attr, err := unix.SchedGetAttr(0, 0); err == nil {
		l.policy, l.prio, l.nice = attr.Policy, attr.Priority, attr.Nice
		l.resetOnFork = attr.Flags&schedFlagResetOnFork != 0
		return nil
	}
	// Without sched_getattr(2) (an old kernel, a sandbox's seccomp).
	policy, _, errno := unix.RawSyscall(unix.SYS_SCHED_GETSCHEDULER, 0, 0, 0)
	if errno != 0 {
		return fmt.Errorf("runc's own scheduling policy: %w", errno)
	}
	var param struct{ prio int32 }
	if _, _, errno := unix.RawSyscall(unix.SYS_SCHED_GETPARAM, 0, uintptr(unsafe.Pointer(&param)), 0); errno != 0 {
		return fmt.Errorf("runc's own scheduling priority: %w", errno)
	}
	prio, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		return fmt.Errorf("runc's own nice: %w", err)
	}
	l.policy = uint32(policy) &^ unix.SCHED_RESET_ON_FORK
	l.resetOnFork = uint32(policy)&unix.SCHED_RESET_ON_FORK != 0
	l.prio = uint32(param.prio)
	l.nice = int32(20 - prio) // the system call returns 20 - nice
	return nil
}

func readProcInt(name string) (int64, error) {
	b, err := os.ReadFile("/proc/self/" + name)
	if err != nil {
		return 0, fmt.Errorf("runc's own %s: %w", name, err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("runc's own %s: %w", name, err)
	}
	return v, nil
}

// checkTask compares a task's loginuid in its core image with what g's
// limits give. Its resource limits and oom_score_adj are not compared but
// held to the container's after the restore (restoredLimits): what a
// container starts with differs from client to client.
func (g *grant) checkTask(dir *os.File, pid uint32, tc *criucore.TaskCoreEntry) error {
	if tc == nil {
		return fmt.Errorf("checkpoint image core-%d.img holds no task core", pid)
	}
	// CRIU unsets its own loginuid before it forks the tasks, and sets a
	// task's only where the image has one. A task whose loginuid is unset
	// may set any; one that is set may change it only with
	// CAP_AUDIT_CONTROL. A start inherits runc's: where that is set, the
	// task must come back with the same.
	loginuid := uint32(invalidUID)
	if tc.Loginuid != nil {
		loginuid = tc.GetLoginuid()
	}
	if g.limits.loginuid != invalidUID && loginuid != g.limits.loginuid && !g.has(capability.CAP_AUDIT_CONTROL) {
		return fmt.Errorf("has loginuid %s, not runc's own %s, without CAP_AUDIT_CONTROL",
			loginuidString(loginuid), loginuidString(g.limits.loginuid))
	}
	return nil
}

// checkSched compares a thread's scheduling in its core image with what l
// gives. The kernel lets a thread without CAP_SYS_NICE take a real-time
// policy up to RLIMIT_RTPRIO, lower its nice down to 20 - RLIMIT_NICE,
// leave SCHED_IDLE only as far as it may lower its nice, and never drop
// SCHED_RESET_ON_FORK.
func (g *grant) checkSched(th *criucore.ThreadCoreEntry) error {
	if g.has(capability.CAP_SYS_NICE) {
		return nil
	}
	l := g.limits
	rtprio, niceLimit := l.hard[unix.RLIMIT_RTPRIO], l.hard[unix.RLIMIT_NICE]
	if g.has(capability.CAP_SYS_RESOURCE) {
		// The task may raise those limits itself.
		rtprio, niceLimit = unix.RLIM_INFINITY, unix.RLIM_INFINITY
	}
	// CRIU restores SCHED_OTHER at nice 0 where the image has no policy.
	policy := th.GetSchedPolicy() &^ unix.SCHED_RESET_ON_FORK
	nice, prio := th.GetSchedNice(), th.GetSchedPrio()
	canNice := func(nice int32) bool { return nice >= l.nice || uint64(20-nice) <= niceLimit }
	if l.resetOnFork && th.GetSchedPolicy()&unix.SCHED_RESET_ON_FORK == 0 {
		return fmt.Errorf("has %s without SCHED_RESET_ON_FORK, which the config sets, without CAP_SYS_NICE", policyName(policy))
	}
	switch policy {
	case schedOther, unix.SCHED_BATCH:
		// Leaving SCHED_IDLE takes RLIMIT_NICE for the nice it has.
		if l.policy == unix.SCHED_IDLE && uint64(20-l.nice) > niceLimit {
			return fmt.Errorf("has %s, the config gives SCHED_IDLE, without CAP_SYS_NICE", policyName(policy))
		}
	case unix.SCHED_IDLE:
	case unix.SCHED_FIFO, unix.SCHED_RR:
		if !(policy == l.policy && prio <= l.prio) && uint64(prio) > rtprio {
			return fmt.Errorf("has real-time scheduling %s at priority %d, which the config does not give, without CAP_SYS_NICE",
				policyName(policy), prio)
		}
	default:
		return fmt.Errorf("has scheduling %s, which the config does not give, without CAP_SYS_NICE", policyName(policy))
	}
	if !canNice(nice) {
		return fmt.Errorf("has nice %d, below the container's %d, without CAP_SYS_NICE", nice, l.nice)
	}
	return nil
}

func policyName(p uint32) string {
	names := map[uint32]string{schedOther: "SCHED_OTHER", unix.SCHED_FIFO: "SCHED_FIFO", unix.SCHED_RR: "SCHED_RR",
		unix.SCHED_BATCH: "SCHED_BATCH", unix.SCHED_IDLE: "SCHED_IDLE", 6: "SCHED_DEADLINE"}
	if n, ok := names[p]; ok {
		return n
	}
	return "policy " + strconv.FormatUint(uint64(p), 10)
}

func rlimitString(v uint64) string {
	if v == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return strconv.FormatUint(v, 10)
}

func loginuidString(v uint32) string {
	if v == invalidUID {
		return "(unset)"
	}
	return strconv.FormatUint(uint64(v), 10)
}
