// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"strings"
	"testing"

	"github.com/checkpoint-restore/go-criu/v8/crit/images/cgroup"
	criucore "github.com/checkpoint-restore/go-criu/v8/crit/images/criu-core"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pstree"
	"google.golang.org/protobuf/proto"
)

// cgroupImage is what CRIU dumps of a container's cgroups on cgroup v1:
// one set, and the container's directory with its properties.
func cgroupImage() *cgroup.CgroupEntry {
	perms := &cgroup.CgroupPerms{Mode: proto.Uint32(0o40755), Uid: proto.Uint32(0), Gid: proto.Uint32(0)}
	return &cgroup.CgroupEntry{
		Sets: []*cgroup.CgSetEntry{{Id: proto.Uint32(2), Ctls: []*cgroup.CgMemberEntry{
			{Name: proto.String("pids"), Path: proto.String("/engine")},
			{Name: proto.String("memory"), Path: proto.String("/pods/a/engine")},
		}}},
		Controllers: []*cgroup.CgControllerEntry{
			{Cnames: []string{"pids"}, Dirs: []*cgroup.CgroupDirEntry{{
				DirName: proto.String("engine"), DirPerms: perms,
				Properties: []*cgroup.CgroupPropEntry{{Name: proto.String("pids.max"), Value: proto.String("max")}},
			}}},
			{Cnames: []string{"memory"}, Dirs: []*cgroup.CgroupDirEntry{{
				DirName: proto.String("pods/a/engine"), DirPerms: perms,
			}}},
		},
	}
}

func TestCheckCgroups(t *testing.T) {
	for _, tc := range []struct {
		name   string
		image  func(*cgroup.CgroupEntry)
		thread func(*criucore.CoreEntry) // a second thread of task 1
		err    string
	}{
		{name: "as dumped"},
		{
			name:  "a directory that leaves the controller",
			image: func(e *cgroup.CgroupEntry) { e.Controllers[0].Dirs[0].DirName = proto.String("../../../tmp/x/victim") },
			err:   `cgroup.img: controller "pids": dir_name "../../../tmp/x/victim" has an empty, "." or ".." component`,
		},
		{
			name: "a child directory that leaves its parent",
			image: func(e *cgroup.CgroupEntry) {
				e.Controllers[1].Dirs[0].Children = []*cgroup.CgroupDirEntry{{DirName: proto.String("a/../../..")}}
			},
			err: `dir_name "a/../../.."`,
		},
		{
			name: "a property that names another file",
			image: func(e *cgroup.CgroupEntry) {
				e.Controllers[0].Dirs[0].Properties[0].Name = proto.String("../victim/canary")
			},
			err: `dir "engine": property name "../victim/canary" is not a file name`,
		},
		{
			name:  "a set path that leaves the hierarchy",
			image: func(e *cgroup.CgroupEntry) { e.Sets[0].Ctls[1].Path = proto.String("/pods/../../../..") },
			err:   `set 2, controller "memory": path "/pods/../../../.."`,
		},
		{
			name:  "a cgns prefix beyond its path",
			image: func(e *cgroup.CgroupEntry) { e.Sets[0].Ctls[0].CgnsPrefix = proto.Uint32(100) },
			err:   "cgns_prefix 100 is beyond its path",
		},
		{
			name:   "a thread in the root task's set",
			thread: func(c *criucore.CoreEntry) {},
		},
		{
			name: "a thread in an equal set of another id",
			image: func(e *cgroup.CgroupEntry) {
				e.Sets = append(e.Sets, &cgroup.CgSetEntry{Id: proto.Uint32(3), Ctls: e.Sets[0].Ctls})
			},
			thread: func(c *criucore.CoreEntry) { c.ThreadCore.CgSet = proto.Uint32(3) },
		},
		{
			name: "a thread in a set of other paths",
			image: func(e *cgroup.CgroupEntry) {
				e.Sets = append(e.Sets, &cgroup.CgSetEntry{Id: proto.Uint32(3), Ctls: []*cgroup.CgMemberEntry{
					{Name: proto.String("pids"), Path: proto.String("/")},
				}})
			},
			thread: func(c *criucore.CoreEntry) { c.ThreadCore.CgSet = proto.Uint32(3) },
			err:    "core-2.img: task 1 thread 2 is in cgroup set 3, the root task in 2",
		},
		{
			name:   "a thread in another set",
			thread: func(c *criucore.CoreEntry) { c.ThreadCore.CgSet = proto.Uint32(3) },
			err:    "core-2.img: task 1 thread 2 is in cgroup set 3, the root task in 2",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core := thread()
			core.ThreadCore.CgSet = proto.Uint32(2)
			dir := images(t, core)
			tree := &pstree.PstreeEntry{Pid: proto.Uint32(1), Threads: []uint32{1}}
			if tc.thread != nil {
				th := thread()
				th.Tc, th.Ids = nil, nil
				th.ThreadCore.CgSet = proto.Uint32(2)
				tc.thread(th)
				writeImage(t, dir.Name(), "core-2.img", "CORE", th)
				tree.Threads = append(tree.Threads, 2)
			}
			img := cgroupImage()
			if tc.image != nil {
				tc.image(img)
			}
			writeImage(t, dir.Name(), "cgroup.img", "CGROUP", img)
			err := checkCgroups(dir, []*pstree.PstreeEntry{tree})
			wantErr(t, err, tc.err)
		})
	}
}

// TestCheckRestorePrivilegesChecksCgroups: the restore's check reads
// cgroup.img, and an image without one passes.
func TestCheckRestorePrivilegesChecksCgroups(t *testing.T) {
	dir := images(t, thread())
	if err := Restore(dir, &Process{}, defaultConfig(), ""); err != nil {
		t.Fatalf("no cgroup.img: refused: %v", err)
	}
	img := cgroupImage()
	img.Controllers[0].Dirs[0].DirName = proto.String("../victim")
	writeImage(t, dir.Name(), "cgroup.img", "CGROUP", img)
	err := Restore(dir, &Process{}, defaultConfig(), "")
	if err == nil || !strings.Contains(err.Error(), "refusing to restore: checkpoint image cgroup.img") {
		t.Fatalf("want cgroup.img refused, got %v", err)
	}
}

// TestCheckCgroupsSkipsZombies: a zombie's pstree entry names no thread
// CRIU dumped a core of.
func TestCheckCgroupsSkipsZombies(t *testing.T) {
	core := thread()
	core.ThreadCore.CgSet = proto.Uint32(2)
	dir := images(t, core)
	zombie := thread()
	zombie.Tc.TaskState = proto.Uint32(taskDead)
	writeImage(t, dir.Name(), "core-7.img", "CORE", zombie)
	writeImage(t, dir.Name(), "cgroup.img", "CGROUP", cgroupImage())
	trees := []*pstree.PstreeEntry{
		{Pid: proto.Uint32(1), Threads: []uint32{1}},
		{Pid: proto.Uint32(7), Threads: []uint32{4038591088}},
	}
	if err := checkCgroups(dir, trees); err != nil {
		t.Fatalf("refused: %v", err)
	}
}
