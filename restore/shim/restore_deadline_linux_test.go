// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package shim

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// fakeRunc writes a script that stands for runc restore: it starts
// "criu" (a copy of sleep), records its pid, waits for it and then, as
// runc cleans up after a failed CRIU, writes cleaned-up, unless stubborn,
// when it waits on.
func fakeRunc(t *testing.T, stubborn bool) (dir, script string) {
	dir = t.TempDir()
	sleep, err := exec.LookPath("sleep")
	require.NoError(t, err)
	b, err := os.ReadFile(sleep)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "criu"), b, 0o700))
	after := "echo done >" + dir + "/cleaned-up; exit 1"
	if stubborn {
		after = "exec " + dir + "/criu 1000"
	}
	script = filepath.Join(dir, "runc")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\n"+
		dir+"/criu 1000 &\necho $! >"+dir+"/criu.pid\nwait $!\n"+after+"\n"), 0o700))
	return dir, script
}

func runFake(script, id string) func(context.Context) error {
	return func(ctx context.Context) error {
		return exec.CommandContext(ctx, script, "--root", "/nowhere", "restore", "--detach", id).Run()
	}
}

// gone says whether pid has exited (or is a zombie whose parent has not
// reaped it yet).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && strings.HasPrefix(string(b[i+1:]), " Z")
}

func criuPid(t *testing.T, dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "criu.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	return pid
}

func TestRestoreWithinKillsCRIUAtTheDeadline(t *testing.T) {
	dir, script := fakeRunc(t, false)
	start := time.Now()
	timedOut, err := RestoreWithin(context.Background(), "c1", start.Add(300*time.Millisecond), runFake(script, "c1"))
	assert.True(t, timedOut)
	assert.Error(t, err, "runc reports the failed CRIU")
	assert.Less(t, time.Since(start), 5*time.Second, "CRIU was not killed at the deadline")
	assert.FileExists(t, filepath.Join(dir, "cleaned-up"), "runc was killed before it could clean up")
	assert.True(t, gone(criuPid(t, dir)), "CRIU outlived the deadline")
}

func TestRestoreWithinKillsRuncAfterTheGrace(t *testing.T) {
	grace := restoreKillGrace
	restoreKillGrace = 500 * time.Millisecond
	defer func() { restoreKillGrace = grace }()
	dir, script := fakeRunc(t, true)
	start := time.Now()
	timedOut, err := RestoreWithin(context.Background(), "c2", start.Add(200*time.Millisecond), runFake(script, "c2"))
	assert.True(t, timedOut)
	assert.Error(t, err)
	assert.Less(t, time.Since(start), 5*time.Second, "runc was not killed after the grace")
	assert.True(t, gone(criuPid(t, dir)))
}

func TestRestoreWithinLeavesOthersAlone(t *testing.T) {
	// Another container's restore, in the same shim, is not killed.
	other, script := fakeRunc(t, false)
	cmd := exec.Command(script, "restore", "other")
	require.NoError(t, cmd.Start())
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(other, "criu.pid")); return err == nil }, 5*time.Second, 10*time.Millisecond)
	_, mine := fakeRunc(t, false)
	timedOut, _ := RestoreWithin(context.Background(), "mine", time.Now().Add(200*time.Millisecond), runFake(mine, "mine"))
	assert.True(t, timedOut)
	assert.False(t, gone(criuPid(t, other)), "another container's CRIU was killed")
	unixKill(criuPid(t, other))
}

func TestRestoreWithinInTime(t *testing.T) {
	timedOut, err := RestoreWithin(context.Background(), "c3", time.Now().Add(time.Minute), func(context.Context) error { return nil })
	assert.False(t, timedOut)
	assert.NoError(t, err)
}

func unixKill(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		p.Kill()
	}
}

// A helper CRIU forked away from runc's tree (as its fill and read-ahead
// helpers can be, after the shim's last look) goes to the shim, a
// subreaper, when CRIU dies: it is killed there too.
func TestRestoreWithinKillsCRIUTheShimAdopted(t *testing.T) {
	require.NoError(t, unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0))
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	dir, _ := fakeRunc(t, false) // dir/criu: sleep, named as CRIU is
	criu := filepath.Join(dir, "bin", "criu")
	require.NoError(t, os.Mkdir(filepath.Join(dir, "bin"), 0o700))
	require.NoError(t, os.WriteFile(criu, []byte("#!/bin/sh\n( ( while :; do sleep 1; done ) & echo $! >"+
		dir+"/helper.pid )\nexec "+dir+"/criu 1000\n"), 0o700))
	script := filepath.Join(dir, "runc")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\n"+criu+" &\nwait $!\nexit 1\n"), 0o700))
	timedOut, err := RestoreWithin(context.Background(), "c1", time.Now().Add(300*time.Millisecond), runFake(script, "c1"))
	assert.True(t, timedOut)
	assert.Error(t, err)
	b, err := os.ReadFile(filepath.Join(dir, "helper.pid"))
	require.NoError(t, err)
	helper, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	defer unix.Kill(helper, unix.SIGKILL)
	assert.Eventually(t, func() bool { return gone(helper) }, 2*time.Second, 20*time.Millisecond, "the adopted helper was killed")
	var ws unix.WaitStatus
	unix.Wait4(helper, &ws, unix.WNOHANG, nil)
}

// The poststop hook runc runs while it cleans up after the killed CRIU
// (nerdctl's, running CNI plugins that fork all the time, freeing the
// ports and the address) is neither stopped nor killed: it finishes, and
// runc after it.
func TestRestoreWithinSparesTheCleanupHook(t *testing.T) {
	require.NoError(t, unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0))
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	dir, _ := fakeRunc(t, false)
	hook := filepath.Join(dir, "hook")
	require.NoError(t, os.WriteFile(hook, []byte("#!/bin/sh\ni=0\nwhile [ $i -lt 100 ]; do /bin/true & /bin/true & wait; i=$((i+1)); done\n"+
		"sleep 0.3\necho done >"+dir+"/hook-done\n"), 0o700))
	script := filepath.Join(dir, "runc")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\n"+dir+"/criu 1000 &\necho $! >"+dir+"/criu.pid\nwait $!\n"+
		"out=$("+hook+")\necho done >"+dir+"/cleaned-up\nexit 1\n"), 0o700))
	for i := 0; i < 3; i++ {
		os.Remove(filepath.Join(dir, "cleaned-up"))
		os.Remove(filepath.Join(dir, "hook-done"))
		timedOut, err := RestoreWithin(context.Background(), "c1", time.Now().Add(100*time.Millisecond), runFake(script, "c1"))
		assert.True(t, timedOut)
		assert.Error(t, err)
		require.FileExists(t, filepath.Join(dir, "hook-done"), "run %d: the cleanup's hook was killed", i)
		require.FileExists(t, filepath.Join(dir, "cleaned-up"), "run %d: runc was killed before it could clean up", i)
		assert.True(t, gone(criuPid(t, dir)), "CRIU outlived the deadline")
	}
	for {
		if _, err := unix.Wait4(-1, nil, unix.WNOHANG, nil); err != nil {
			break
		}
	}
}

// A hook that never ends goes with runc after the grace, not left behind.
func TestRestoreWithinKillsAStuckHookWithRunc(t *testing.T) {
	require.NoError(t, unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0))
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	grace := restoreKillGrace
	restoreKillGrace = 500 * time.Millisecond
	defer func() { restoreKillGrace = grace }()
	dir := t.TempDir()
	hook := filepath.Join(dir, "hook")
	require.NoError(t, os.WriteFile(hook, []byte("#!/bin/sh\necho $$ >"+dir+"/hook.pid\nwhile :; do sleep 1; done\n"), 0o700))
	script := filepath.Join(dir, "runc")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\n"+hook+"\nexit 1\n"), 0o700))
	start := time.Now()
	timedOut, err := RestoreWithin(context.Background(), "c1", start.Add(100*time.Millisecond), runFake(script, "c1"))
	assert.True(t, timedOut)
	assert.Error(t, err)
	assert.Less(t, time.Since(start), 5*time.Second)
	b, err := os.ReadFile(filepath.Join(dir, "hook.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	assert.Eventually(t, func() bool { return gone(pid) }, 2*time.Second, 20*time.Millisecond, "the stuck hook was left")
	for {
		if _, err := unix.Wait4(-1, nil, unix.WNOHANG, nil); err != nil {
			break
		}
	}
}
