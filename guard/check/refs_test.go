// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"strings"
	"testing"

	"github.com/checkpoint-restore/go-criu/v8/crit/images/fdinfo"
	fsimg "github.com/checkpoint-restore/go-criu/v8/crit/images/fs"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pstree"
	"google.golang.org/protobuf/proto"
)

// A reference from one image file into another names an object of the
// kind it says, or the restore is refused.
func TestCheckReferences(t *testing.T) {
	files := []*fdinfo.FileEntry{pipeFile(1, 501), regEntry(2, "/"), regEntry(3, "/etc/hosts")}
	for _, tc := range []struct {
		name string
		fds  []*fdinfo.FdinfoEntry
		fs   *fsimg.FsEntry
		err  string
	}{
		{name: "a dump's references", fds: []*fdinfo.FdinfoEntry{fdOf(0, 1, fdinfo.FdTypes_PIPE), fdOf(3, 3, fdinfo.FdTypes_REG)}, fs: fsOf(2, 2)},
		{name: "a descriptor of a file not in files.img", fds: []*fdinfo.FdinfoEntry{fdOf(4, 99, fdinfo.FdTypes_REG)}, err: "fdinfo-1.img: fd 4 names file 99, which files.img does not hold"},
		{name: "a pipe's descriptor naming a regular file", fds: []*fdinfo.FdinfoEntry{fdOf(4, 3, fdinfo.FdTypes_PIPE)}, err: "fdinfo-1.img: fd 4 is of type PIPE, its file 3 of files.img of type REG"},
		{name: "a descriptor beyond CRIU's reach", fds: []*fdinfo.FdinfoEntry{fdOf(1<<30, 3, fdinfo.FdTypes_REG)}, err: "fd 1073741824 is above 1048575"},
		{name: "a root that is a pipe", fs: fsOf(2, 1), err: "fs-1.img: root_id 1 is no regular-file entry of files.img"},
		{name: "a cwd not in files.img", fs: fsOf(77, 2), err: "fs-1.img: cwd_id 77 is no regular-file entry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := images(t, thread())
			taskFds(t, dir.Name(), files, nil)
			if tc.fds != nil {
				var m []proto.Message
				for _, e := range tc.fds {
					m = append(m, e)
				}
				writeImage(t, dir.Name(), "fdinfo-1.img", "FDINFO", m...)
			}
			if tc.fs != nil {
				writeImage(t, dir.Name(), "fs-1.img", "FS", tc.fs)
			}
			byID, err := filesByID(dir)
			must(t, err)
			tasks := []*pstree.PstreeEntry{{Pid: proto.Uint32(1)}}
			err = checkFdinfo(dir, tasks, byID)
			if err == nil {
				err = checkFs(dir, tasks, byID)
			}
			if tc.err == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("want an error with %q, got %v", tc.err, err)
			}
		})
	}
}

func fdOf(fd, id uint32, kind fdinfo.FdTypes) *fdinfo.FdinfoEntry {
	return &fdinfo.FdinfoEntry{Id: proto.Uint32(id), Flags: proto.Uint32(0), Type: kind.Enum(), Fd: proto.Uint32(fd)}
}

func fsOf(cwd, root uint32) *fsimg.FsEntry {
	return &fsimg.FsEntry{CwdId: proto.Uint32(cwd), RootId: proto.Uint32(root)}
}
