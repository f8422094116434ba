// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package shim

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/containerd/log"
	"golang.org/x/sys/unix"
)

// ExpandPages returns the CRIU image directory to restore from: dir
// itself, or, when dir holds compressed pages images, a tmpfs holding
// dir's images with the pages images decoded. The tmpfs is mounted at
// target only as long as it takes to open it: it is then reached through
// this process's descriptor of it (/proc/PID/fd/N), so that it goes away
// with the descriptor, at undo or when the shim ends, whatever happens.
// The caller undoes it once CRIU has restored (or failed). The decoded
// images must fit in the least of the container's memory limit, the
// host's ceiling and its available memory (limits.checkDecoded): a small
// layer may decode to as much as its table says.
func ExpandPages(ctx context.Context, dir, target string, limits Limits) (_ string, undo func(), err error) {
	noop := func() {}
	if ok, err := hasCompressedPages(dir); err != nil || !ok {
		return dir, noop, err
	}
	start := time.Now()
	images, others, room, err := planExpand(dir)
	if err != nil {
		return "", noop, err
	}
	planned := time.Now()
	// Before anything is mounted: a refusal leaves nothing behind.
	if err := limits.checkDecoded(room, images); err != nil {
		return "", noop, err
	}
	fd, err := privateTmpfs(target, room+(1<<20), len(images)+len(others)+16)
	if err != nil {
		return "", noop, err
	}
	undo = func() { unix.Close(fd) }
	if err := expandPagesInto(ctx, dir, fmt.Sprintf("/proc/self/fd/%d", fd), images, others, min(runtime.NumCPU(), pagesDecoders)); err != nil {
		undo()
		return "", noop, err
	}
	var content, packed int64
	for _, img := range images {
		content += img.content
		for _, f := range img.frames {
			packed += f.Size
		}
	}
	// The phases and the decoders, to tell a slow disk from few CPUs.
	log.G(ctx).Infof("decoded %d compressed pages images, %d MiB from %d MiB, into memory in %.2fs (reading their tables %.2fs; %d decoders of %d CPUs)",
		len(images), content>>20, packed>>20, time.Since(start).Seconds(), planned.Sub(start).Seconds(),
		min(runtime.NumCPU(), pagesDecoders), runtime.NumCPU())
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), fd), undo, nil
}

// privateTmpfs mounts a tmpfs of size bytes and inodes files at target,
// opens it, and unmounts and removes target: the descriptor returned is
// then the only way to it.
func privateTmpfs(target string, size int64, inodes int) (int, error) {
	if err := os.Mkdir(target, 0o700); err != nil {
		return -1, err
	}
	defer os.Remove(target)
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
	data := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0700", size, inodes)
	// Huge pages: the decoders fault the pages in, from many threads into
	// a few files, and 2 MiB at a time is 512 times fewer faults. A kernel
	// without them for tmpfs refuses the option.
	err := unix.Mount("tmpfs", target, "tmpfs", flags, data+",huge=within_size")
	if err != nil {
		err = unix.Mount("tmpfs", target, "tmpfs", flags, data)
	}
	if err != nil {
		return -1, fmt.Errorf("mount a tmpfs for the decoded pages at %s: %w", target, err)
	}
	fd, err := unix.Open(target, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if uerr := unix.Unmount(target, unix.MNT_DETACH); err == nil && uerr != nil {
		unix.Close(fd)
		err = fmt.Errorf("unmount the decoded pages' tmpfs at %s: %w", target, uerr)
	}
	if err != nil {
		return -1, err
	}
	return fd, nil
}
