// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

// Package devshm carries a CRI container's /dev/shm in its checkpoint, as
// CRI-O does: the sandbox's tmpfs, which CRI binds into the container from
// outside and which CRIU therefore treats as an external mount, written after
// the dump as devshm-checkpoint.tar in the checkpoint layer and unpacked into
// the new sandbox's /dev/shm before the runtime restores. Both sides run on
// the host and read or write names the container chose: every name is opened
// beneath the tmpfs through a descriptor, never followed through a symbolic
// link nor onto another file system, and only directories, regular files and
// hard links between them are carried, within a size bound.
package devshm

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"golang.org/x/sys/unix"
)

// ArchiveName is the file of the checkpoint layer that holds /dev/shm.
const ArchiveName = crmetadata.DevShmCheckpointTar

// MaxEntries bounds the names an archive may hold, either way.
const MaxEntries = 1 << 16

// permBits are the mode bits kept: no set-user-ID or set-group-ID bit.
const permBits = 0o1777

// Size is the size of the file system mounted at dir (a tmpfs's size=).
func Size(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	return int64(st.Blocks) * st.Bsize, nil
}

// Extra is a file of the tmpfs to write under a name it no longer has
// there: a link_remap.N that CRIU's dump made, linked to a file a process
// holds open under a removed name, and removed again when the dump left
// the processes running.
type Extra struct {
	// Name is its name beneath the tmpfs (link_remap.N).
	Name string
	// File is the file, opened by the caller (through the process that
	// holds it); it must be a regular file of the tmpfs.
	File *os.File
}

// Write writes the tree at dir to w as a tar archive: directories, regular
// files, and hard links for a file's further names; then each of extra, as
// a hard link to the name the walk found it under, or a file of its own.
// It refuses a symbolic link, device, FIFO or socket, a mount beneath dir,
// an extra file that is not a regular file of dir's file system or whose
// name is taken, more than MaxEntries names and files whose sizes add up
// to more than limit bytes, naming the path. It returns the bytes of file
// content written.
func Write(w io.Writer, dir string, limit int64, extra ...Extra) (int64, error) {
	root, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(root)
	var st unix.Stat_t
	if err := unix.Fstat(root, &st); err != nil {
		return 0, &os.PathError{Op: "fstat", Path: dir, Err: err}
	}
	wr := &writer{tw: tar.NewWriter(w), dir: dir, dev: st.Dev, limit: limit, links: map[[2]uint64]string{}, names: map[string]bool{}}
	if err := wr.walk(root, ""); err != nil {
		return wr.size, err
	}
	for _, e := range extra {
		if err := wr.extra(e); err != nil {
			return wr.size, err
		}
	}
	return wr.size, wr.tw.Close()
}

func (wr *writer) extra(e Extra) error {
	name, err := cleanName(e.Name)
	if err == nil && name == "" {
		err = errors.New("is empty")
	}
	if err != nil {
		return fmt.Errorf("%s: %w", e.Name, err)
	}
	if wr.names[name] {
		return fmt.Errorf("%s: a file of that name is there already", wr.where(name))
	}
	if dir := path.Dir(name); dir != "." && !wr.names[dir] {
		return fmt.Errorf("%s: its folder is not there", wr.where(name))
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(e.File.Fd()), &st); err != nil {
		return &os.PathError{Op: "fstat", Path: e.File.Name(), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Dev != wr.dev {
		return fmt.Errorf("%s (for %s) is not a regular file of %s", e.File.Name(), wr.where(name), wr.dir)
	}
	if wr.entries++; wr.entries > MaxEntries {
		return fmt.Errorf("%s holds more than %d names", wr.dir, MaxEntries)
	}
	wr.names[name] = true
	key := [2]uint64{st.Dev, st.Ino}
	if first, ok := wr.links[key]; ok {
		return wr.header(name, tar.TypeLink, &st, 0, first)
	}
	// Read through a descriptor of its own: the caller's may be shared
	// with the process, its offset not to be moved.
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", e.File.Fd()), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "reopen", Path: e.File.Name(), Err: err}
	}
	defer unix.Close(fd)
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil || now.Dev != st.Dev || now.Ino != st.Ino {
		return fmt.Errorf("%s changed while it was read", e.File.Name())
	}
	wr.links[key] = name
	return wr.file(fd, name, &now)
}

type writer struct {
	tw      *tar.Writer
	dir     string
	dev     uint64
	limit   int64
	size    int64
	entries int
	links   map[[2]uint64]string // every regular file's first name
	names   map[string]bool
}

func (wr *writer) where(name string) string { return path.Join(wr.dir, name) }

func (wr *writer) walk(dirfd int, rel string) error {
	names, err := readNames(dirfd)
	if err != nil {
		return fmt.Errorf("read %s: %w", wr.where(rel), err)
	}
	for _, n := range names {
		name := path.Join(rel, n)
		wr.names[name] = true
		if wr.entries++; wr.entries > MaxEntries {
			return fmt.Errorf("%s holds more than %d names", wr.dir, MaxEntries)
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &os.PathError{Op: "stat", Path: wr.where(name), Err: err}
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			fd, err := wr.open(dirfd, n, name, unix.O_DIRECTORY, &st)
			if err != nil {
				return err
			}
			err = wr.header(name+"/", tar.TypeDir, &st, 0, "")
			if err == nil {
				err = wr.walk(fd, name)
			}
			unix.Close(fd)
			if err != nil {
				return err
			}
		case unix.S_IFREG:
			key := [2]uint64{st.Dev, st.Ino}
			if first, ok := wr.links[key]; ok {
				if err := wr.header(name, tar.TypeLink, &st, 0, first); err != nil {
					return err
				}
				continue
			}
			fd, err := wr.open(dirfd, n, name, 0, &st)
			if err != nil {
				return err
			}
			err = wr.file(fd, name, &st)
			unix.Close(fd)
			if err != nil {
				return err
			}
			wr.links[key] = name
		default:
			return fmt.Errorf("%s is a %s: only directories and regular files are carried in %s", wr.where(name), kind(st.Mode), ArchiveName)
		}
	}
	return nil
}

// open opens name in dirfd as the file stat described, refusing another
// file system and a name that changed since.
func (wr *writer) open(dirfd int, n, name string, flags int, st *unix.Stat_t) (int, error) {
	if st.Dev != wr.dev {
		return -1, fmt.Errorf("%s is on another file system mounted beneath %s: not carried", wr.where(name), wr.dir)
	}
	fd, err := unix.Openat(dirfd, n, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC|flags, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: wr.where(name), Err: err}
	}
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil || now.Dev != st.Dev || now.Ino != st.Ino || now.Mode&unix.S_IFMT != st.Mode&unix.S_IFMT {
		unix.Close(fd)
		return -1, fmt.Errorf("%s changed while it was read", wr.where(name))
	}
	*st = now
	return fd, nil
}

func (wr *writer) header(name string, typ byte, st *unix.Stat_t, size int64, link string) error {
	return wr.tw.WriteHeader(&tar.Header{
		Typeflag: typ, Name: name, Linkname: link, Size: size,
		Mode: int64(st.Mode & permBits), Uid: int(st.Uid), Gid: int(st.Gid),
		ModTime: time.Unix(st.Mtim.Unix()), Format: tar.FormatPAX,
	})
}

func (wr *writer) file(fd int, name string, st *unix.Stat_t) error {
	if st.Size > wr.limit-wr.size {
		return fmt.Errorf("%s: its files hold more than %d bytes (%s is %d bytes): not carried in %s", wr.dir, wr.limit, wr.where(name), st.Size, ArchiveName)
	}
	if err := wr.header(name, tar.TypeReg, st, st.Size, ""); err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), wr.where(name))
	n, err := io.CopyN(wr.tw, f, st.Size)
	wr.size += n
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%s changed while it was read (%d of %d bytes)", wr.where(name), n, st.Size)
	}
	return err
}

// readNames lists the directory dirfd, sorted.
func readNames(dirfd int) ([]string, error) {
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), ".")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	slices.Sort(names)
	return names, err
}

func kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return "symbolic link"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFSOCK:
		return "socket"
	}
	return fmt.Sprintf("file of mode %#o", mode)
}

// Extract unpacks the archive r, as Write writes it, into the directory
// dir: directories, regular files and hard links to files it unpacked
// before, with their owners and permission bits (no set-user-ID or
// set-group-ID bit). Every name is resolved beneath dir, through no symbolic
// link and on dir's file system; a file there already of that name is
// replaced, a directory kept. It refuses, naming the entry, any other entry
// type, an absolute name or one with "..", a link to a name it did not
// unpack, more than MaxEntries entries, and files that add up to more than
// limit bytes.
func Extract(r io.Reader, dir string, limit int64) error {
	root, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(root)
	tr := tar.NewReader(r)
	files := map[string]bool{}
	var size int64
	for entries := 0; ; entries++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", ArchiveName, err)
		}
		if entries >= MaxEntries {
			return fmt.Errorf("%s holds more than %d entries", ArchiveName, MaxEntries)
		}
		name, err := cleanName(hdr.Name)
		if err != nil {
			return fmt.Errorf("%s entry %q: %w", ArchiveName, hdr.Name, err)
		}
		if name == "" {
			continue
		}
		fail := func(err error) error { return fmt.Errorf("%s entry %q: %w", ArchiveName, hdr.Name, err) }
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = extractDir(root, name, hdr)
		case tar.TypeReg:
			if hdr.Size < 0 || hdr.Size > limit-size {
				return fail(fmt.Errorf("its files hold more than %d bytes, the size of %s", limit, dir))
			}
			size += hdr.Size
			err = extractFile(root, name, hdr, tr)
			files[name] = err == nil
		case tar.TypeLink:
			var target string
			if target, err = cleanName(hdr.Linkname); err == nil && !files[target] {
				err = fmt.Errorf("links to %q, which is not a file unpacked before it", hdr.Linkname)
			}
			if err == nil {
				err = extractLink(root, target, name)
			}
		default:
			err = fmt.Errorf("is of type %q: only directories, regular files and hard links are unpacked", hdr.Typeflag)
		}
		if err != nil {
			return fail(err)
		}
	}
}

// cleanName returns name, relative and clean, or an error for an absolute
// name or one that climbs out with "..".
func cleanName(name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		return "", errors.New("is an absolute path")
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", errors.New("has a \"..\" component")
		}
	}
	if c := path.Clean(name); c != "." {
		return c, nil
	}
	return "", nil
}

const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// parent opens the directory that holds name, beneath root.
func parent(root int, name string) (int, string, error) {
	dir, base := path.Split(name)
	if dir == "" {
		fd, err := unix.Dup(root)
		return fd, base, err
	}
	fd, err := unix.Openat2(root, dir, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolve})
	if err != nil {
		return -1, "", fmt.Errorf("open its folder beneath the target: %w", err)
	}
	return fd, base, nil
}

func extractDir(root int, name string, hdr *tar.Header) error {
	pfd, base, err := parent(root, name)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := unix.Mkdirat(pfd, base, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("mkdir: %w", err)
	}
	fd, err := unix.Openat2(pfd, base, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: resolve})
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer unix.Close(fd)
	return setAttrs(fd, hdr)
}

func extractFile(root int, name string, hdr *tar.Header, r io.Reader) error {
	pfd, base, err := parent(root, name)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := replace(pfd, base); err != nil {
		return err
	}
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if _, err := io.CopyN(f, r, hdr.Size); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return setAttrs(fd, hdr)
}

func extractLink(root int, target, name string) error {
	tfd, err := unix.Openat2(root, target, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: resolve})
	if err != nil {
		return fmt.Errorf("open its target: %w", err)
	}
	defer unix.Close(tfd)
	var st unix.Stat_t
	if err := unix.Fstat(tfd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("its target %q is not a regular file", target)
	}
	pfd, base, err := parent(root, name)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := replace(pfd, base); err != nil {
		return err
	}
	if err := unix.Linkat(tfd, "", pfd, base, unix.AT_EMPTY_PATH); err != nil {
		return fmt.Errorf("link: %w", err)
	}
	return nil
}

// replace removes a file (not a directory) of name base in pfd.
func replace(pfd int, base string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
		return nil
	} else if err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return errors.New("a directory of that name is there")
	}
	if err := unix.Unlinkat(pfd, base, 0); err != nil {
		return fmt.Errorf("remove the file there: %w", err)
	}
	return nil
}

func setAttrs(fd int, hdr *tar.Header) error {
	if err := unix.Fchown(fd, hdr.Uid, hdr.Gid); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	if err := unix.Fchmod(fd, uint32(hdr.Mode&permBits)); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	// The times matter to no restore: kept where the kernel lets them be.
	t := unix.NsecToTimespec(hdr.ModTime.UnixNano())
	_ = unix.UtimesNanoAt(fd, "", []unix.Timespec{t, t}, unix.AT_EMPTY_PATH)
	return nil
}
