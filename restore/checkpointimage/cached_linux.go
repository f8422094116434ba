// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"fmt"
	"math"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cachedPercent returns how much of the file at path is in the page cache,
// in percent of its pages (containerd runs as root: mincore(2) reports
// every page resident for a file its caller may neither own nor write).
func cachedPercent(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	vec, err := residency(f)
	if err != nil {
		return 0, err
	}
	if len(vec) == 0 {
		return 100, nil
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n * 100 / len(vec), nil
}

// residency returns one byte per page of f, bit 0 set where the page is in
// the page cache: mincore(2) of a mapping of f, which reads nothing.
func residency(f *os.File) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return nil, err
	}
	if fi.Size() > math.MaxInt {
		return nil, fmt.Errorf("%s: %d bytes are more than one mapping holds", f.Name(), fi.Size())
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	defer unix.Munmap(m)
	page := os.Getpagesize()
	vec := make([]byte, (len(m)+page-1)/page)
	// x/sys/unix has no mincore wrapper.
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)),
		uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		return nil, errno
	}
	return vec, nil
}

// idleIOPriority puts the calling thread in the idle I/O class: the block
// layer's schedulers that know classes (mq-deadline, BFQ) serve its reads
// when no other class waits; "none", NVMe's default, ignores it.
func idleIOPriority() error {
	const whoProcess, classIdle, classShift = 1, 3, 13
	if _, _, errno := unix.Syscall(unix.SYS_IOPRIO_SET, whoProcess, 0, classIdle<<classShift); errno != 0 {
		return errno
	}
	return nil
}

// openRegular opens path for reading if it is a regular file: no link is
// followed, and no FIFO can hold the caller.
func openRegular(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	return f, nil
}
