// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/checkpoint-restore/go-criu/v8/crit/images/fdinfo"
	mmimg "github.com/checkpoint-restore/go-criu/v8/crit/images/mm"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pagemap"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pstree"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// checkTree refuses a pstree.img that is no tree: CRIU forks each task
// from its parent and waits for the tree to be complete, so a task that is
// its own ancestor, or a parent that is not listed, hangs the restore.
func checkTree(tasks []*pstree.PstreeEntry) error {
	parent := make(map[uint32]uint32, len(tasks))
	for i, t := range tasks {
		if _, ok := parent[t.GetPid()]; ok {
			return fmt.Errorf("refusing to restore: checkpoint image pstree.img lists pid %d twice", t.GetPid())
		}
		if i == 0 && t.GetPpid() != 0 {
			return fmt.Errorf("refusing to restore: checkpoint image pstree.img: the root task %d has parent %d, not 0", t.GetPid(), t.GetPpid())
		}
		parent[t.GetPid()] = t.GetPpid()
	}
	for _, t := range tasks[1:] {
		p := t.GetPpid()
		for range tasks {
			if p == t.GetPid() {
				return fmt.Errorf("refusing to restore: checkpoint image pstree.img: task %d is its own ancestor", t.GetPid())
			}
			pp, ok := parent[p]
			if !ok {
				return fmt.Errorf("refusing to restore: checkpoint image pstree.img: task %d has parent %d, which it does not list", t.GetPid(), p)
			}
			if pp == 0 {
				break
			}
			p = pp
		}
	}
	return nil
}

// checkPagemaps refuses a memory map that is not whole pages in
// ascending order, or whose pages image holds fewer pages than it says
// are there: CRIU maps and fills each entry's pages where it says (one a
// byte off a page boundary hung the restore), from the pages image the
// map's head names. The tasks' maps and those of shared memory are read.
func checkPagemaps(dir *os.File, tasks []*pstree.PstreeEntry) error {
	var names []string
	for _, t := range tasks {
		names = append(names, fmt.Sprintf("pagemap-%d.img", t.GetPid()))
	}
	all, err := imageNames(dir)
	if err != nil {
		return err
	}
	for _, n := range all {
		if strings.HasPrefix(n, "pagemap-shmem-") {
			names = append(names, n)
		}
	}
	for _, name := range names {
		b, err := readImageBytes(dir, name)
		if errors.Is(err, os.ErrNotExist) {
			continue // a zombie, or no memory dumped
		}
		if err != nil {
			return err
		}
		if err := checkPagemap(dir, name, b); err != nil {
			return fmt.Errorf("refusing to restore: %w", err)
		}
	}
	return nil
}

// CRIU's pagemap flags (criu/include/pagemap.h).
const (
	pageParent  = 1 << 0
	pagePresent = 1 << 2
)

func checkPagemap(dir *os.File, name string, b []byte) error {
	page := uint64(os.Getpagesize())
	var end, present uint64
	var head *pagemap.PagemapHead
	err := walkImage(b, name, "PAGEMAP", func(p []byte) (int, error) {
		if head == nil { // pagemap_head: the pages image's id
			head = &pagemap.PagemapHead{}
			return 0, proto.Unmarshal(p, head)
		}
		var e pagemap.PagemapEntry
		if err := proto.Unmarshal(p, &e); err != nil {
			return 0, err
		}
		n := e.GetNrPages()
		if n == 0 {
			n = uint64(e.GetCompatNrPages())
		}
		va := e.GetVaddr()
		switch {
		case va%page != 0:
			return 0, fmt.Errorf("entry at %#x is not on a page boundary", va)
		case n == 0 || n > (^uint64(0)-va)/page:
			return 0, fmt.Errorf("entry at %#x has %d pages", va, n)
		case va < end:
			return 0, fmt.Errorf("entry at %#x is below the end of the one before it, %#x", va, end)
		}
		end = va + n*page
		// As CRIU reads an image written before the flags were.
		flags := e.GetFlags()
		if e.GetInParent() {
			flags |= pageParent
		} else if e.Flags == nil {
			flags = pagePresent
		}
		if flags&pagePresent != 0 {
			present += n
		}
		return 0, nil
	})
	if err != nil || present == 0 {
		return err
	}
	pages := fmt.Sprintf("pages-%d.img", head.GetPagesId())
	var st unix.Stat_t
	if err := unix.Fstatat(int(dir.Fd()), pages, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("checkpoint image %s names %s: %w", name, pages, err)
	}
	if uint64(st.Size) < present*page {
		return fmt.Errorf("checkpoint image %s holds %d bytes, fewer than the %d pages %s says are there", pages, st.Size, present, name)
	}
	return nil
}

// checkMm refuses a task memory map whose executable is not a regular
// file of files.img, or whose areas are not whole pages in ascending
// order: CRIU sets /proc/PID/exe to the one and maps the others where
// they say.
func checkMm(dir *os.File, tasks []*pstree.PstreeEntry, files map[uint32]*fdinfo.FileEntry) error {
	page := uint64(os.Getpagesize())
	for _, t := range tasks {
		name := fmt.Sprintf("mm-%d.img", t.GetPid())
		entries, err := readImage(dir, name, "MM", &mmimg.MmEntry{})
		if errors.Is(err, os.ErrNotExist) {
			continue // a zombie
		}
		if err != nil {
			return err
		}
		if len(entries) != 1 {
			return fmt.Errorf("refusing to restore: checkpoint image %s holds %d entries, not one", name, len(entries))
		}
		mm := entries[0].(*mmimg.MmEntry)
		if f := files[mm.GetExeFileId()]; f == nil || f.GetType() != fdinfo.FdTypes_REG {
			return fmt.Errorf("refusing to restore: checkpoint image %s: exe_file_id %d is no regular-file entry of files.img", name, mm.GetExeFileId())
		}
		var end uint64
		for i, v := range mm.GetVmas() {
			s, e := v.GetStart(), v.GetEnd()
			if s%page != 0 || e%page != 0 || s >= e || s < end {
				return fmt.Errorf("refusing to restore: checkpoint image %s: vma %d [%#x, %#x) is not whole pages above the one before it", name, i, s, e)
			}
			end = e
		}
	}
	return nil
}
