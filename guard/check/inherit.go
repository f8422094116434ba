// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/checkpoint-restore/go-criu/v8/crit/images/fdinfo"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pstree"
	criurpc "github.com/checkpoint-restore/go-criu/v8/rpc"
	"google.golang.org/protobuf/proto"
)

// Inherits returns the descriptors runc hands CRIU for a restore's stdio,
// to go beside others (the namespaces the config joins): CRIU's fds 0, 1
// and 2 are the new process's stdio, and each takes the place of the pipe
// the root task held at the same fd when it was dumped, keyed as CRIU
// names that pipe ("pipe:[ID]"). Nothing else of the images chooses a
// descriptor: runc's own descriptors.json did, and an entry at index 3
// handed CRIU's end of runc's RPC socket to the restored task.
//
// It refuses images in which a regular file is named as any of the keys:
// CRIU hands an inherited descriptor to any file whose name equals the
// key, and a regular file's name is its path without the leading "/", so
// a files.img entry "/pipe:[ID]" or "/extRootNetNS" would get the stdio
// pipe or the network namespace in place of a file.
func Inherits(dir *os.File, others []*criurpc.InheritFd) ([]*criurpc.InheritFd, error) {
	root, err := rootTask(dir)
	if err != nil {
		return nil, err
	}
	ids, err := readIds(dir, root)
	if err != nil {
		return nil, err
	}
	_, fds, err := readFdinfo(dir, ids.GetFilesId())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	files, err := filesByID(dir)
	if err != nil {
		return nil, err
	}
	var stdio []*criurpc.InheritFd
	for _, fd := range fds {
		f := files[fd.GetId()]
		if fd.GetFd() > 2 || f.GetType() != fdinfo.FdTypes_PIPE || fd.GetType() != fdinfo.FdTypes_PIPE {
			continue
		}
		if f.GetPipe() == nil {
			return nil, fmt.Errorf("refusing to restore: checkpoint image files.img: file %d of type PIPE has no pipe", f.GetId())
		}
		stdio = append(stdio, &criurpc.InheritFd{
			Key: proto.String(fmt.Sprintf("pipe:[%d]", f.GetPipe().GetPipeId())),
			Fd:  proto.Int32(int32(fd.GetFd())),
		})
	}
	keys := make(map[string]bool)
	for _, i := range append(slices.Clone(others), stdio...) {
		keys[i.GetKey()] = true
	}
	// A FIFO is opened by the name of a REG entry of its own.
	for _, id := range slices.Sorted(maps.Keys(files)) {
		name := files[id].GetReg().GetName()
		if files[id].GetType() == fdinfo.FdTypes_REG && keys[strings.TrimPrefix(name, "/")] {
			return nil, fmt.Errorf("refusing to restore: checkpoint image files.img: file %d (a regular file) is named %q, "+
				"the key of a descriptor runc hands CRIU, which would give it that descriptor; checkpoint the container again",
				id, name)
		}
	}
	return stdio, nil
}

// rootTask is the pid of the first task pstree.img lists: CRIU restores
// it as the container's init.
func rootTask(dir *os.File) (uint32, error) {
	trees, err := readImage(dir, "pstree.img", "PSTREE", &pstree.PstreeEntry{})
	if err != nil {
		return 0, err
	}
	if len(trees) == 0 {
		return 0, errors.New("checkpoint image pstree.img lists no task")
	}
	return trees[0].(*pstree.PstreeEntry).GetPid(), nil
}
