// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package shim

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// UnbindRestoreRoot undoes runc's bind of the container's root at
// criu-root in its state dir (runcRoot/id), which a runc killed in its
// restore leaves: before anything removes that dir, as runc delete does
// with os.RemoveAll, which would go down into the root and empty it.
func UnbindRestoreRoot(runcRoot, id string) error {
	criuRoot := filepath.Join(runcRoot, id, "criu-root")
	err := unix.Unmount(criuRoot, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	if err != nil && err != unix.EINVAL && err != unix.ENOENT {
		return &os.PathError{Op: "unmount", Path: criuRoot, Err: err}
	}
	return nil
}

// RemoveRestoreLeftovers removes what a `runc restore` of container id
// that was killed leaves once runc delete has run, when runc had saved no
// state of the container: runc delete then removes only the state dir,
// and the container's cgroups, those of the bundle's spec, stay, empty,
// in every hierarchy. Rekindle's runc saves the state before CRIU runs
// (runc-patches/libct-criu-save-a-restore-s-state-before-CRIU-runs-s), and
// its delete removes all of it; a runc killed before that, or one without
// the patch, leaves this to do. A systemd slice ("slice:prefix:name") is
// systemd's to remove, and a relative path, which runc resolves against
// its own cgroup, is left alone.
func RemoveRestoreLeftovers(runcRoot, id, bundle string) error {
	var errs []error
	if err := UnbindRestoreRoot(runcRoot, id); err != nil {
		errs = append(errs, err)
	}
	state := filepath.Join(runcRoot, id)
	for _, dir := range []string{filepath.Join(state, "criu-root"), state} {
		// Only what is empty: runc's state of a restore that got further
		// is runc delete's.
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) {
			errs = append(errs, err)
		}
	}
	spec, err := readSpec(bundle)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	var path string
	if spec.Linux != nil {
		path = spec.Linux.CgroupsPath
	}
	if !strings.HasPrefix(path, "/") || strings.Contains(path, ":") {
		return errors.Join(errs...)
	}
	mounts, err := cgroupMounts()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, mp := range mounts {
		dir := filepath.Join(mp, filepath.Clean(path))
		if dir == mp {
			continue
		}
		if err := removeCgroup(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeCgroup removes an empty cgroup; the kernel answers EBUSY while
// killed tasks are still leaving it.
func removeCgroup(dir string) error {
	var err error
	for i := 0; i < 50; i++ {
		if err = unix.Rmdir(dir); err != unix.EBUSY {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil && err != unix.ENOENT {
		if _, serr := os.Stat(dir); errors.Is(serr, os.ErrNotExist) {
			return nil // EROFS and the like, for a path that is not there
		}
		return &os.PathError{Op: "rmdir", Path: dir, Err: err}
	}
	return nil
}

// cgroupMounts returns the mount points of this mount namespace's cgroup
// (v1) and cgroup2 file systems, each mounted from its root: a bound
// sub-cgroup would map the path elsewhere.
func cgroupMounts() ([]string, error) {
	infos, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return nil, err
	}
	var mps []string
	for _, m := range infos {
		if m.Root == "/" {
			mps = append(mps, m.Mountpoint)
		}
	}
	return mps, nil
}
