// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/checkpoint-restore/go-criu/v8/crit/images/mnt"
	"github.com/moby/sys/capability"
	"golang.org/x/sys/unix"

	devices "github.com/opencontainers/cgroups/devices/config"
	"github.com/opencontainers/runc/libcontainer/configs"
)

// Bounds on a tmpfs archive: what real ones hold (a container's /dev and
// /dev/shm) is far below, and checking reads all of it.
const (
	maxTmpfsBytes   = 16 << 30
	maxTmpfsEntries = 1 << 20
)

// checkTmpfsArchives checks the contents CRIU extracts into the
// container's tmpfs mounts: tmpfs-dev-N.tar.gz.img (N the mount's device)
// or, in older images, tmpfs-N.tar.gz.img (N its mount id). CRIU runs
// tar --extract as host root, so the archive's owners, modes and device
// nodes are applied as it says, and a member below a symlink of the
// archive goes wherever the link points.
//
// Allowed are folders, regular (also sparse) files, FIFOs, symlinks and hard links
// within the archive, with clean relative names, owned by root or the
// config's user and groups (other owners with CAP_CHOWN), set-id bits
// with CAP_FSETID, and device nodes the config gives the container (any
// with CAP_MKNOD); owners are numeric, as CRIU's dump writes them (tar
// would look a name up in the host's /etc/passwd). No member is below a
// symlink of the archive.
func (g *grant) checkTmpfsArchives(dir *os.File, root uint32, config *configs.Config) error {
	mounts, err := rootMounts(dir, root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if mnt.Fstype(m.GetFstype()) != mnt.Fstype_TMPFS && mnt.Fstype(m.GetFstype()) != mnt.Fstype_DEVTMPFS {
			continue
		}
		// CRIU reads the first of the two that holds anything.
		for _, name := range []string{
			fmt.Sprintf("tmpfs-dev-%d.tar.gz.img", m.GetRootDev()),
			fmt.Sprintf("tmpfs-%d.tar.gz.img", m.GetMntId()),
		} {
			idx, err := g.checkTmpfsArchive(dir, name, config)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return fmt.Errorf("refusing to restore: checkpoint image %s (the tmpfs at %s): %w", name, m.GetMountpoint(), err)
			}
			if idx != nil {
				g.tmpfs[m.GetMntId()] = idx
			}
		}
	}
	return nil
}

// tmpfsIndex is what a tmpfs archive makes: each member's tar type by its
// clean name ("." for the mount's root).
type tmpfsIndex map[string]byte

func (g *grant) checkTmpfsArchive(dir *os.File, name string, config *configs.Config) (tmpfsIndex, error) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return nil, err
	} else if !st.Mode().IsRegular() {
		return nil, errors.New("is not a regular file")
	} else if st.Size() == 0 {
		return nil, nil // CRIU takes an empty image as none
	}
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(io.LimitReader(z, maxTmpfsBytes))
	idx := make(tmpfsIndex)
	var total int64
	for n := 0; ; n++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return idx, nil
		}
		if err != nil {
			return nil, fmt.Errorf("after %d members: %w", n, err)
		}
		if n >= maxTmpfsEntries {
			return nil, fmt.Errorf("holds more than %d members", maxTmpfsEntries)
		}
		if total += h.Size; total > maxTmpfsBytes {
			return nil, fmt.Errorf("holds more than %d bytes", int64(maxTmpfsBytes))
		}
		if err := g.checkTmpfsMember(h, idx, config); err != nil {
			return nil, fmt.Errorf("member %q %w", h.Name, err)
		}
	}
}

func (g *grant) checkTmpfsMember(h *tar.Header, idx tmpfsIndex, config *configs.Config) error {
	name, ok := archiveName(h.Name)
	if !ok {
		return errors.New("is not a clean relative name")
	}
	if below(name, idx) {
		return errors.New("is below a symlink of the archive")
	}
	// tar would act through a symlink made by an earlier member of
	// the same name.
	if _, ok := idx[name]; ok {
		return errors.New("appears twice in the archive")
	}
	idx[name] = h.Typeflag
	if h.Uname != "" || h.Gname != "" {
		return fmt.Errorf("names its owner %q:%q, which tar would look up on the host", h.Uname, h.Gname)
	}
	uid, gid := uint32(h.Uid), uint32(h.Gid)
	if (uid != 0 && uid != g.uid) || (gid != 0 && !containsID(g.gids, gid)) {
		if err := g.needs(fmt.Sprintf("is owned by %d:%d, not root nor the config's user %d or groups %v,", uid, gid, g.uid, g.gids), capability.CAP_CHOWN); err != nil {
			return err
		}
	}
	if h.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 && h.Typeflag != tar.TypeDir {
		if err := g.needs(fmt.Sprintf("has set-id bits (mode %#o)", h.Mode), capability.CAP_FSETID); err != nil {
			return err
		}
	}
	switch h.Typeflag {
	case tar.TypeDir, tar.TypeReg, tar.TypeGNUSparse, tar.TypeFifo:
		// CRIU's dump writes --sparse: NCCL's /dev/shm files are
		// GNU sparse members.
	case tar.TypeSymlink:
	case tar.TypeLink:
		target, ok := archiveName(h.Linkname)
		if !ok || below(target, idx) || idx[target] == tar.TypeSymlink {
			return fmt.Errorf("is a hard link to %q, not to a file of the archive", h.Linkname)
		}
	case tar.TypeChar, tar.TypeBlock:
		typ := devices.CharDevice
		if h.Typeflag == tar.TypeBlock {
			typ = devices.BlockDevice
		}
		for _, d := range config.Devices {
			if d.Type == typ && d.Major == h.Devmajor && d.Minor == h.Devminor {
				return nil
			}
		}
		return g.needs(fmt.Sprintf("is device %c %d:%d, which the config does not give the container,", typ, h.Devmajor, h.Devminor), capability.CAP_MKNOD)
	default:
		return fmt.Errorf("has type %q, not a folder, regular file, FIFO, link or device", h.Typeflag)
	}
	return nil
}

// archiveName returns a member's name without tar's leading "./", and
// whether it is clean and relative.
func archiveName(n string) (string, bool) {
	n = strings.TrimSuffix(n, "/")
	if n == "." || n == "" {
		return ".", true
	}
	n = strings.TrimPrefix(n, "./")
	return n, !strings.HasPrefix(n, "/") && path.Clean(n) == n && n != ".." && !strings.HasPrefix(n, "../")
}

// below reports whether one of name's folders is a symlink of idx.
func below(name string, idx tmpfsIndex) bool {
	for d := path.Dir(name); d != "." && d != "/"; d = path.Dir(d) {
		if idx[d] == tar.TypeSymlink {
			return true
		}
	}
	return false
}
