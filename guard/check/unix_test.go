// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/checkpoint-restore/go-criu/v8/crit/images/fdinfo"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/fown"
	skopts "github.com/checkpoint-restore/go-criu/v8/crit/images/sk-opts"
	skpacket "github.com/checkpoint-restore/go-criu/v8/crit/images/sk-packet"
	skunix "github.com/checkpoint-restore/go-criu/v8/crit/images/sk-unix"
	"github.com/checkpoint-restore/go-criu/v8/magic"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// unixSocket is a files.img entry for a unix stream socket id with inode
// ino, connected to peer (0 for none) and bound to name.
func unixSocket(id, ino, peer uint32, name string) *fdinfo.FileEntry {
	n := proto.Uint32
	own := &fown.FownEntry{Uid: n(0), Euid: n(0), Signum: n(0), PidType: n(0), Pid: n(0)}
	opts := &skopts.SkOptsEntry{
		SoSndbuf: n(212992), SoRcvbuf: n(212992), SoSndTmoSec: proto.Uint64(0),
		SoSndTmoUsec: proto.Uint64(0), SoRcvTmoSec: proto.Uint64(0), SoRcvTmoUsec: proto.Uint64(0),
	}
	return &fdinfo.FileEntry{Type: fdinfo.FdTypes_UNIXSK.Enum(), Id: n(id), Usk: &skunix.UnixSkEntry{
		Id: n(id), Ino: n(ino), Type: n(unix.SOCK_STREAM), State: n(1), Flags: n(2), Uflags: n(0),
		Backlog: n(0), Peer: n(peer), Fown: own, Opts: opts, Name: []byte(name),
	}}
}

// fds writes fdinfo-1.img, task 1's descriptors of files ids.
func fds(t *testing.T, dir string, ids ...uint32) {
	t.Helper()
	var entries []proto.Message
	for i, id := range ids {
		entries = append(entries, &fdinfo.FdinfoEntry{Id: proto.Uint32(id), Flags: proto.Uint32(0),
			Type: fdinfo.FdTypes_UNIXSK.Enum(), Fd: proto.Uint32(uint32(3 + i))})
	}
	writeImage(t, dir, "fdinfo-1.img", "FDINFO", entries...)
}

func TestCheckRestorePrivilegesUnixSockets(t *testing.T) {
	listening := func(id, ino uint32, name string) *fdinfo.FileEntry {
		f := unixSocket(id, ino, 0, name)
		f.Usk.State = proto.Uint32(10)
		return f
	}
	for _, tc := range []struct {
		name  string
		files []*fdinfo.FileEntry
		held  []uint32
		err   string
	}{
		{
			name:  "a pair among the tasks",
			files: []*fdinfo.FileEntry{unixSocket(1, 100, 101, ""), unixSocket(2, 101, 100, "")},
			held:  []uint32{1, 2},
		},
		{
			name:  "a client of the container's own listener in /tmp",
			files: []*fdinfo.FileEntry{listening(1, 100, "/tmp/engine.sock"), unixSocket(2, 101, 100, "")},
			held:  []uint32{1, 2},
		},
		{
			name:  "an abstract name",
			files: []*fdinfo.FileEntry{listening(1, 100, "\x00engine")},
			held:  []uint32{1},
		},
		{
			name:  "a peer no task holds",
			files: []*fdinfo.FileEntry{listening(1, 100, "/dev/shm/host.sock"), unixSocket(2, 101, 100, "")},
			held:  []uint32{2},
			err:   `unix socket 2 (inode 101) has peer 1 (inode 100, name "/dev/shm/host.sock"), which no task of the checkpoint holds`,
		},
		{
			name:  "two sockets of one inode",
			files: []*fdinfo.FileEntry{listening(1, 100, "/tmp/a.sock"), listening(2, 100, "/vol/host.sock")},
			held:  []uint32{1, 2},
			err:   "unix socket inode 100 is two sockets' (files",
		},
		{
			name:  "a peer outside the checkpoint",
			files: []*fdinfo.FileEntry{unixSocket(2, 101, 999, "")},
			held:  []uint32{2},
			err:   "has peer inode 999, which is no socket of files.img",
		},
		{
			name: "an external peer",
			files: func() []*fdinfo.FileEntry {
				ext := listening(1, 100, "/dev/log")
				ext.Usk.Uflags = proto.Uint32(1)
				return []*fdinfo.FileEntry{ext, unixSocket(2, 101, 100, "")}
			}(),
			held: []uint32{2},
			err:  "unix socket 1 (inode 100) has uflags 0x1",
		},
		{
			name:  "a name on a host folder's bind",
			files: []*fdinfo.FileEntry{listening(1, 100, "/vol/host.sock")},
			held:  []uint32{1},
			err:   "has name /vol/host.sock, which is on /vol, a bind of a host path",
		},
		{
			name:  "a name through a symlink of the rootfs",
			files: []*fdinfo.FileEntry{listening(1, 100, "/tmp/l/host.sock")},
			held:  []uint32{1},
			err:   "has name /tmp/l/host.sock, which is in folder /tmp/l, which the rootfs reaches through a symlink",
		},
		{
			name:  "a name below a symlink of /dev/shm's archive",
			files: []*fdinfo.FileEntry{listening(1, 100, "/dev/shm/l/host.sock")},
			held:  []uint32{1},
			err:   "has name /dev/shm/l/host.sock, which is below a symlink of the archive of the tmpfs at /dev/shm",
		},
		{
			name:  "a name that climbs",
			files: []*fdinfo.FileEntry{listening(1, 100, "/tmp/../../vol/host.sock")},
			held:  []uint32{1},
			err:   `has name "/tmp/../../vol/host.sock" in "", not a clean path`,
		},
		{
			name: "a relative name that climbs its name_dir",
			files: func() []*fdinfo.FileEntry {
				f := listening(1, 100, "../vol/host.sock")
				f.Usk.NameDir = proto.String("/tmp")
				return []*fdinfo.FileEntry{f}
			}(),
			held: []uint32{1},
			err:  `has name "../vol/host.sock" in "/tmp", not a clean path`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := images(t, thread())
			remapMounts(t, dir.Name())
			writeImage(t, dir.Name(), "files.img", "FILES", filesOf(tc.files)...)
			fds(t, dir.Name(), tc.held...)
			config := defaultConfig()
			config.Rootfs = t.TempDir()
			must(t, os.Mkdir(filepath.Join(config.Rootfs, "tmp"), 0o755))
			must(t, os.Symlink("/vol", filepath.Join(config.Rootfs, "tmp", "l")))
			tmpfsArchive(t, dir.Name(), &tar.Header{Name: "./l", Typeflag: tar.TypeSymlink, Linkname: "/vol", Mode: 0o777})
			err := Restore(dir, &Process{}, config, "")
			if tc.err == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) ||
				!strings.HasPrefix(err.Error(), "refusing to restore: checkpoint image files.img: ") {
				t.Fatalf("want an error with %q, got %v", tc.err, err)
			}
		})
	}

	// A peer in flight in another socket's queue is held; the packet's
	// bytes follow its entry.
	dir := images(t, thread())
	remapMounts(t, dir.Name())
	writeImage(t, dir.Name(), "files.img", "FILES", unixSocket(1, 100, 0, ""), unixSocket(2, 101, 0, ""), unixSocket(3, 102, 100, ""))
	fds(t, dir.Name(), 2, 3)
	config := defaultConfig()
	config.Rootfs = t.TempDir()
	m := magic.LoadMagic().ByName
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, uint32(m["IMG_COMMON"]))
	_ = binary.Write(&b, binary.LittleEndian, uint32(m["SK_QUEUES"]))
	p, _ := proto.Marshal(&skpacket.SkPacketEntry{IdFor: proto.Uint32(2), Length: proto.Uint32(5),
		Scm: []*skpacket.ScmEntry{{Type: proto.Uint32(unix.SCM_RIGHTS), Rights: []uint32{1}}}})
	_ = binary.Write(&b, binary.LittleEndian, uint32(len(p)))
	b.Write(p)
	b.WriteString("hello")
	must(t, os.WriteFile(filepath.Join(dir.Name(), "sk-queues.img"), b.Bytes(), 0o600))
	if err := Restore(dir, &Process{}, config, ""); err != nil {
		t.Fatalf("refused a peer in flight: %v", err)
	}
}
