// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/checkpoint-restore/go-criu/v8/crit/images/cgroup"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pstree"
)

// checkCgroups refuses a cgroup.img that would place a task anywhere but
// where runc put CRIU, or that names a path leaving its controller.
//
// runc restores with CRIU's cgroup mode "ignore": runc has moved CRIU into
// the container's cgroups and applied the config's resources, so the
// tasks inherit them. In that mode CRIU creates no directory and writes no
// property, but it still reads the image, and its cgroupd moves a thread
// whose cg_set differs from its task's into that set's paths. Paths are
// joined by CRIU as host root with nothing refusing "..": a directory or
// property name of "../../x" reaches any host file in the other modes.
// The names are checked here too, so that an image is refused the same
// way whatever mode a caller asks for.
func checkCgroups(dir *os.File, trees []*pstree.PstreeEntry) error {
	entries, err := readImage(dir, "cgroup.img", "CGROUP", &cgroup.CgroupEntry{})
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(entries) > 1 {
		return fmt.Errorf("checkpoint image cgroup.img holds %d entries, not one", len(entries))
	}
	sets := make(map[uint32]string)
	for _, e := range entries {
		for _, set := range e.(*cgroup.CgroupEntry).GetSets() {
			sets[set.GetId()] = setKey(set)
		}
	}
	if err := checkCgSets(dir, trees, sets); err != nil {
		return err
	}
	for _, e := range entries {
		ce := e.(*cgroup.CgroupEntry)
		for _, set := range ce.GetSets() {
			for _, m := range set.GetCtls() {
				if err := cgroupPath(m.GetPath(), true); err != nil {
					return fmt.Errorf("checkpoint image cgroup.img: set %d, controller %q: path %q %w", set.GetId(), m.GetName(), m.GetPath(), err)
				}
				if m.GetCgnsPrefix() > uint32(len(m.GetPath())) {
					return fmt.Errorf("checkpoint image cgroup.img: set %d, controller %q: cgns_prefix %d is beyond its path", set.GetId(), m.GetName(), m.GetCgnsPrefix())
				}
			}
		}
		for _, c := range ce.GetControllers() {
			if err := cgroupDirs(c.GetDirs(), strings.Join(c.GetCnames(), ",")); err != nil {
				return err
			}
		}
	}
	return nil
}

// setKey is what a set places a task in; CRIU dumps equal sets under
// different ids (a task in a cgroup namespace gets one of its own).
func setKey(set *cgroup.CgSetEntry) string {
	var b strings.Builder
	for _, m := range set.GetCtls() {
		fmt.Fprintf(&b, "%q %q %d\n", m.GetName(), m.GetPath(), m.GetCgnsPrefix())
	}
	return b.String()
}

// checkCgSets refuses tasks or threads in a cgroup set other than the
// root task's. CRIU would move such a thread (cgroupd) or task into the
// set's paths, away from the container's cgroups.
func checkCgSets(dir *os.File, trees []*pstree.PstreeEntry, sets map[uint32]string) error {
	var root uint32
	for i, task := range trees {
		leader, err := readCore(dir, task.GetPid())
		if err != nil {
			return err
		}
		if leader.GetTc().GetTaskState() == taskDead {
			continue // a zombie's pstree entry does not name its thread
		}
		threads := task.GetThreads()
		if len(threads) == 0 {
			threads = []uint32{task.GetPid()}
		}
		for _, tid := range threads {
			core := leader
			if tid != task.GetPid() {
				if core, err = readCore(dir, tid); err != nil {
					return err
				}
			}
			set := core.GetThreadCore().GetCgSet()
			if set == 0 {
				set = core.GetTc().GetCgSet() // images from before threads had one
			}
			if i == 0 && tid == task.GetPid() {
				root = set
				continue
			}
			if set != 0 && set != root && (sets[set] == "" || sets[set] != sets[root]) {
				return fmt.Errorf("checkpoint image core-%d.img: task %d thread %d is in cgroup set %d, the root task in %d; "+
					"a restore keeps every task in the container's cgroups", tid, task.GetPid(), tid, set, root)
			}
		}
	}
	return nil
}

// cgroupDirs checks each directory name (a path relative to its parent)
// and property name of a controller, and its children's.
func cgroupDirs(dirs []*cgroup.CgroupDirEntry, ctl string) error {
	for _, d := range dirs {
		if d.GetDirName() != "" {
			if err := cgroupPath(d.GetDirName(), false); err != nil {
				return fmt.Errorf("checkpoint image cgroup.img: controller %q: dir_name %q %w", ctl, d.GetDirName(), err)
			}
		}
		for _, p := range d.GetProperties() {
			if n := p.GetName(); n == "" || n == "." || n == ".." || strings.Contains(n, "/") {
				return fmt.Errorf("checkpoint image cgroup.img: controller %q: dir %q: property name %q is not a file name", ctl, d.GetDirName(), n)
			}
		}
		if err := cgroupDirs(d.GetChildren(), ctl); err != nil {
			return err
		}
	}
	return nil
}

// cgroupPath refuses a path with "." or ".." components, or empty ones
// but a leading "/" where abs allows it.
func cgroupPath(p string, abs bool) error {
	if abs {
		if !strings.HasPrefix(p, "/") {
			return errors.New("is not absolute")
		}
		p = strings.TrimPrefix(p, "/")
		if p == "" {
			return nil
		}
	}
	for _, c := range strings.Split(p, "/") {
		if c == "" || c == "." || c == ".." {
			return errors.New("has an empty, \".\" or \"..\" component")
		}
	}
	return nil
}
