// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package shim

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/pkg/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A runc killed in its restore leaves the root bound at criu-root and the
// container's cgroups; nothing of another container goes with them.
func TestRemoveRestoreLeftovers(t *testing.T) {
	testutil.RequiresRoot(t)
	mounts, err := cgroupMounts()
	require.NoError(t, err)
	require.NotEmpty(t, mounts, "no cgroup file system mounted")
	runcRoot, bundle := t.TempDir(), t.TempDir()
	id := "c1"
	criuRoot := filepath.Join(runcRoot, id, "criu-root")
	require.NoError(t, os.MkdirAll(criuRoot, 0o755))
	require.NoError(t, unix.Mount("tmpfs", criuRoot, "tmpfs", 0, ""))
	defer unix.Unmount(criuRoot, unix.MNT_DETACH)
	group := fmt.Sprintf("rekindle-test-%d", os.Getpid())
	var made []string
	for _, mp := range mounts {
		for _, g := range []string{group, group + "-other"} {
			if err := os.Mkdir(filepath.Join(mp, g), 0o755); err == nil {
				made = append(made, filepath.Join(mp, g))
			}
		}
	}
	defer func() {
		for _, d := range made {
			os.Remove(d)
		}
	}()
	require.NotEmpty(t, made, "could not make a cgroup in any hierarchy")
	require.NoError(t, os.WriteFile(filepath.Join(bundle, "config.json"),
		[]byte(`{"ociVersion":"1.2.0","linux":{"cgroupsPath":"/`+group+`"}}`), 0o644))

	require.NoError(t, RemoveRestoreLeftovers(runcRoot, id, bundle))
	mi, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	assert.NotContains(t, string(mi), criuRoot, "criu-root is still mounted")
	assert.NoDirExists(t, filepath.Join(runcRoot, id))
	for _, d := range made {
		if strings.HasSuffix(d, "-other") {
			assert.DirExists(t, d, "another container's cgroup was removed")
		} else {
			assert.NoDirExists(t, d, "the container's cgroup is left")
		}
	}
	// Again, with nothing left: no error.
	require.NoError(t, RemoveRestoreLeftovers(runcRoot, id, bundle))
}

func TestRemoveRestoreLeftoversLeavesASystemdSliceAndRelativePaths(t *testing.T) {
	for _, path := range []string{"system.slice:rekindle:c1", "rekindle-relative"} {
		bundle := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(bundle, "config.json"),
			[]byte(`{"ociVersion":"1.2.0","linux":{"cgroupsPath":"`+path+`"}}`), 0o644))
		assert.NoError(t, RemoveRestoreLeftovers(t.TempDir(), "c1", bundle), path)
	}
}

// runc delete's os.RemoveAll of its state dir goes down into a root still
// bound at criu-root: unbound first, the root keeps its files.
func TestUnbindRestoreRootKeepsTheRoot(t *testing.T) {
	testutil.RequiresRoot(t)
	runcRoot, rootfs := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(rootfs, "keep"), []byte("x"), 0o644))
	criuRoot := filepath.Join(runcRoot, "c1", "criu-root")
	require.NoError(t, os.MkdirAll(criuRoot, 0o755))
	require.NoError(t, unix.Mount(rootfs, criuRoot, "", unix.MS_BIND|unix.MS_REC, ""))
	defer unix.Unmount(criuRoot, unix.MNT_DETACH)
	require.NoError(t, UnbindRestoreRoot(runcRoot, "c1"))
	require.NoError(t, os.RemoveAll(filepath.Join(runcRoot, "c1")))
	assert.FileExists(t, filepath.Join(rootfs, "keep"), "the root was emptied through criu-root")
	require.NoError(t, UnbindRestoreRoot(runcRoot, "c1"), "nothing bound: no error")
}
