// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	bpfmapdata "github.com/checkpoint-restore/go-criu/v8/crit/images/bpfmap-data"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/fdinfo"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/memfd"
	pipedata "github.com/checkpoint-restore/go-criu/v8/crit/images/pipe-data"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pstree"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/siginfo"
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

// checkMemfds refuses a memfd owned by another user or group than the
// process's, where the config does not give a root with CAP_CHOWN: CRIU
// sets the owner and mode as root, and a memfd of root with the set-uid
// bit is one a task could fexecve.
func (g *grant) checkMemfds(dir *os.File) error {
	entries, err := readImage(dir, "memfd.img", "MEMFD_INODE", &memfd.MemfdInodeEntry{})
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if g.uid == 0 && g.has(capability.CAP_CHOWN) {
		return nil
	}
	for _, e := range entries {
		m := e.(*memfd.MemfdInodeEntry)
		if m.GetUid() != g.uid || !containsID(g.gids, m.GetGid()) {
			return fmt.Errorf("refusing to restore: checkpoint image memfd.img: memfd %q is owned by %d:%d, not the config's user %d or its groups",
				m.GetName(), m.GetUid(), m.GetGid(), g.uid)
		}
	}
	return nil
}

// checkSignals refuses a pending signal that is no siginfo of a signal:
// the restorer queues each to the task itself.
func checkSignals(dir *os.File, tasks []*pstree.PstreeEntry) error {
	var names []string
	for _, t := range tasks {
		names = append(names, fmt.Sprintf("signal-p-%d.img", t.GetPid()))
		for _, tid := range t.GetThreads() {
			names = append(names, fmt.Sprintf("signal-s-%d.img", tid))
		}
	}
	for _, name := range names {
		entries, err := readImage(dir, name, "SIGNAL", &siginfo.SignalQueueEntry{})
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		for _, e := range entries {
			for i, s := range e.(*siginfo.SignalQueueEntry).GetSignals() {
				b := s.GetSiginfo()
				if len(b) != 128 || binary.NativeEndian.Uint32(b) < 1 || binary.NativeEndian.Uint32(b) > 64 {
					return fmt.Errorf("refusing to restore: checkpoint image %s: signal %d is no siginfo of a signal", name, i)
				}
			}
		}
	}
	return nil
}

// checkBpfmapData refuses BPF map contents of no map of files.img (whose
// maps need CAP_BPF); the data follows each entry.
func checkBpfmapData(dir *os.File, files map[uint32]*fdinfo.FileEntry) error {
	maps := map[uint32]bool{}
	for _, f := range files {
		if f.GetType() == fdinfo.FdTypes_BPFMAP {
			maps[f.GetBpf().GetMapId()] = true
		}
	}
	b, err := readImageBytes(dir, "bpfmap-data.img")
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	err = walkImage(b, "bpfmap-data.img", "BPFMAP_DATA", func(p []byte) (int, error) {
		var e bpfmapdata.BpfmapDataEntry
		if err := proto.Unmarshal(p, &e); err != nil {
			return 0, err
		}
		if !maps[e.GetMapId()] {
			return 0, fmt.Errorf("map_id %d is no BPF map of files.img", e.GetMapId())
		}
		return int(e.GetKeysBytes()) + int(e.GetValuesBytes()), nil
	})
	if err != nil {
		return fmt.Errorf("refusing to restore: %w", err) // walkImage names the image
	}
	return nil
}

// checkTcpStreams refuses a TCP stream image of no socket of files.img:
// CRIU names each tcp-stream-INO.img by its socket's inode (sk-tcp.c).
func checkTcpStreams(dir *os.File, files map[uint32]*fdinfo.FileEntry) error {
	socks := map[uint64]bool{}
	for _, f := range files {
		if f.GetType() == fdinfo.FdTypes_INETSK {
			socks[uint64(f.GetIsk().GetIno())] = true
		}
	}
	names, err := imageNames(dir)
	if err != nil {
		return err
	}
	for _, name := range names {
		hex, ok := strings.CutPrefix(name, "tcp-stream-")
		if !ok {
			continue
		}
		if ino, err := strconv.ParseUint(strings.TrimSuffix(hex, ".img"), 16, 32); err != nil || !socks[ino] {
			return fmt.Errorf("refusing to restore: checkpoint image %s is the stream of no socket of files.img", name)
		}
	}
	return nil
}
