// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"archive/tar"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/checkpoint-restore/go-criu/v8/crit/images/mnt"
	"github.com/moby/sys/capability"
	"golang.org/x/sys/unix"

	"github.com/opencontainers/runc/libcontainer/configs"
)

// ownPlace refuses name, a clean absolute path that mount m holds, unless
// CRIU's by-name work there (creating, chowning, linking, binding and
// unlinking as root) stays in what the container owns: the rootfs with no
// symlink along the folder (CRIU resolves outside the container's mount
// namespace), or a tmpfs of its own with no symlink of its archive along
// the folder (CRIU extracts the archive first); or a host folder the
// config binds read-write and its process could write itself (a CRI
// container's /dev/shm, the sandbox's; an emptyDir).
func (g *grant) ownPlace(m *mnt.MntEntry, name, rootfs string) error {
	switch {
	case m.ExtKey != nil:
		return g.writableBind(m)
	case m.GetMountpoint() == "/":
		return noSymlinkIn(rootfs, path.Dir(name))
	case mnt.Fstype(m.GetFstype()) == mnt.Fstype_TMPFS:
		if below(inMount(m, name), g.tmpfs[m.GetMntId()]) {
			return fmt.Errorf("is below a symlink of the archive of the tmpfs at %s", m.GetMountpoint())
		}
		return nil
	}
	return fmt.Errorf("is on %s, a %s mount, not the root or a tmpfs", m.GetMountpoint(), mnt.Fstype(m.GetFstype()))
}

// inMount is name relative to mount m's root, as its archive names it.
func inMount(m *mnt.MntEntry, name string) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(name, m.GetMountpoint()), "/")
	if rel == "" {
		return "."
	}
	return rel
}

// existsInPlace reports whether name is there before CRIU acts: in the
// rootfs, or in m's archive.
func (g *grant) existsInPlace(m *mnt.MntEntry, name, rootfs string) (bool, error) {
	if m.GetMountpoint() != "/" {
		_, ok := g.tmpfs[m.GetMntId()][inMount(m, name)]
		return ok, nil
	}
	root, err := os.Open(rootfs)
	if err != nil {
		return false, err
	}
	defer root.Close()
	fd, err := unix.Openat2(int(root.Fd()), name, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err == nil {
		unix.Close(fd)
		return true, nil
	}
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	return false, fmt.Errorf("%s in the rootfs: %w", name, err)
}

// archiveKind is the S_IFMT kind of an archive member of tar type t, 0
// for none that opens.
func archiveKind(t byte) uint32 {
	switch t {
	case tar.TypeFifo:
		return unix.S_IFIFO
	case tar.TypeChar:
		return unix.S_IFCHR
	case tar.TypeBlock:
		return unix.S_IFBLK
	}
	return 0
}

// writableBind refuses bind mount m unless the config binds a host folder
// there read-write that its process could create files in itself: CRIU
// makes there what the process could have made.
func (g *grant) writableBind(m *mnt.MntEntry) error {
	dest := m.GetMountpoint()
	var c *configs.Mount
	for _, cm := range g.config.Mounts {
		if cm.IsBind() && path.Clean("/"+cm.Destination) == dest {
			c = cm
		}
	}
	switch {
	case c == nil:
		return fmt.Errorf("is on %s, a bind of a host path the config does not make", dest)
	case c.Flags&unix.MS_RDONLY != 0:
		return fmt.Errorf("is on %s, a bind the config makes read-only", dest)
	}
	var st unix.Stat_t
	if err := unix.Stat(c.Source, &st); err != nil {
		return fmt.Errorf("is on %s, a bind of %s: %w", dest, c.Source, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || !g.canWrite(&st) {
		return fmt.Errorf("is on %s, a bind of host folder %s (mode %#o, owner %d:%d) that the config's user %d could not write",
			dest, c.Source, st.Mode&0o7777, st.Uid, st.Gid, g.uid)
	}
	return nil
}

// canWrite reports whether the config's process may create files in a
// folder of that owner and mode.
func (g *grant) canWrite(st *unix.Stat_t) bool {
	if g.uid == 0 && g.has(capability.CAP_DAC_OVERRIDE) {
		return true
	}
	switch {
	case st.Uid == g.uid:
		return st.Mode&0o300 == 0o300
	case containsID(g.gids, st.Gid):
		return st.Mode&0o030 == 0o030
	}
	return st.Mode&0o003 == 0o003
}
