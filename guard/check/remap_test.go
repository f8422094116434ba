// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/checkpoint-restore/go-criu/v8/crit/images/fdinfo"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/fown"
	ghostfile "github.com/checkpoint-restore/go-criu/v8/crit/images/ghost-file"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/mnt"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/regfile"
	remap "github.com/checkpoint-restore/go-criu/v8/crit/images/remap-file-path"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/opencontainers/runc/libcontainer/configs"
)

// regFileEntry is a files.img entry for a regular file named name on
// mount mntID, as CRIU dumps one.
func regFileEntry(id uint32, name string, mntID int32) *fdinfo.FileEntry {
	n := proto.Uint32
	own := &fown.FownEntry{Uid: n(0), Euid: n(0), Signum: n(0), PidType: n(0), Pid: n(0)}
	return &fdinfo.FileEntry{Type: fdinfo.FdTypes_REG.Enum(), Id: n(id), Reg: &regfile.RegFileEntry{
		Id: n(id), Flags: n(0), Pos: proto.Uint64(0), Fown: own, Name: proto.String(name), MntId: proto.Int32(mntID),
	}}
}

// remapMounts are task 1's mounts: the root (1), a tmpfs at /dev/shm (2)
// and a bind of a host folder at /vol (3).
func remapMounts(t *testing.T, dir string) {
	t.Helper()
	m := func(id, parent uint32, mp string, fstype mnt.Fstype, ext *string) *mnt.MntEntry {
		return &mnt.MntEntry{
			MntId: proto.Uint32(id), ParentMntId: proto.Uint32(parent), Mountpoint: proto.String(mp), Root: proto.String("/"),
			Fstype: proto.Uint32(uint32(fstype)), RootDev: proto.Uint32(id), Flags: proto.Uint32(0), Source: proto.String("none"),
			Options: proto.String(""), ExtKey: ext,
		}
	}
	writeImage(t, dir, "mountpoints-204.img", "MNTS",
		m(1, 0, "/", mnt.Fstype_UNSUPPORTED, nil),
		m(2, 1, "/dev/shm", mnt.Fstype_TMPFS, nil),
		m(3, 1, "/vol", mnt.Fstype_UNSUPPORTED, proto.String("/vol")))
}

// ghost writes ghost-file-ID.img: a header and data bytes of content.
func ghost(t *testing.T, dir string, id uint32, e *ghostfile.GhostFileEntry, data int) {
	t.Helper()
	name := fmt.Sprintf("ghost-file-%x.img", id)
	writeImage(t, dir, name, "GHOST_FILE", e)
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, data)); err != nil {
		t.Fatal(err)
	}
}

func ghostEntry(mode, uid uint32, size uint64) *ghostfile.GhostFileEntry {
	return &ghostfile.GhostFileEntry{Uid: proto.Uint32(uid), Gid: proto.Uint32(uid), Mode: proto.Uint32(mode), Size: proto.Uint64(size)}
}

func TestCheckRestorePrivilegesRemaps(t *testing.T) {
	ghostRemap := func(orig, id uint32) *remap.RemapFilePathEntry {
		return &remap.RemapFilePathEntry{OrigId: proto.Uint32(orig), RemapId: proto.Uint32(id), RemapType: remap.RemapType_GHOST.Enum()}
	}
	linkRemap := func(orig, id uint32) *remap.RemapFilePathEntry {
		return &remap.RemapFilePathEntry{OrigId: proto.Uint32(orig), RemapId: proto.Uint32(id), RemapType: remap.RemapType_LINKED.Enum()}
	}
	for _, tc := range []struct {
		name   string
		files  []*fdinfo.FileEntry
		remaps []*remap.RemapFilePathEntry
		ghost  *ghostfile.GhostFileEntry
		data   int
		user   int
		err    string
	}{
		{
			name:   "NCCL's deleted /dev/shm file",
			files:  []*fdinfo.FileEntry{regFileEntry(5, "/dev/shm/nccl-x", 2)},
			remaps: []*remap.RemapFilePathEntry{ghostRemap(5, 1)},
			ghost:  ghostEntry(0o100600, 0, 4096), data: 4096,
		},
		{
			name:   "an old image's ghost bit",
			files:  []*fdinfo.FileEntry{regFileEntry(5, "/tmp/x", 1)},
			remaps: []*remap.RemapFilePathEntry{{OrigId: proto.Uint32(5), RemapId: proto.Uint32(1 | remapGhost)}},
			ghost:  ghostEntry(0o100600, 0, 3), data: 3,
		},
		{
			name:   "a renamed semaphore",
			files:  []*fdinfo.FileEntry{regFileEntry(5, "/dev/shm/sem.mp-x", 2), regFileEntry(6, "/dev/shm/link_remap.3", 2)},
			remaps: []*remap.RemapFilePathEntry{linkRemap(5, 6)},
		},
		{
			name:   "a link remap without a mount id, as CRIU's dump makes it",
			files:  []*fdinfo.FileEntry{regFileEntry(5, "/dev/shm/sem.mp-x", 2), regFileEntry(6, "/dev/shm/link_remap.6", -1)},
			remaps: []*remap.RemapFilePathEntry{linkRemap(5, 6)},
		},
		{
			name:   "a ghost whose name climbs out",
			files:  []*fdinfo.FileEntry{regFileEntry(5, "/dev/shm/../../../../etc/victim", 2)},
			remaps: []*remap.RemapFilePathEntry{ghostRemap(5, 1)},
			ghost:  ghostEntry(0o40777, 0, 0),
			err:    `checkpoint image files.img: file 5 has name "/dev/shm/../../../../etc/victim", not a clean absolute path`,
		},
		{
			name:   "a ghost on a host folder's bind",
			files:  []*fdinfo.FileEntry{regFileEntry(5, "/vol/victim", 3)},
			remaps: []*remap.RemapFilePathEntry{ghostRemap(5, 1)},
			ghost:  ghostEntry(0o100600, 0, 0),
			err:    "file 5 (/vol/victim) is on /vol, a bind of a host path",
		},
		{
			name:   "a ghost that names the root mount below a bind",
			files:  []*fdinfo.FileEntry{regFileEntry(5, "/vol/victim", 1)},
			remaps: []*remap.RemapFilePathEntry{ghostRemap(5, 1)},
			ghost:  ghostEntry(0o100600, 0, 0),
			err:    "has mnt_id 1, which is not the mount that holds that path",
		},
		{
			name:   "a ghost device node",
			files:  []*fdinfo.FileEntry{regFileEntry(5, "/dev/shm/sda", 2)},
			remaps: []*remap.RemapFilePathEntry{ghostRemap(5, 1)},
			ghost:  ghostEntry(0o60666, 0, 0),
			err:    "(ghost-file-1.img) has mode 060666, not a regular file or a folder",
		},
		{
			name:   "a set-uid ghost for a user without CAP_FSETID",
			files:  []*fdinfo.FileEntry{regFileEntry(5, "/dev/shm/sh", 2)},
			remaps: []*remap.RemapFilePathEntry{ghostRemap(5, 1)},
			ghost:  ghostEntry(0o104755, 1000, 0), user: 1000,
			err: "has set-id bits (mode 0104755) without CAP_FSETID",
		},
		{
			name:   "a root-owned ghost for another user",
			files:  []*fdinfo.FileEntry{regFileEntry(5, "/dev/shm/x", 2)},
			remaps: []*remap.RemapFilePathEntry{ghostRemap(5, 1)},
			ghost:  ghostEntry(0o100600, 0, 0), user: 1000,
			err: "is owned by uid 0, the config's user is 1000, without CAP_CHOWN",
		},
		{
			name:   "a ghost larger than its content",
			files:  []*fdinfo.FileEntry{regFileEntry(5, "/dev/shm/x", 2)},
			remaps: []*remap.RemapFilePathEntry{ghostRemap(5, 1)},
			ghost:  ghostEntry(0o100600, 0, 1<<20), data: 10,
			err: "has size 1048576, but the image holds 10 bytes of it",
		},
		{
			name:   "a ghost without its image",
			files:  []*fdinfo.FileEntry{regFileEntry(5, "/dev/shm/x", 2)},
			remaps: []*remap.RemapFilePathEntry{ghostRemap(5, 7)},
			err:    "ghost-file-7.img",
		},
		{
			name:   "a link remap elsewhere",
			files:  []*fdinfo.FileEntry{regFileEntry(5, "/dev/shm/sem.x", 2), regFileEntry(6, "/etc/passwd", 1)},
			remaps: []*remap.RemapFilePathEntry{linkRemap(5, 6)},
			err:    "link remap of /dev/shm/sem.x is /etc/passwd (mount 1), not a link_remap.N beside it on its mount 2",
		},
		{
			name:   "a /proc remap",
			files:  []*fdinfo.FileEntry{regFileEntry(5, "/dev/shm/x", 2)},
			remaps: []*remap.RemapFilePathEntry{{OrigId: proto.Uint32(5), RemapId: proto.Uint32(9), RemapType: remap.RemapType_PROCFS.Enum()}},
			err:    "remap_type PROCFS of /dev/shm/x is not restored",
		},
		{
			name:   "a file twice",
			files:  []*fdinfo.FileEntry{regFileEntry(5, "/dev/shm/x", 2), regFileEntry(5, "/vol/x", 3)},
			remaps: []*remap.RemapFilePathEntry{ghostRemap(5, 1)},
			ghost:  ghostEntry(0o100600, 0, 0),
			err:    "files.img holds file 5 twice",
		},
		{
			name:   "a remap of no file",
			remaps: []*remap.RemapFilePathEntry{ghostRemap(5, 1)},
			err:    "names file 5, which is no regular file in files.img",
		},
		{
			name:   "a ghost on the rootfs through a symlink",
			files:  []*fdinfo.FileEntry{regFileEntry(5, "/link/victim", 1)},
			remaps: []*remap.RemapFilePathEntry{ghostRemap(5, 1)},
			ghost:  ghostEntry(0o100600, 0, 0),
			err:    "file 5 (/link/victim) is in folder /link, which the rootfs reaches through a symlink",
		},
		{
			name:   "a ghost folder over a folder of the rootfs",
			files:  []*fdinfo.FileEntry{regFileEntry(5, "/tmp", 1)},
			remaps: []*remap.RemapFilePathEntry{ghostRemap(5, 1)},
			ghost:  ghostEntry(0o40777, 0, 0),
			err:    "ghost folder /tmp (ghost-file-1.img) is there already",
		},
		{
			name:   "a ghost in a folder of the rootfs that CRIU makes",
			files:  []*fdinfo.FileEntry{regFileEntry(5, "/tmp/new/x", 1)},
			remaps: []*remap.RemapFilePathEntry{ghostRemap(5, 1)},
			ghost:  ghostEntry(0o100600, 0, 0),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := images(t, thread())
			remapMounts(t, dir.Name())
			writeImage(t, dir.Name(), "files.img", "FILES", filesOf(tc.files)...)
			writeImage(t, dir.Name(), "remap-fpath.img", "REMAP_FPATH", remapsOf(tc.remaps)...)
			if tc.ghost != nil {
				ghost(t, dir.Name(), 1, tc.ghost, tc.data)
			}
			config := defaultConfig()
			config.Rootfs = t.TempDir()
			must(t, os.Mkdir(filepath.Join(config.Rootfs, "tmp"), 0o755))
			must(t, os.Symlink("/etc", filepath.Join(config.Rootfs, "link")))
			p := &Process{UID: tc.user, GID: tc.user}
			if tc.user != 0 {
				config.Capabilities = nil
				core := thread()
				cr := core.ThreadCore.Creds
				for _, id := range []*uint32{cr.Uid, cr.Euid, cr.Suid, cr.Fsuid, cr.Gid, cr.Egid, cr.Sgid, cr.Fsgid} {
					*id = uint32(tc.user)
				}
				cr.CapPrm, cr.CapEff = []uint32{0, 0}, []uint32{0, 0}
				writeImage(t, dir.Name(), "core-1.img", "CORE", core)
			}
			err := Restore(dir, p, config, "")
			if tc.err == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.HasPrefix(err.Error(), "refusing to restore: checkpoint image ") {
				t.Fatalf("want an error with %q, got %v", tc.err, err)
			}
		})
	}
}

func filesOf(files []*fdinfo.FileEntry) []proto.Message {
	out := make([]proto.Message, len(files))
	for i, f := range files {
		out[i] = f
	}
	return out
}

func remapsOf(remaps []*remap.RemapFilePathEntry) []proto.Message {
	out := make([]proto.Message, len(remaps))
	for i, r := range remaps {
		out[i] = r
	}
	return out
}

// A ghost file in a host folder the config binds: CRI's /dev/shm is the
// sandbox's, an emptyDir is a bind too.
func TestCheckRestorePrivilegesWritableBinds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mode  os.FileMode
		flags int
		err   string
	}{
		{name: "a folder anyone may write, bound read-write", mode: 0o1777, flags: unix.MS_BIND},
		{name: "the same bound read-only", mode: 0o1777, flags: unix.MS_BIND | unix.MS_RDONLY,
			err: "file 5 (/vol/x) is on /vol, a bind the config makes read-only"},
		{name: "root's folder for user 1000", mode: 0o755, flags: unix.MS_BIND,
			err: "that the config's user 1000 could not write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := images(t, thread())
			remapMounts(t, dir.Name())
			writeImage(t, dir.Name(), "files.img", "FILES", regFileEntry(5, "/vol/x", 3))
			writeImage(t, dir.Name(), "remap-fpath.img", "REMAP_FPATH",
				&remap.RemapFilePathEntry{OrigId: proto.Uint32(5), RemapId: proto.Uint32(1), RemapType: remap.RemapType_GHOST.Enum()})
			ghost(t, dir.Name(), 1, ghostEntry(0o100600, 1000, 0), 0)
			src := t.TempDir()
			must(t, os.Chmod(src, tc.mode))
			config := defaultConfig()
			config.Capabilities = nil
			config.Rootfs = t.TempDir()
			config.Mounts = []*configs.Mount{{Source: src, Destination: "/vol", Device: "bind", Flags: tc.flags}}
			core := thread()
			cr := core.ThreadCore.Creds
			for _, id := range []*uint32{cr.Uid, cr.Euid, cr.Suid, cr.Fsuid, cr.Gid, cr.Egid, cr.Sgid, cr.Fsgid} {
				*id = 1000
			}
			cr.CapPrm, cr.CapEff = []uint32{0, 0}, []uint32{0, 0}
			writeImage(t, dir.Name(), "core-1.img", "CORE", core)
			err := Restore(dir, &Process{UID: 1000, GID: 1000}, config, "")
			wantErr(t, err, tc.err)
		})
	}
}
