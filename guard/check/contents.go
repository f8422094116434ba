// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/checkpoint-restore/go-criu/v8/crit/images/fdinfo"
	pipedata "github.com/checkpoint-restore/go-criu/v8/crit/images/pipe-data"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/tty"
	"github.com/moby/sys/capability"
	"google.golang.org/protobuf/proto"
)

// checkQueuedData refuses pipe and FIFO contents that are no pipe's or
// FIFO's of files.img, or that ask CRIU, as root, for a pipe larger than
// fs.pipe-max-size: a task without CAP_SYS_RESOURCE could not have made
// one, and each is kernel memory. The data follows each entry.
func (g *grant) checkQueuedData(dir *os.File, files map[uint32]*fdinfo.FileEntry) error {
	pipes, fifos := map[uint32]bool{}, map[uint32]bool{}
	for _, f := range files {
		switch f.GetType() {
		case fdinfo.FdTypes_PIPE:
			pipes[f.GetPipe().GetPipeId()] = true
		case fdinfo.FdTypes_FIFO:
			fifos[f.GetFifo().GetPipeId()] = true
		}
	}
	maxSize := uint32(1 << 20)
	if b, err := os.ReadFile("/proc/sys/fs/pipe-max-size"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32); err == nil {
			maxSize = uint32(n)
		}
	}
	for _, img := range []struct {
		name, magic, kind string
		of                map[uint32]bool
	}{{"pipes-data.img", "PIPES_DATA", "pipe", pipes}, {"fifo-data.img", "FIFO_DATA", "FIFO", fifos}} {
		b, err := readImageBytes(dir, img.name)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		err = walkImage(b, img.name, img.magic, func(p []byte) (int, error) {
			var e pipedata.PipeDataEntry
			if err := proto.Unmarshal(p, &e); err != nil {
				return 0, err
			}
			switch {
			case !img.of[e.GetPipeId()]:
				return 0, fmt.Errorf("pipe_id %d is no %s of files.img", e.GetPipeId(), img.kind)
			case e.GetSize() > maxSize && !g.has(capability.CAP_SYS_RESOURCE):
				return 0, fmt.Errorf("pipe_id %d asks for a pipe of %d bytes, above fs.pipe-max-size (%d), without CAP_SYS_RESOURCE", e.GetPipeId(), e.GetSize(), maxSize)
			case e.GetSize() != 0 && e.GetBytes() > e.GetSize():
				return 0, fmt.Errorf("pipe_id %d holds %d bytes, more than its pipe's %d", e.GetPipeId(), e.GetBytes(), e.GetSize())
			}
			return int(e.GetBytes()), nil
		})
		if err != nil {
			return fmt.Errorf("refusing to restore: %w", err) // walkImage names the image
		}
	}
	return nil
}

// checkTtyData refuses pty contents of no tty of tty-info.img.
func checkTtyData(dir *os.File, ttys map[uint32]tty.TtyType) error {
	entries, err := readImage(dir, "tty-data.img", "TTY_DATA", &tty.TtyDataEntry{})
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if id := e.(*tty.TtyDataEntry).GetTtyId(); ttys[id] != tty.TtyType_PTY {
			return fmt.Errorf("refusing to restore: checkpoint image tty-data.img: tty_id %d is no pseudo-terminal of tty-info.img", id)
		}
	}
	return nil
}
