// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"errors"
	"fmt"
	"os"
	"path"

	"github.com/checkpoint-restore/go-criu/v8/crit/images/fdinfo"
	filelock "github.com/checkpoint-restore/go-criu/v8/crit/images/file-lock"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/mnt"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pstree"
	"github.com/moby/sys/capability"
	"golang.org/x/sys/unix"
)

// CRIU's lock kinds (criu/include/file-lock.h), tested in this order by
// its restore_file_lock.
const (
	flPosix = 1
	flFlock = 2
	flOfd   = 4
	flLease = 8
)

// checkFileLocks refuses a lease the restored process could not take
// itself. CRIU takes a lease with its fsuid switched to the file's owner
// (set_file_lease), so a task restored as another user without CAP_LEASE
// would hold a lease on a file it does not own, and every writer of that
// file (on the host too, where the config binds it) would wait for the
// task up to fs.lease-break-time. A lock (flock, POSIX, OFD) needs only
// the descriptor, which the task holds either way.
func (g *grant) checkFileLocks(dir *os.File, tasks []*pstree.PstreeEntry, files map[uint32]*fdinfo.FileEntry) error {
	entries, err := readImage(dir, "filelocks.img", "FILE_LOCKS", &filelock.FileLockEntry{})
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for i, e := range entries {
		l := e.(*filelock.FileLockEntry)
		if err := g.checkFileLock(dir, l, tasks, files); err != nil {
			return fmt.Errorf("refusing to restore: checkpoint image filelocks.img: entry %d (flag %d, type %d, pid %d, fd %d) %w",
				i, l.GetFlag(), l.GetType(), l.GetPid(), l.GetFd(), err)
		}
	}
	return nil
}

func (g *grant) checkFileLock(dir *os.File, l *filelock.FileLockEntry, tasks []*pstree.PstreeEntry, files map[uint32]*fdinfo.FileEntry) error {
	switch fl := l.GetFlag(); {
	case fl&(flFlock|flPosix|flOfd) != 0:
		return nil
	case fl&flLease == 0:
		return errors.New("is of no lock kind CRIU knows")
	case g.has(capability.CAP_LEASE):
		return nil
	}
	f, err := taskFile(dir, tasks, files, l.GetPid(), l.GetFd())
	if err != nil {
		return fmt.Errorf("is a lease on %w", err)
	}
	if f.GetType() != fdinfo.FdTypes_REG {
		return fmt.Errorf("is a lease on file %d, a %s, not a regular file", f.GetId(), f.GetType())
	}
	mounts, err := rootMounts(dir, tasks[0].GetPid())
	if err != nil {
		return err
	}
	name := f.GetReg().GetName()
	uid, err := g.owner(name, mounts)
	if err != nil {
		return fmt.Errorf("is a lease on file %d (%s), whose owner runc cannot tell: %w; "+
			"grant CAP_LEASE or checkpoint the container without the lease", f.GetId(), name, err)
	}
	if uid != g.uid {
		return fmt.Errorf("is a lease on file %d (%s), owned by uid %d: the config's user %d could not take it without CAP_LEASE; "+
			"grant CAP_LEASE or checkpoint the container without the lease", f.GetId(), name, uid, g.uid)
	}
	return nil
}

// taskFile is the files.img entry task pid holds at descriptor fd.
func taskFile(dir *os.File, tasks []*pstree.PstreeEntry, files map[uint32]*fdinfo.FileEntry, pid, fd int32) (*fdinfo.FileEntry, error) {
	for _, t := range tasks {
		if int64(t.GetPid()) != int64(pid) {
			continue
		}
		ids, err := readIds(dir, t.GetPid())
		if err != nil {
			return nil, err
		}
		_, fds, err := readFdinfo(dir, ids.GetFilesId())
		if err != nil {
			return nil, err
		}
		for _, d := range fds {
			if int64(d.GetFd()) == int64(fd) {
				if f := files[d.GetId()]; f != nil {
					return f, nil
				}
				return nil, fmt.Errorf("descriptor %d of task %d, file %d, which files.img does not hold", fd, pid, d.GetId())
			}
		}
		return nil, fmt.Errorf("descriptor %d, which task %d does not hold", fd, pid)
	}
	return nil, fmt.Errorf("a descriptor of task %d, which pstree.img does not list", pid)
}

// owner is the uid that owns name where CRIU will open it: in the rootfs,
// or in the host folder or file the config binds at name's mount. The
// name is resolved beneath that root without following symlinks (a
// symlink could reach what CRIU would not open).
func (g *grant) owner(name string, mounts []*mnt.MntEntry) (uint32, error) {
	if !cleanAbs(name) {
		return 0, errors.New("not a clean absolute path")
	}
	m := mountOf(mounts, name)
	var root string
	switch {
	case m == nil:
		return 0, errors.New("on no mount of the images")
	case m.ExtKey != nil:
		for _, cm := range g.config.Mounts {
			if cm.IsBind() && path.Clean("/"+cm.Destination) == m.GetMountpoint() {
				root = cm.Source
			}
		}
		if root == "" {
			return 0, fmt.Errorf("on %s, a bind the config does not make", m.GetMountpoint())
		}
	case m.GetMountpoint() == "/" && g.config.Rootfs != "":
		root = g.config.Rootfs
	default:
		return 0, fmt.Errorf("on %s, a %s mount", m.GetMountpoint(), mnt.Fstype(m.GetFstype()))
	}
	// The config's own paths are runc's to open; below them, nothing
	// the images name is followed.
	fd, err := unix.Open(root, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(fd)
	if rel := inMount(m, name); rel != "." {
		at, err := unix.Openat2(fd, rel, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			return 0, &os.PathError{Op: "open", Path: path.Join(root, rel), Err: err}
		}
		defer unix.Close(at)
		fd = at
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	return st.Uid, nil
}
