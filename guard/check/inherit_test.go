// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/checkpoint-restore/go-criu/v8/crit/images/fdinfo"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/fown"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pipe"
	regfile "github.com/checkpoint-restore/go-criu/v8/crit/images/regfile"
	criurpc "github.com/checkpoint-restore/go-criu/v8/rpc"
	"google.golang.org/protobuf/proto"
)

func own() *fown.FownEntry {
	n := proto.Uint32
	return &fown.FownEntry{Uid: n(0), Euid: n(0), Signum: n(0), PidType: n(0), Pid: n(0)}
}

func pipeFile(id, pipeID uint32) *fdinfo.FileEntry {
	return &fdinfo.FileEntry{Type: fdinfo.FdTypes_PIPE.Enum(), Id: proto.Uint32(id),
		Pipe: &pipe.PipeEntry{Id: proto.Uint32(id), PipeId: proto.Uint32(pipeID), Flags: proto.Uint32(0), Fown: own()}}
}

func regEntry(id uint32, name string) *fdinfo.FileEntry {
	return &fdinfo.FileEntry{Type: fdinfo.FdTypes_REG.Enum(), Id: proto.Uint32(id),
		Reg: &regfile.RegFileEntry{Id: proto.Uint32(id), Flags: proto.Uint32(0), Pos: proto.Uint64(0), Fown: own(), Name: proto.String(name), MntId: proto.Int32(1)}}
}

// taskFds writes task 1's descriptors: fd N holds file ids[N].
func taskFds(t *testing.T, dir string, files []*fdinfo.FileEntry, at map[uint32]uint32) {
	t.Helper()
	var fds []proto.Message
	for _, fd := range slices.Sorted(maps.Keys(at)) {
		id := at[fd]
		var kind fdinfo.FdTypes
		for _, f := range files {
			if f.GetId() == id {
				kind = f.GetType()
			}
		}
		fds = append(fds, &fdinfo.FdinfoEntry{Id: proto.Uint32(id), Flags: proto.Uint32(0), Type: kind.Enum(), Fd: proto.Uint32(fd)})
	}
	writeImage(t, dir, "fdinfo-1.img", "FDINFO", fds...)
	entries := make([]proto.Message, len(files))
	for i, f := range files {
		entries[i] = f
	}
	writeImage(t, dir, "files.img", "FILES", entries...)
}

func TestInherits(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []*fdinfo.FileEntry
		at    map[uint32]uint32 // fd -> file id
		want  string
	}{
		{
			name:  "stdio pipes",
			files: []*fdinfo.FileEntry{pipeFile(1, 501), pipeFile(2, 502), pipeFile(3, 503)},
			at:    map[uint32]uint32{0: 1, 1: 2, 2: 3},
			want:  "0=pipe:[501] 1=pipe:[502] 2=pipe:[503]",
		},
		{
			// Descriptor 3 is CRIU's end of runc's RPC socket.
			name:  "a pipe at fd 3 and beyond is the task's own",
			files: []*fdinfo.FileEntry{pipeFile(1, 501), pipeFile(2, 502), pipeFile(3, 503)},
			at:    map[uint32]uint32{0: 1, 3: 2, 50: 3},
			want:  "0=pipe:[501]",
		},
		{
			name:  "stdio that is no pipe is restored as dumped",
			files: []*fdinfo.FileEntry{regEntry(1, "/dev/null"), pipeFile(2, 502)},
			at:    map[uint32]uint32{0: 1, 1: 1, 2: 2},
			want:  "2=pipe:[502]",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := images(t, thread())
			taskFds(t, dir.Name(), tc.files, tc.at)
			// A descriptors.json that names other keys and fds is not read.
			must(t, os.WriteFile(dir.Name()+"/descriptors.json", []byte(`["pipe:[1]","pipe:[2]","pipe:[3]","pipe:[4]"]`), 0o600))
			got, err := Inherits(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			if s := inheritString(got); s != tc.want {
				t.Errorf("inherits %q, want %q", s, tc.want)
			}
		})
	}
}

func inheritString(in []*criurpc.InheritFd) string {
	var s []string
	for _, i := range in {
		s = append(s, strconv.Itoa(int(i.GetFd()))+"="+i.GetKey())
	}
	return strings.Join(s, " ")
}

// The attack runc's descriptors.json allowed, and its kin: a regular file
// named as an inherit key would take that key's descriptor.
func TestInheritsRefusesAFileNamedAsAKey(t *testing.T) {
	// The stdio pipe's key is Inherits' own; the namespace's runc's.
	keys := []*criurpc.InheritFd{{Key: proto.String("extRootNetNS"), Fd: proto.Int32(4)}}
	for _, tc := range []struct {
		name string
		file *fdinfo.FileEntry
		err  string
	}{
		{name: "the stdio pipe itself", file: pipeFile(2, 501)},
		{name: "a file of another name", file: regEntry(2, "/pipe:[502]")},
		{name: "a file named as the stdio pipe", file: regEntry(2, "/pipe:[501]"), err: `file 2 (a regular file) is named "/pipe:[501]", the key of a descriptor runc hands CRIU`},
		{name: "a file named as the network namespace", file: regEntry(2, "/extRootNetNS"), err: `named "/extRootNetNS"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := images(t, thread())
			taskFds(t, dir.Name(), []*fdinfo.FileEntry{pipeFile(1, 501), tc.file}, map[uint32]uint32{0: 1, 50: 2})
			_, err := Inherits(dir, keys)
			wantErr(t, err, tc.err)
		})
	}
}
