// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"errors"
	"fmt"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/fdinfo"
	"os"

	criucore "github.com/checkpoint-restore/go-criu/v8/crit/images/criu-core"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pstree"
)

// taskNamespaces names each namespace id of a task's ids image.
func taskNamespaces(ids *criucore.TaskKobjIdsEntry) []struct {
	name string
	id   uint32
} {
	return []struct {
		name string
		id   uint32
	}{
		{"mnt", ids.GetMntNsId()}, {"pid", ids.GetPidNsId()}, {"net", ids.GetNetNsId()},
		{"ipc", ids.GetIpcNsId()}, {"uts", ids.GetUtsNsId()}, {"user", ids.GetUserNsId()},
		{"cgroup", ids.GetCgroupNsId()}, {"time", ids.GetTimeNsId()},
	}
}

// readIds reads task pid's ids image.
func readIds(dir *os.File, pid uint32) (*criucore.TaskKobjIdsEntry, error) {
	name := fmt.Sprintf("ids-%d.img", pid)
	ids, err := readImage(dir, name, "IDS", &criucore.TaskKobjIdsEntry{})
	if err != nil {
		return nil, err
	}
	if len(ids) != 1 {
		return nil, fmt.Errorf("checkpoint image %s holds %d entries, not one", name, len(ids))
	}
	return ids[0].(*criucore.TaskKobjIdsEntry), nil
}

// checkTaskNamespaces refuses a task in a namespace other than the root
// task's. runc checks the root task's namespaces against the config and
// the mounts of its mount namespace; CRIU creates any other namespace the
// images give a task, as root, from images runc has not read: a child in
// a mount namespace of its own gets a writable /proc/sys, for one. A
// container that made namespaces of its own is not restored.
func checkTaskNamespaces(dir *os.File, tasks []*pstree.PstreeEntry) error {
	root, err := readIds(dir, tasks[0].GetPid())
	if err != nil {
		return err
	}
	want := taskNamespaces(root)
	for _, task := range tasks[1:] {
		ids, err := readIds(dir, task.GetPid())
		if errors.Is(err, os.ErrNotExist) {
			// CRIU restores a task without ids, a zombie's in images
			// this old, in its parent's namespaces.
			continue
		}
		if err != nil {
			return err
		}
		for i, ns := range taskNamespaces(ids) {
			if ns.id != want[i].id {
				return fmt.Errorf("checkpoint image ids-%d.img puts task %d in a %s namespace of its own "+
					"(%s_ns_id %d, the root task's is %d); runc checks the namespaces of the root task only, "+
					"and restores no task in another: checkpoint the container with its tasks in its own namespaces",
					task.GetPid(), task.GetPid(), ns.name, ns.name, ns.id, want[i].id)
			}
		}
	}
	return nil
}

// readFdinfo reads fdinfo-ID.img, the descriptors of the tasks whose
// files_id is id; it returns the image's name for errors.
func readFdinfo(dir *os.File, id uint32) (string, []*fdinfo.FdinfoEntry, error) {
	name := fmt.Sprintf("fdinfo-%d.img", id)
	entries, err := readImage(dir, name, "FDINFO", &fdinfo.FdinfoEntry{})
	fds := make([]*fdinfo.FdinfoEntry, len(entries))
	for i, e := range entries {
		fds[i] = e.(*fdinfo.FdinfoEntry)
	}
	return name, fds, err
}
