// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/checkpoint-restore/go-criu/v8/crit/images/fdinfo"
	filelock "github.com/checkpoint-restore/go-criu/v8/crit/images/file-lock"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/mnt"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pstree"
	"google.golang.org/protobuf/proto"

	"github.com/opencontainers/runc/libcontainer/configs"
)

// CRIU takes a lease as the file's owner: a task restored as uid 1000
// would hold a lease on a root-owned file, which blocks the host's writers.
func TestCheckFileLocks(t *testing.T) {
	rootfs := t.TempDir()
	for name, uid := range map[string]int{"root-owned": 0, "own": 1000} {
		p := filepath.Join(rootfs, name)
		must(t, os.WriteFile(p, nil, 0o644))
		must(t, os.Chown(p, uid, uid))
	}
	must(t, os.Symlink("root-owned", filepath.Join(rootfs, "link")))
	lease := func(fd int32) *filelock.FileLockEntry {
		return &filelock.FileLockEntry{Flag: proto.Uint32(flLease), Type: proto.Uint32(0), Pid: proto.Int32(1),
			Fd: proto.Int32(fd), Start: proto.Int64(0), Len: proto.Int64(0)}
	}
	for _, tc := range []struct {
		name string
		uid  int
		caps []string
		lock *filelock.FileLockEntry
		err  string
	}{
		{name: "a lease on the user's own file", uid: 1000, lock: lease(10)},
		{name: "a lease on a root-owned file", uid: 1000, lock: lease(11), err: `entry 0 (flag 8, type 0, pid 1, fd 11) is a lease on file 2 (/root-owned), owned by uid 0: the config's user 1000 could not take it without CAP_LEASE`},
		{name: "a lease on a root-owned file with CAP_LEASE", uid: 1000, caps: []string{"CAP_LEASE"}, lock: lease(11)},
		{name: "a lease as root on a root-owned file", uid: 0, lock: lease(11)},
		{name: "a lease through a symlink", uid: 1000, lock: lease(12), err: "whose owner runc cannot tell"},
		{name: "a lease on a descriptor the task lacks", uid: 1000, lock: lease(13), err: "is a lease on descriptor 13, which task 1 does not hold"},
		{name: "a lease of another task", uid: 1000, lock: &filelock.FileLockEntry{Flag: proto.Uint32(flLease), Type: proto.Uint32(0), Pid: proto.Int32(7), Fd: proto.Int32(10), Start: proto.Int64(0), Len: proto.Int64(0)}, err: "task 7, which pstree.img does not list"},
		{name: "a lease on a pipe", uid: 1000, lock: lease(0), err: "a PIPE, not a regular file"},
		{name: "a lock on a root-owned file", uid: 1000, lock: &filelock.FileLockEntry{Flag: proto.Uint32(flFlock), Type: proto.Uint32(0), Pid: proto.Int32(1), Fd: proto.Int32(11), Start: proto.Int64(0), Len: proto.Int64(0)}},
		{name: "a lock of no kind", uid: 1000, lock: &filelock.FileLockEntry{Flag: proto.Uint32(64), Type: proto.Uint32(0), Pid: proto.Int32(1), Fd: proto.Int32(11), Start: proto.Int64(0), Len: proto.Int64(0)}, err: "is of no lock kind CRIU knows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := images(t, thread())
			files := []*fdinfo.FileEntry{pipeFile(1, 501), regEntry(2, "/root-owned"), regEntry(3, "/own"), regEntry(4, "/link")}
			taskFds(t, dir.Name(), files, map[uint32]uint32{0: 1, 10: 3, 11: 2, 12: 4})
			writeImage(t, dir.Name(), "filelocks.img", "FILE_LOCKS", tc.lock)
			config := defaultConfig()
			config.Rootfs = rootfs
			config.Capabilities.Permitted = append(config.Capabilities.Permitted, tc.caps...)
			g, err := grantOf(&Process{UID: tc.uid, GID: tc.uid}, config)
			must(t, err)
			byID, err := filesByID(dir)
			must(t, err)
			tasks := []*pstree.PstreeEntry{{Pid: proto.Uint32(1)}}
			err = g.checkFileLocks(dir, tasks, byID)
			wantErr(t, err, tc.err)
		})
	}
}

// A lease on a file of a host folder the config binds is the bind
// source's owner's to take.
func TestCheckFileLocksInABind(t *testing.T) {
	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "weights"), nil, 0o644))
	dir := images(t, thread())
	m := rootMountEntry()
	bind := rootMountEntry()
	bind.MntId, bind.ParentMntId, bind.Mountpoint, bind.ExtKey = proto.Uint32(2), proto.Uint32(1), proto.String("/models"), proto.String("/models")
	writeImage(t, dir.Name(), "mountpoints-204.img", "MNTS", m, bind)
	taskFds(t, dir.Name(), []*fdinfo.FileEntry{regEntry(2, "/models/weights")}, map[uint32]uint32{11: 2})
	writeImage(t, dir.Name(), "filelocks.img", "FILE_LOCKS", &filelock.FileLockEntry{Flag: proto.Uint32(flLease), Type: proto.Uint32(0),
		Pid: proto.Int32(1), Fd: proto.Int32(11), Start: proto.Int64(0), Len: proto.Int64(0)})
	config := defaultConfig()
	config.Rootfs = t.TempDir()
	config.Mounts = []*configs.Mount{{Source: src, Destination: "/models", Device: "bind", Flags: 0x1000 /* MS_BIND */}}
	g, err := grantOf(&Process{UID: 1000, GID: 1000}, config)
	must(t, err)
	byID, err := filesByID(dir)
	must(t, err)
	err = g.checkFileLocks(dir, []*pstree.PstreeEntry{{Pid: proto.Uint32(1)}}, byID)
	if err == nil || !strings.Contains(err.Error(), "(/models/weights), owned by uid 0") {
		t.Fatalf("want a refusal naming the bound file's owner, got %v", err)
	}
}

// rootMountEntry is the root mount writeNamespaces writes.
func rootMountEntry() *mnt.MntEntry {
	return &mnt.MntEntry{
		MntId: proto.Uint32(1), ParentMntId: proto.Uint32(0), Mountpoint: proto.String("/"), Root: proto.String("/"),
		Fstype: proto.Uint32(0), RootDev: proto.Uint32(1), Flags: proto.Uint32(0), Source: proto.String("none"), Options: proto.String(""),
	}
}
