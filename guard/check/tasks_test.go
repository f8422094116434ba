// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"fmt"
	"strings"
	"testing"

	criucore "github.com/checkpoint-restore/go-criu/v8/crit/images/criu-core"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pstree"
	"google.golang.org/protobuf/proto"
)

func TestCheckRestorePrivilegesTaskNamespaces(t *testing.T) {
	for _, tc := range []struct {
		name  string
		child func(*criucore.TaskKobjIdsEntry)
		err   string
	}{
		{name: "the root task's namespaces", child: func(*criucore.TaskKobjIdsEntry) {}},
		{
			name:  "a mount namespace of its own",
			child: func(ids *criucore.TaskKobjIdsEntry) { ids.MntNsId = proto.Uint32(999) },
			err:   "checkpoint image ids-2.img puts task 2 in a mnt namespace of its own (mnt_ns_id 999, the root task's is 204)",
		},
		{
			name:  "a network namespace of its own",
			child: func(ids *criucore.TaskKobjIdsEntry) { ids.NetNsId = proto.Uint32(998) },
			err:   "in a net namespace of its own",
		},
		{
			name:  "the host's user namespace's sibling",
			child: func(ids *criucore.TaskKobjIdsEntry) { ids.UserNsId = proto.Uint32(6) },
			err:   "in a user namespace of its own",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := images(t, thread())
			writeImage(t, dir.Name(), "pstree.img", "PSTREE",
				&pstree.PstreeEntry{Pid: proto.Uint32(1), Ppid: proto.Uint32(0), Pgid: proto.Uint32(1), Sid: proto.Uint32(1), Threads: []uint32{1}},
				&pstree.PstreeEntry{Pid: proto.Uint32(2), Ppid: proto.Uint32(1), Pgid: proto.Uint32(1), Sid: proto.Uint32(1), Threads: []uint32{2}})
			writeImage(t, dir.Name(), "core-2.img", "CORE", thread())
			ids := kobjIds(200)
			tc.child(ids)
			writeImage(t, dir.Name(), "ids-2.img", "IDS", ids)
			err := Restore(dir, &Process{}, defaultConfig(), "")
			if tc.err == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.HasPrefix(err.Error(), "refusing to restore") {
				t.Fatalf("want an error with %q, got %v", tc.err, err)
			}
		})
	}
	// A zombie of an old image has no ids; CRIU restores it in its
	// parent's namespaces.
	dir := images(t, thread())
	writeImage(t, dir.Name(), "pstree.img", "PSTREE",
		&pstree.PstreeEntry{Pid: proto.Uint32(1), Ppid: proto.Uint32(0), Pgid: proto.Uint32(1), Sid: proto.Uint32(1), Threads: []uint32{1}},
		&pstree.PstreeEntry{Pid: proto.Uint32(3), Ppid: proto.Uint32(1), Pgid: proto.Uint32(1), Sid: proto.Uint32(1)})
	zombie := thread()
	zombie.Tc.TaskState = proto.Uint32(taskDead)
	writeImage(t, dir.Name(), fmt.Sprintf("core-%d.img", 3), "CORE", zombie)
	if err := Restore(dir, &Process{}, defaultConfig(), ""); err != nil {
		t.Fatalf("refused a zombie without ids: %v", err)
	}
}
