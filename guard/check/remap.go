// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/checkpoint-restore/go-criu/v8/crit/images/fdinfo"
	ghostfile "github.com/checkpoint-restore/go-criu/v8/crit/images/ghost-file"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/mnt"
	remap "github.com/checkpoint-restore/go-criu/v8/crit/images/remap-file-path"
	"github.com/checkpoint-restore/go-criu/v8/magic"
	"github.com/moby/sys/capability"
	"golang.org/x/sys/unix"

	"github.com/opencontainers/runc/libcontainer/configs"
)

// remapGhost is the bit that marks a ghost remap in images without
// remap_type.
const remapGhost = 1 << 31

// maxGhostSize bounds a ghost file's size; its content is in the image.
const maxGhostSize = 1 << 32

// checkRemaps checks remap-fpath.img: the files CRIU recreates by name, as
// root and before it enters the container's mount namespace, to give
// tasks the deleted (ghost) or renamed (linked) files they held open.
// CRIU makes a ghost file's folders, creates it with the image's mode and
// owner, links a linked file's remap name to its old name, and unlinks
// them after the restore, each name joined to the mount namespace's root.
//
// Allowed are ghost files and link remaps whose names are clean absolute
// paths on the container's own root or tmpfs mounts (NCCL's deleted
// /dev/shm files, a renamed POSIX semaphore), with no symlink on the
// rootfs along them; a ghost file is a regular file or a folder owned by
// the config's user, without set-id bits unless the config grants what
// sets them, whose content is in the image. Remaps of /proc files and
// every other kind are refused.
func (g *grant) checkRemaps(dir *os.File, root uint32, config *configs.Config) error {
	entries, err := readImage(dir, "remap-fpath.img", "REMAP_FPATH", &remap.RemapFilePathEntry{})
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(entries) == 0) {
		return nil
	}
	if err != nil {
		return err
	}
	files, err := filesByID(dir)
	if err != nil {
		return err
	}
	mounts, err := rootMounts(dir, root)
	if err != nil {
		return err
	}
	for _, e := range entries {
		r := e.(*remap.RemapFilePathEntry)
		if err := g.checkRemap(dir, r, files, mounts, config.Rootfs); err != nil {
			return fmt.Errorf("refusing to restore: checkpoint image remap-fpath.img: file %d: %w", r.GetOrigId(), err)
		}
	}
	return nil
}

func (g *grant) checkRemap(dir *os.File, r *remap.RemapFilePathEntry, files map[uint32]*fdinfo.FileEntry, mounts []*mnt.MntEntry, rootfs string) error {
	kind, id := r.GetRemapType(), r.GetRemapId()
	if r.RemapType == nil {
		kind = remap.RemapType_LINKED
		if id&remapGhost != 0 {
			kind, id = remap.RemapType_GHOST, id&^remapGhost
		}
	}
	orig, err := g.remapName(files, r.GetOrigId(), mounts, rootfs)
	if err != nil {
		return err
	}
	switch kind {
	case remap.RemapType_GHOST:
		name := fmt.Sprintf("ghost-file-%x.img", id)
		gf, err := readGhost(dir, name)
		if err != nil {
			return fmt.Errorf("ghost file %s: %w", orig.name, err)
		}
		if err := g.checkGhost(gf); err != nil {
			return fmt.Errorf("ghost file %s (%s) %w", orig.name, name, err)
		}
		// CRIU takes an existing folder for the ghost one and gives it
		// the ghost's owner and mode.
		if gf.entry.GetMode()&unix.S_IFMT == unix.S_IFDIR {
			there, err := g.existsInPlace(orig.mount, orig.name, rootfs)
			if err != nil {
				return err
			}
			if there {
				return fmt.Errorf("ghost folder %s (%s) is there already: CRIU would give it the ghost's owner and mode", orig.name, name)
			}
		}
	case remap.RemapType_LINKED:
		link, err := g.remapName(files, id, mounts, rootfs)
		if err != nil {
			return fmt.Errorf("link remap of %s: %w", orig.name, err)
		}
		// CRIU's dump makes link_remap.N beside the file it stands for.
		if link.mntID != orig.mntID || path.Dir(link.name) != path.Dir(orig.name) ||
			!strings.HasPrefix(path.Base(link.name), "link_remap.") {
			return fmt.Errorf("link remap of %s is %s (mount %d), not a link_remap.N beside it on its mount %d",
				orig.name, link.name, link.mntID, orig.mntID)
		}
	default:
		return fmt.Errorf("remap_type %s of %s is not restored", kind, orig.name)
	}
	return nil
}

// remapName returns regular file id of files, refusing a name that is not
// a clean absolute path in a place of the container's own (ownPlace) on
// the mount that holds it, which its mnt_id, where recorded, names.
func (g *grant) remapName(files map[uint32]*fdinfo.FileEntry, id uint32, mounts []*mnt.MntEntry, rootfs string) (*regFile, error) {
	f := files[id]
	if f == nil || f.GetType() != fdinfo.FdTypes_REG || f.GetReg() == nil {
		return nil, fmt.Errorf("names file %d, which is no regular file in files.img", id)
	}
	reg := f.GetReg()
	name := reg.GetName()
	if !cleanAbs(name) {
		return nil, fmt.Errorf("file %d's name %q is not a clean absolute path", id, name)
	}
	// mnt_id -1 is none recorded (CRIU's dump leaves it so for the
	// link_remap.N it makes): CRIU resolves the name from the root.
	m := mountOf(mounts, name)
	if m == nil || (reg.GetMntId() != -1 && m.GetMntId() != uint32(reg.GetMntId())) {
		return nil, fmt.Errorf("file %d (%s) has mnt_id %d, which is not the mount that holds that path", id, name, reg.GetMntId())
	}
	if err := g.ownPlace(m, name, rootfs); err != nil {
		return nil, fmt.Errorf("file %d (%s) %w", id, name, err)
	}
	return &regFile{name: name, mntID: m.GetMntId(), mount: m}, nil
}

// regFile is a checked name and the mount that holds it.
type regFile struct {
	name  string
	mntID uint32
	mount *mnt.MntEntry
}

// cleanAbs reports whether name is an absolute path with no ".", ".." or
// empty parts.
func cleanAbs(name string) bool {
	return strings.HasPrefix(name, "/") && path.Clean(name) == name
}

// mountOf returns the mount whose mountpoint holds name most closely.
func mountOf(mounts []*mnt.MntEntry, name string) *mnt.MntEntry {
	var best *mnt.MntEntry
	for _, m := range mounts {
		mp := m.GetMountpoint()
		if (mp == "/" || name == mp || strings.HasPrefix(name, mp+"/")) &&
			(best == nil || len(mp) > len(best.GetMountpoint())) {
			best = m
		}
	}
	return best
}

// noSymlinkIn refuses a folder of the rootfs reached through a symlink:
// CRIU joins the name to the root outside the container's mount
// namespace, where a symlink resolves against the host's root. The part
// that does not exist yet CRIU creates as folders.
func noSymlinkIn(rootfs, dirName string) error {
	for p := dirName; ; p = path.Dir(p) {
		// The rootfs itself is the host's path; below it no symlink.
		rfd, err := os.Open(rootfs)
		if err != nil {
			return err
		}
		fd, err := unix.Openat2(int(rfd.Fd()), "."+p, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV,
		})
		rfd.Close()
		if err == nil {
			unix.Close(fd)
			return nil
		}
		if !errors.Is(err, unix.ENOENT) || p == "/" {
			return fmt.Errorf("is in folder %s, which the rootfs reaches through a symlink or is no folder (%v)", p, err)
		}
	}
}

// checkGhost checks a ghost file's header as CRIU will apply it.
func (g *grant) checkGhost(gf *ghostFile) error {
	e := gf.entry
	switch e.GetMode() & unix.S_IFMT {
	case unix.S_IFREG, unix.S_IFDIR:
	default:
		return fmt.Errorf("has mode %#o, not a regular file or a folder", e.GetMode())
	}
	if e.GetMode()&(unix.S_ISUID|unix.S_ISGID) != 0 {
		if err := g.needs(fmt.Sprintf("has set-id bits (mode %#o)", e.GetMode()), capability.CAP_FSETID); err != nil {
			return err
		}
	}
	if e.GetUid() != g.uid {
		if err := g.needs(fmt.Sprintf("is owned by uid %d, the config's user is %d,", e.GetUid(), g.uid), capability.CAP_CHOWN); err != nil {
			return err
		}
	}
	if !containsID(g.gids, e.GetGid()) {
		if err := g.needs(fmt.Sprintf("has gid %d, the config's groups are %v,", e.GetGid(), g.gids), capability.CAP_CHOWN); err != nil {
			return err
		}
	}
	if e.GetSize() > maxGhostSize {
		return fmt.Errorf("has size %d, above %d", e.GetSize(), uint64(maxGhostSize))
	}
	if e.GetMode()&unix.S_IFMT == unix.S_IFREG && !e.GetChunks() && e.GetSize() > gf.data {
		return fmt.Errorf("has size %d, but the image holds %d bytes of it", e.GetSize(), gf.data)
	}
	return nil
}

func containsID(ids []uint32, id uint32) bool {
	for _, i := range ids {
		if i == id {
			return true
		}
	}
	return false
}

// ghostFile is a ghost image's header entry and the bytes after it.
type ghostFile struct {
	entry *ghostfile.GhostFileEntry
	data  uint64
}

// readGhost reads the header of ghost image name: after the magic, one
// entry; then the content, whole or in chunks (each an entry and its
// bytes), which CRIU copies into the file.
func readGhost(dir *os.File, name string) (*ghostFile, error) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("checkpoint image %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("checkpoint image %s is not a regular file", name)
	}
	head := make([]byte, 64<<10)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	head = head[:n]
	// decodeImage wants whole entries; the header is the first.
	if len(head) < 12 {
		return nil, fmt.Errorf("checkpoint image %s is too short", name)
	}
	// The magic is one word, or two where the first is IMG_COMMON.
	off := 4
	if m, v := magic.LoadMagic().ByName, uint64(binary.LittleEndian.Uint32(head)); v == m["IMG_COMMON"] || v == m["IMG_SERVICE"] {
		off = 8
	}
	size := int(binary.LittleEndian.Uint32(head[off:]))
	end := off + 4 + size
	if end > len(head) {
		return nil, fmt.Errorf("checkpoint image %s: its header entry states %d bytes", name, size)
	}
	entries, err := decodeImage(head[:end], name, "GHOST_FILE", &ghostfile.GhostFileEntry{})
	if err != nil {
		return nil, err
	}
	if len(entries) != 1 {
		return nil, fmt.Errorf("checkpoint image %s holds no ghost file entry", name)
	}
	return &ghostFile{entry: entries[0].(*ghostfile.GhostFileEntry), data: uint64(st.Size()) - uint64(end)}, nil
}

// filesByID reads files.img.
func filesByID(dir *os.File) (map[uint32]*fdinfo.FileEntry, error) {
	entries, err := readImage(dir, "files.img", "FILES", &fdinfo.FileEntry{})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	files := make(map[uint32]*fdinfo.FileEntry, len(entries))
	for _, e := range entries {
		f := e.(*fdinfo.FileEntry)
		// CRIU acts on every entry; a check of one of two would
		// leave the other unchecked.
		if files[f.GetId()] != nil {
			return nil, fmt.Errorf("refusing to restore: checkpoint image files.img holds file %d twice", f.GetId())
		}
		files[f.GetId()] = f
	}
	return files, nil
}

// rootMounts reads the mount image of the root task's mount namespace.
func rootMounts(dir *os.File, root uint32) ([]*mnt.MntEntry, error) {
	ids, err := readIds(dir, root)
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("mountpoints-%d.img", ids.GetMntNsId())
	entries, err := readImage(dir, name, "MNTS", &mnt.MntEntry{})
	if err != nil {
		return nil, err
	}
	mounts := make([]*mnt.MntEntry, len(entries))
	for i, e := range entries {
		mounts[i] = e.(*mnt.MntEntry)
	}
	return mounts, nil
}
