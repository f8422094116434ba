// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/checkpoint-restore/go-criu/v8/crit/images/fdinfo"
	fsimg "github.com/checkpoint-restore/go-criu/v8/crit/images/fs"
	mmimg "github.com/checkpoint-restore/go-criu/v8/crit/images/mm"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pagemap"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pstree"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/vma"
	"google.golang.org/protobuf/proto"
)

// A reference from one image file into another names an object of the
// kind it says, or the restore is refused.
func TestCheckReferences(t *testing.T) {
	files := []*fdinfo.FileEntry{pipeFile(1, 501), regEntry(2, "/"), regEntry(3, "/etc/hosts")}
	for _, tc := range []struct {
		name string
		fds  []*fdinfo.FdinfoEntry
		fs   *fsimg.FsEntry
		err  string
	}{
		{name: "a dump's references", fds: []*fdinfo.FdinfoEntry{fdOf(0, 1, fdinfo.FdTypes_PIPE), fdOf(3, 3, fdinfo.FdTypes_REG)}, fs: fsOf(2, 2)},
		{name: "a descriptor of a file not in files.img", fds: []*fdinfo.FdinfoEntry{fdOf(4, 99, fdinfo.FdTypes_REG)}, err: "fdinfo-1.img: fd 4 names file 99, which files.img does not hold"},
		{name: "a pipe's descriptor naming a regular file", fds: []*fdinfo.FdinfoEntry{fdOf(4, 3, fdinfo.FdTypes_PIPE)}, err: "fdinfo-1.img: fd 4 is of type PIPE, its file 3 of files.img of type REG"},
		{name: "a descriptor listed twice", fds: []*fdinfo.FdinfoEntry{fdOf(4, 3, fdinfo.FdTypes_REG), fdOf(4, 3, fdinfo.FdTypes_REG)}, err: "fdinfo-1.img: fd 4 is listed twice"},
		{name: "a descriptor beyond CRIU's reach", fds: []*fdinfo.FdinfoEntry{fdOf(1<<30, 3, fdinfo.FdTypes_REG)}, err: "fd 1073741824 is above 1048575"},
		{name: "a root that is a pipe", fs: fsOf(2, 1), err: "fs-1.img: root_id 1 is no regular-file entry of files.img"},
		{name: "a cwd not in files.img", fs: fsOf(77, 2), err: "fs-1.img: cwd_id 77 is no regular-file entry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := images(t, thread())
			taskFds(t, dir.Name(), files, nil)
			if tc.fds != nil {
				var m []proto.Message
				for _, e := range tc.fds {
					m = append(m, e)
				}
				writeImage(t, dir.Name(), "fdinfo-1.img", "FDINFO", m...)
			}
			if tc.fs != nil {
				writeImage(t, dir.Name(), "fs-1.img", "FS", tc.fs)
			}
			byID, err := filesByID(dir)
			must(t, err)
			tasks := []*pstree.PstreeEntry{{Pid: proto.Uint32(1)}}
			err = checkFdinfo(dir, tasks, byID)
			if err == nil {
				err = checkFs(dir, tasks, byID)
			}
			wantErr(t, err, tc.err)
		})
	}
}

func fdOf(fd, id uint32, kind fdinfo.FdTypes) *fdinfo.FdinfoEntry {
	return &fdinfo.FdinfoEntry{Id: proto.Uint32(id), Flags: proto.Uint32(0), Type: kind.Enum(), Fd: proto.Uint32(fd)}
}

func fsOf(cwd, root uint32) *fsimg.FsEntry {
	return &fsimg.FsEntry{CwdId: proto.Uint32(cwd), RootId: proto.Uint32(root)}
}

// Seen as hangs of CRIU by the fuzzer (seeds 9288, 9429, 9112): each is
// refused before CRIU starts.
func TestCheckTreeAndPagemaps(t *testing.T) {
	task := func(pid, ppid uint32) *pstree.PstreeEntry {
		return &pstree.PstreeEntry{Pid: proto.Uint32(pid), Ppid: proto.Uint32(ppid), Pgid: proto.Uint32(1), Sid: proto.Uint32(1), Threads: []uint32{pid}}
	}
	for _, tc := range []struct {
		name  string
		tasks []*pstree.PstreeEntry
		err   string
	}{
		{name: "a tree", tasks: []*pstree.PstreeEntry{task(1, 0), task(2, 1), task(3, 2)}},
		{name: "a task its own parent", tasks: []*pstree.PstreeEntry{task(1, 0), task(2, 2)}, err: "task 2 is its own ancestor"},
		{name: "a loop", tasks: []*pstree.PstreeEntry{task(1, 0), task(2, 3), task(3, 2)}, err: "is its own ancestor"},
		{name: "a parent not listed", tasks: []*pstree.PstreeEntry{task(1, 0), task(2, 9)}, err: "task 2 has parent 9, which it does not list"},
		{name: "a pid twice", tasks: []*pstree.PstreeEntry{task(1, 0), task(1, 0)}, err: "lists pid 1 twice"},
		{name: "a root with a parent", tasks: []*pstree.PstreeEntry{task(1, 5)}, err: "the root task 1 has parent 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkTree(tc.tasks)
			wantErr(t, err, tc.err)
		})
	}
	entry := func(va uint64, n uint32) *pagemap.PagemapEntry {
		return &pagemap.PagemapEntry{Vaddr: proto.Uint64(va), CompatNrPages: proto.Uint32(n)}
	}
	for _, tc := range []struct {
		name    string
		entries []*pagemap.PagemapEntry
		pages   int // in pages-1.img
		err     string
	}{
		{name: "pages in order", entries: []*pagemap.PagemapEntry{entry(0x400000, 2), entry(0x600000, 1)}, pages: 3},
		{name: "a pages image short of its map", entries: []*pagemap.PagemapEntry{entry(0x400000, 2), entry(0x600000, 1)}, pages: 2,
			err: "checkpoint image pages-1.img holds 8192 bytes, fewer than the 3 pages pagemap-1.img says are there"},
		{name: "pages in the parent", entries: []*pagemap.PagemapEntry{{Vaddr: proto.Uint64(0x400000), CompatNrPages: proto.Uint32(2), InParent: proto.Bool(true)}}},
		{name: "a byte off a page", entries: []*pagemap.PagemapEntry{entry(0x400001, 1)}, err: "pagemap-1.img: entry at 0x400001 is not on a page boundary"},
		{name: "overlapping", entries: []*pagemap.PagemapEntry{entry(0x400000, 2), entry(0x401000, 1)}, err: "below the end of the one before it"},
		{name: "no pages", entries: []*pagemap.PagemapEntry{entry(0x400000, 0)}, err: "has 0 pages"},
		{name: "beyond the address space", entries: []*pagemap.PagemapEntry{entry(0xfffffffffffff000, 2)}, err: "has 2 pages"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := images(t, thread())
			m := []proto.Message{&pagemap.PagemapHead{PagesId: proto.Uint32(1)}}
			for _, e := range tc.entries {
				m = append(m, e)
			}
			writeImage(t, dir.Name(), "pagemap-1.img", "PAGEMAP", m...)
			must(t, os.WriteFile(filepath.Join(dir.Name(), "pages-1.img"), make([]byte, tc.pages*4096), 0o600))
			err := checkPagemaps(dir, []*pstree.PstreeEntry{task(1, 0)})
			wantErr(t, err, tc.err)
		})
	}
}

func mmOf(exe uint32, vmas ...[2]uint64) *mmimg.MmEntry {
	z := proto.Uint64(0)
	mm := &mmimg.MmEntry{MmStartCode: z, MmEndCode: z, MmStartData: z, MmEndData: z, MmStartStack: z, MmStartBrk: z,
		MmBrk: z, MmArgStart: z, MmArgEnd: z, MmEnvStart: z, MmEnvEnd: z, ExeFileId: proto.Uint32(exe)}
	for _, v := range vmas {
		mm.Vmas = append(mm.Vmas, &vma.VmaEntry{Start: proto.Uint64(v[0]), End: proto.Uint64(v[1]), Pgoff: z, Shmid: z,
			Prot: proto.Uint32(1), Flags: proto.Uint32(2), Status: proto.Uint32(1), Fd: proto.Int64(-1)})
	}
	return mm
}

func TestCheckMm(t *testing.T) {
	files := []*fdinfo.FileEntry{pipeFile(1, 501), regEntry(2, "/bin/engine")}
	for _, tc := range []struct {
		name string
		mm   *mmimg.MmEntry
		err  string
	}{
		{name: "a dump's map", mm: mmOf(2, [2]uint64{0x400000, 0x402000}, [2]uint64{0x600000, 0x601000})},
		{name: "an executable that is a pipe", mm: mmOf(1), err: "mm-1.img: exe_file_id 1 is no regular-file entry of files.img"},
		{name: "an executable not in files.img", mm: mmOf(9), err: "exe_file_id 9 is no regular-file entry"},
		{name: "an area off a page", mm: mmOf(2, [2]uint64{0x400010, 0x402000}), err: "vma 0 [0x400010, 0x402000) is not whole pages"},
		{name: "areas out of order", mm: mmOf(2, [2]uint64{0x600000, 0x601000}, [2]uint64{0x400000, 0x402000}), err: "vma 1 [0x400000, 0x402000)"},
		{name: "an empty area", mm: mmOf(2, [2]uint64{0x400000, 0x400000}), err: "vma 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := images(t, thread())
			taskFds(t, dir.Name(), files, nil)
			writeImage(t, dir.Name(), "mm-1.img", "MM", tc.mm)
			byID, err := filesByID(dir)
			must(t, err)
			err = checkMm(dir, []*pstree.PstreeEntry{{Pid: proto.Uint32(1)}}, byID)
			wantErr(t, err, tc.err)
		})
	}
}

// Shared memory's maps are read as the tasks' are.
func TestCheckPagemapsShmem(t *testing.T) {
	dir := images(t, thread())
	writeImage(t, dir.Name(), "pagemap-shmem-5.img", "PAGEMAP", &pagemap.PagemapHead{PagesId: proto.Uint32(9)},
		&pagemap.PagemapEntry{Vaddr: proto.Uint64(0x10), CompatNrPages: proto.Uint32(1)})
	wantErr(t, checkPagemaps(dir, nil), "pagemap-shmem-5.img: entry at 0x10 is not on a page boundary")
}
