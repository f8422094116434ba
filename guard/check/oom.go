// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/moby/sys/capability"
	"golang.org/x/sys/unix"

	"github.com/opencontainers/runc/libcontainer/configs"
)

// raiseOomScoreAdj raises the oom_score_adj of each of pids, restored
// tasks not yet resumed, to at least min: CRIU wrote the images' values
// with CAP_SYS_RESOURCE, and a task without it may not go below what it
// started with.
func raiseOomScoreAdj(pids []int, min int) error {
	for _, pid := range pids {
		name := fmt.Sprintf("/proc/%d/oom_score_adj", pid)
		b, err := os.ReadFile(name)
		if errors.Is(err, os.ErrNotExist) {
			continue // gone: a restored zombie reaped
		} else if err != nil {
			return err
		}
		v, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if v >= min {
			continue
		}
		if err := os.WriteFile(name, []byte(strconv.Itoa(min)), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("raising the restored task's oom_score_adj from the checkpoint's %d to the container's %d: %w", v, min, err)
		}
	}
	return nil
}

// lowerRlimits lowers each hard resource limit of pids, restored tasks
// not yet resumed, that is above hard to it (and the soft limit with it):
// CRIU set the images' limits with CAP_SYS_RESOURCE, and a task without
// it may not raise a hard limit above what it started with.
func lowerRlimits(pids []int, hard []uint64) error {
	for _, pid := range pids {
		for r, max := range hard {
			var rl unix.Rlimit
			if err := unix.Prlimit(pid, r, nil, &rl); errors.Is(err, unix.ESRCH) {
				break // gone: a restored zombie reaped
			} else if err != nil {
				return fmt.Errorf("%s of restored task %d: %w", rlimitNames[r], pid, err)
			}
			if rl.Max <= max {
				continue
			}
			low := unix.Rlimit{Cur: min(rl.Cur, max), Max: max}
			if err := unix.Prlimit(pid, r, &low, nil); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("lowering restored task %d's hard %s from the checkpoint's %s to the container's %s: %w",
					pid, rlimitNames[r], rlimitString(rl.Max), rlimitString(max), err)
			}
		}
	}
	return nil
}

// RestoredLimits holds the restored tasks (pids, all of the container's)
// to the resource limits and oom_score_adj the container starts with, where
// its config does not grant CAP_SYS_RESOURCE, with which a task could go
// beyond them.
func RestoredLimits(p *Process, config *configs.Config, pids []int) error {
	g, err := grantOf(p, config)
	if err != nil {
		return err
	}
	if g.has(capability.CAP_SYS_RESOURCE) {
		return nil
	}
	if err := lowerRlimits(pids, g.limits.hard[:]); err != nil {
		return err
	}
	return raiseOomScoreAdj(pids, g.limits.oomAdj)
}
