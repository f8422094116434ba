// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"strings"
	"testing"

	"github.com/checkpoint-restore/go-criu/v8/crit/images/mnt"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/opencontainers/runc/libcontainer/configs"
)

const (
	ro     = unix.MS_RDONLY
	secure = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
)

// mountingConfig mounts what a container engine does, and a read-only
// volume at /data.
func mountingConfig() *configs.Config {
	c := defaultConfig()
	c.Namespaces = configs.Namespaces{{Type: configs.NEWNS}, {Type: configs.NEWPID}}
	c.Mounts = []*configs.Mount{
		{Destination: "/proc", Device: "proc", Source: "proc"},
		{Destination: "/dev", Device: "tmpfs", Source: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_STRICTATIME},
		{Destination: "/dev/pts", Device: "devpts", Source: "devpts", Flags: unix.MS_NOSUID | unix.MS_NOEXEC},
		{Destination: "/sys", Device: "sysfs", Source: "sysfs", Flags: ro | secure},
		{Destination: "/data", Device: "bind", Source: "/srv/data", Flags: unix.MS_BIND | unix.MS_REC | ro},
	}
	c.MaskPaths = []string{"/proc/kcore", "/proc/acpi"}
	c.ReadonlyPaths = []string{"/proc/sys"}
	return c
}

// mounts is what CRIU dumps of mountingConfig's container.
func mounts() []*mnt.MntEntry {
	m := func(id, parent uint32, at string, t mnt.Fstype, root string, flags uint32) *mnt.MntEntry {
		return &mnt.MntEntry{
			MntId: proto.Uint32(id), ParentMntId: proto.Uint32(parent), Mountpoint: proto.String(at),
			Fstype: proto.Uint32(uint32(t)), Root: proto.String(root), Flags: proto.Uint32(flags),
			RootDev: proto.Uint32(id), Source: proto.String("none"), Options: proto.String(""),
		}
	}
	ext := func(e *mnt.MntEntry, key string) *mnt.MntEntry {
		e.ExtKey = proto.String(key)
		return e
	}
	return []*mnt.MntEntry{
		m(10, 1, "/", mnt.Fstype_OVERLAYFS, "/", 0),
		m(11, 10, "/proc", mnt.Fstype_PROC, "/", 0),
		m(12, 10, "/dev", mnt.Fstype_TMPFS, "/", unix.MS_NOSUID|unix.MS_STRICTATIME),
		m(13, 12, "/dev/pts", mnt.Fstype_DEVPTS, "/", unix.MS_NOSUID|unix.MS_NOEXEC),
		m(14, 10, "/sys", mnt.Fstype_SYSFS, "/", ro|secure),
		ext(m(15, 10, "/data", mnt.Fstype_UNSUPPORTED, "/srv/data", ro), "/data"),
		ext(m(16, 11, "/proc/kcore", mnt.Fstype_TMPFS, "/null", 0), "/dev/null"),
		m(17, 11, "/proc/acpi", mnt.Fstype_TMPFS, "/", ro),
		m(18, 11, "/proc/sys", mnt.Fstype_PROC, "/sys", ro),
	}
}

func TestCheckMounts(t *testing.T) {
	byAt := func(ms []*mnt.MntEntry, at string) *mnt.MntEntry {
		for _, m := range ms {
			if m.GetMountpoint() == at {
				return m
			}
		}
		panic(at)
	}
	add := func(id, parent uint32, at string, t mnt.Fstype, root string, flags uint32) func([]*mnt.MntEntry) []*mnt.MntEntry {
		return func(ms []*mnt.MntEntry) []*mnt.MntEntry {
			return append(ms, &mnt.MntEntry{
				MntId: proto.Uint32(id), ParentMntId: proto.Uint32(parent), Mountpoint: proto.String(at),
				Fstype: proto.Uint32(uint32(t)), Root: proto.String(root), Flags: proto.Uint32(flags),
				RootDev: proto.Uint32(id), Source: proto.String("/dev/vda"), Options: proto.String(""),
			})
		}
	}
	for _, tc := range []struct {
		name   string
		mounts func([]*mnt.MntEntry) []*mnt.MntEntry
		config func(*configs.Config)
		err    string
	}{
		{name: "as dumped"},
		{
			name:   "a block device",
			mounts: add(20, 10, "/mnt", mnt.Fstype_UNSUPPORTED, "/", 0),
			err:    "mount 20 at /mnt (fstype UNSUPPORTED, root /): the config mounts no such filesystem there",
		},
		{
			name:   "binfmt_misc",
			mounts: add(20, 14, "/sys/fs/binfmt_misc", mnt.Fstype_BINFMT_MISC, "/", 0),
			err:    "mount 20 at /sys/fs/binfmt_misc (fstype BINFMT_MISC, root /): the config mounts no such filesystem there",
		},
		{
			name:   "a second proc elsewhere",
			mounts: add(20, 10, "/tmp/proc", mnt.Fstype_PROC, "/", 0),
			err:    "mount 20 at /tmp/proc (fstype PROC, root /): the config mounts no such filesystem there",
		},
		{
			name:   "a proc over the masks",
			mounts: add(20, 11, "/proc/sys/kernel", mnt.Fstype_PROC, "/sys/kernel", 0),
			err:    "mount 20 at /proc/sys/kernel (fstype PROC, root /sys/kernel): a bind mount that is neither external, of a tmpfs, nor one of the config's read-only paths",
		},
		{
			name:   "two mounts at one place",
			mounts: add(20, 11, "/proc/sys", mnt.Fstype_PROC, "/sys", 0),
			err:    "mounts 18 and 20 are both at /proc/sys",
		},
		{
			name: "a read-only volume made writable",
			mounts: func(ms []*mnt.MntEntry) []*mnt.MntEntry {
				byAt(ms, "/data").Flags = proto.Uint32(0)
				return ms
			},
			err: "mount 15 at /data (fstype UNSUPPORTED, root /srv/data): lacks ro, which the config sets",
		},
		{
			name: "an external bind moved elsewhere",
			mounts: func(ms []*mnt.MntEntry) []*mnt.MntEntry {
				byAt(ms, "/data").Mountpoint = proto.String("/etc")
				return ms
			},
			err: `external mount "/data" is not one the config binds at /etc`,
		},
		{
			name: "an external key the config does not bind",
			mounts: func(ms []*mnt.MntEntry) []*mnt.MntEntry {
				byAt(ms, "/data").ExtKey = proto.String("/etc/shadow")
				return ms
			},
			err: `external mount "/etc/shadow"`,
		},
		{
			name: "a writable /proc/sys",
			mounts: func(ms []*mnt.MntEntry) []*mnt.MntEntry {
				byAt(ms, "/proc/sys").Flags = proto.Uint32(0)
				return ms
			},
			err: "mount 18 at /proc/sys (fstype PROC, root /sys): lacks ro",
		},
		{
			name: "no /proc/sys read-only bind",
			mounts: func(ms []*mnt.MntEntry) []*mnt.MntEntry {
				return ms[:len(ms)-1]
			},
			err: "does not mask /proc/sys, which the config masks or makes read-only",
		},
		{
			name: "a writable sysfs",
			mounts: func(ms []*mnt.MntEntry) []*mnt.MntEntry {
				byAt(ms, "/sys").Flags = proto.Uint32(secure)
				return ms
			},
			err: "mount 14 at /sys (fstype SYSFS, root /): lacks ro",
		},
		{
			name: "a mountpoint that climbs out",
			mounts: func(ms []*mnt.MntEntry) []*mnt.MntEntry {
				byAt(ms, "/proc/acpi").Mountpoint = proto.String("/proc/../../etc")
				return ms
			},
			err: `mountpoint "/proc/../../etc" is not a clean absolute path`,
		},
		{
			name: "a root that climbs out",
			mounts: func(ms []*mnt.MntEntry) []*mnt.MntEntry {
				byAt(ms, "/proc/sys").Root = proto.String("/sys/../..")
				return ms
			},
			err: `root "/sys/../.." is not a clean absolute path`,
		},
		{
			name: "a mount not below its parent",
			mounts: func(ms []*mnt.MntEntry) []*mnt.MntEntry {
				byAt(ms, "/proc/acpi").ParentMntId = proto.Uint32(14)
				return ms
			},
			err: "mount 17 at /proc/acpi is not below its parent 14 at /sys",
		},
		{
			name: "a tmpfs in place of the config's bind",
			mounts: func(ms []*mnt.MntEntry) []*mnt.MntEntry {
				d := byAt(ms, "/data")
				d.ExtKey, d.Fstype, d.Root = nil, proto.Uint32(uint32(mnt.Fstype_TMPFS)), proto.String("/")
				return ms
			},
		},
		{
			name:   "a tmpfs elsewhere",
			mounts: add(20, 10, "/run/hook-scratch", mnt.Fstype_TMPFS, "/", 0),
		},
		{
			name:   "a file of a tmpfs over a /proc file (nvidia-cdi-hook's params)",
			mounts: add(20, 11, "/proc/driver/nvidia/params", mnt.Fstype_TMPFS, "/nvct-params", 0),
		},
		{
			name:   "a tmpfs at a masked path, writable",
			mounts: add(20, 11, "/proc/acpi", mnt.Fstype_TMPFS, "/", 0),
			err:    "mounts 17 and 20 are both at /proc/acpi",
		},
		{
			name: "a writable tmpfs at a masked folder",
			mounts: func(ms []*mnt.MntEntry) []*mnt.MntEntry {
				byAt(ms, "/proc/acpi").Flags = proto.Uint32(0)
				return ms
			},
			err: "mount 17 at /proc/acpi (fstype TMPFS, root /): lacks ro",
		},
		{
			name:   "a tmpfs inside an external bind",
			mounts: add(20, 15, "/data/x", mnt.Fstype_TMPFS, "/", ro),
			err:    "mount 20 at /data/x is inside the external bind at /data",
		},
		{
			name:   "a read-only root made writable",
			config: func(c *configs.Config) { c.Readonlyfs = true },
			err:    "root mount at / is read-write",
		},
		{
			name:   "a config that joins a mount namespace",
			config: func(c *configs.Config) { c.Namespaces[0].Path = "/proc/1/ns/mnt" },
			mounts: add(20, 10, "/mnt", mnt.Fstype_UNSUPPORTED, "/", 0),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := images(t, thread())
			ms := mounts()
			if tc.mounts != nil {
				ms = tc.mounts(ms)
			}
			entries := make([]proto.Message, len(ms))
			for i, m := range ms {
				entries[i] = m
			}
			// writeNamespaces gives task 1 mount namespace 204.
			writeImage(t, dir.Name(), "mountpoints-204.img", "MNTS", entries...)
			config := mountingConfig()
			if tc.config != nil {
				tc.config(config)
			}
			err := checkMounts(dir, 1, config)
			wantErr(t, err, tc.err)
			if err != nil && !strings.Contains(err.Error(), "checkpoint image mountpoints-204.img") {
				t.Fatalf("the error does not name the image: %v", err)
			}
		})
	}
}
