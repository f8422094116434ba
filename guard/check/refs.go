// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"errors"
	"fmt"
	"os"

	"github.com/checkpoint-restore/go-criu/v8/crit/images/fdinfo"
	fsimg "github.com/checkpoint-restore/go-criu/v8/crit/images/fs"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pstree"
)

// maxFd bounds a restored descriptor: CRIU moves its own service
// descriptors above the tasks' highest, and an fd near INT_MAX would
// have it place them where its own limit cannot reach.
const maxFd = 1 << 20

// checkFdinfo refuses a task descriptor that names no file of files.img,
// or a file of another kind than the descriptor says: the checks of
// files.img read each entry by its own kind, and CRIU opens a descriptor
// by the kind fdinfo gives it.
func checkFdinfo(dir *os.File, tasks []*pstree.PstreeEntry, files map[uint32]*fdinfo.FileEntry) error {
	seen := make(map[uint32]bool)
	for _, t := range tasks {
		ids, err := readIds(dir, t.GetPid())
		if errors.Is(err, os.ErrNotExist) {
			continue // a zombie
		}
		if err != nil {
			return err
		}
		if seen[ids.GetFilesId()] {
			continue
		}
		seen[ids.GetFilesId()] = true
		name := fmt.Sprintf("fdinfo-%d.img", ids.GetFilesId())
		fds, err := readImage(dir, name, "FDINFO", &fdinfo.FdinfoEntry{})
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		held := make(map[uint32]bool, len(fds))
		for _, e := range fds {
			fd := e.(*fdinfo.FdinfoEntry)
			f := files[fd.GetId()]
			switch {
			case held[fd.GetFd()]:
				// CRIU waits forever for the second of them.
				return fmt.Errorf("refusing to restore: checkpoint image %s: fd %d is listed twice", name, fd.GetFd())
			case fd.GetFd() >= maxFd:
				return fmt.Errorf("refusing to restore: checkpoint image %s: fd %d is above %d", name, fd.GetFd(), maxFd-1)
			case f == nil:
				return fmt.Errorf("refusing to restore: checkpoint image %s: fd %d names file %d, which files.img does not hold", name, fd.GetFd(), fd.GetId())
			case f.GetType() != fd.GetType():
				return fmt.Errorf("refusing to restore: checkpoint image %s: fd %d is of type %s, its file %d of files.img of type %s",
					name, fd.GetFd(), fd.GetType(), fd.GetId(), f.GetType())
			}
			held[fd.GetFd()] = true
		}
	}
	return nil
}

// checkFs refuses a task whose working directory or root is not a
// regular-file entry (a folder) of files.img: CRIU opens both by the
// name of that entry, which the checks of files.img have read.
func checkFs(dir *os.File, tasks []*pstree.PstreeEntry, files map[uint32]*fdinfo.FileEntry) error {
	for _, t := range tasks {
		// A zombie has none.
		name := fmt.Sprintf("fs-%d.img", t.GetPid())
		entries, err := readImage(dir, name, "FS", &fsimg.FsEntry{})
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if len(entries) != 1 {
			return fmt.Errorf("refusing to restore: checkpoint image %s holds %d entries, not one", name, len(entries))
		}
		fs := entries[0].(*fsimg.FsEntry)
		for _, ref := range []struct {
			what string
			id   uint32
		}{{"cwd_id", fs.GetCwdId()}, {"root_id", fs.GetRootId()}} {
			if f := files[ref.id]; f == nil || f.GetType() != fdinfo.FdTypes_REG {
				return fmt.Errorf("refusing to restore: checkpoint image %s: %s %d is no regular-file entry of files.img", name, ref.what, ref.id)
			}
		}
	}
	return nil
}
