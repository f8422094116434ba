// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestRaiseOomScoreAdj(t *testing.T) {
	// Raising one takes no privilege: the tasks start at this one's
	// (0 unless inherited otherwise) plus 100, 200 and 500.
	base, err := readProcInt("oom_score_adj")
	if err != nil {
		t.Fatal(err)
	}
	if base > 400 {
		t.Skipf("oom_score_adj %d leaves no room", base)
	}
	var pids []int
	for _, d := range []int64{100, 200, 500} {
		adj := strconv.FormatInt(base+d, 10)
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		name := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/oom_score_adj"
		if err := os.WriteFile(name, []byte(adj), 0); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, cmd.Process.Pid)
	}
	if err := raiseOomScoreAdj(pids, int(base+300)); err != nil {
		t.Fatal(err)
	}
	for i, d := range []int64{300, 300, 500} {
		want := strconv.FormatInt(base+d, 10)
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pids[i]) + "/oom_score_adj")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(b)); got != want {
			t.Errorf("task %d: oom_score_adj %s, want %s", i, got, want)
		}
	}
}

// TestLowerRlimits lowers the hard limits of real processes: one above
// the container's, one below it.
func TestLowerRlimits(t *testing.T) {
	var pids []int
	for _, max := range []uint64{4096, 512} {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		rl := unix.Rlimit{Cur: max, Max: max}
		if err := unix.Prlimit(cmd.Process.Pid, unix.RLIMIT_NOFILE, &rl, nil); err != nil {
			t.Skipf("setting a child's RLIMIT_NOFILE: %v", err)
		}
		pids = append(pids, cmd.Process.Pid)
	}
	hard := make([]uint64, len(rlimitNames))
	for r := range hard {
		hard[r] = unix.RLIM_INFINITY
	}
	hard[unix.RLIMIT_NOFILE] = 1024
	if err := lowerRlimits(pids, hard); err != nil {
		t.Fatal(err)
	}
	for i, want := range []uint64{1024, 512} {
		var rl unix.Rlimit
		if err := unix.Prlimit(pids[i], unix.RLIMIT_NOFILE, nil, &rl); err != nil {
			t.Fatal(err)
		}
		if rl.Max != want || rl.Cur != want {
			t.Errorf("task %d: RLIMIT_NOFILE %d/%d, want %d/%d", i, rl.Cur, rl.Max, want, want)
		}
	}
}
