// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// lockedFile is a pages image mapped and, once locked, held in memory.
type lockedFile struct {
	name string
	fd   int
	size int64
	mem  []byte
}

// openPages opens the pages images in the CRIU image directory dir
// (pages-*.img, or compressed pages-*.img.zst), each beneath dir through
// no symbolic link and only if it is a regular file: the names come from
// an image. It returns them and their size, rounded up to whole pages.
func openPages(dir string) ([]lockedFile, int64, error) {
	return openMatching(dir, func(n string) bool {
		return strings.HasPrefix(n, "pages-") && (strings.HasSuffix(n, ".img") || strings.HasSuffix(n, ".img.zst"))
	})
}

// openMatching opens, as openPages does, the files of dir whose name match
// says.
func openMatching(dir string, match func(string) bool) ([]lockedFile, int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, err
	}
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	page := int64(os.Getpagesize())
	var (
		files []lockedFile
		total int64
	)
	for _, e := range entries {
		n := e.Name()
		if !match(n) {
			continue
		}
		fd, err := unix.Openat2(dfd, n, &unix.OpenHow{
			Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
		})
		if err != nil {
			closeFiles(files)
			return nil, 0, &os.PathError{Op: "open", Path: filepath.Join(dir, n), Err: err}
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			unix.Close(fd)
			closeFiles(files)
			return nil, 0, fmt.Errorf("%s is not a regular file: refusing to preheat it", filepath.Join(dir, n))
		}
		files = append(files, lockedFile{name: n, fd: fd, size: st.Size})
		total += (st.Size + page - 1) / page * page
	}
	return files, total, nil
}

// lockFiles maps each file and locks it in memory, reading what the page
// cache lacks; the descriptors are closed, the mappings stay.
func lockFiles(files []lockedFile) error {
	for i := range files {
		f := &files[i]
		if f.size > 0 {
			mem, err := unix.Mmap(f.fd, 0, int(f.size), unix.PROT_READ, unix.MAP_SHARED)
			if err != nil {
				return fmt.Errorf("map %s: %w", f.name, err)
			}
			f.mem = mem
			if err := unix.Mlock(mem); err != nil {
				return fmt.Errorf("lock %s (%d bytes) in memory: %w", f.name, f.size, err)
			}
		}
		unix.Close(f.fd)
		f.fd = -1
	}
	return nil
}

// closeFiles unlocks and unmaps what lockFiles mapped, and closes what is
// still open.
func closeFiles(files []lockedFile) {
	for i := range files {
		f := &files[i]
		if f.mem != nil {
			_ = unix.Munlock(f.mem)
			_ = unix.Munmap(f.mem)
			f.mem = nil
		}
		if f.fd >= 0 {
			unix.Close(f.fd)
			f.fd = -1
		}
	}
}
