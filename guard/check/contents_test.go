// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	bpfmapdata "github.com/checkpoint-restore/go-criu/v8/crit/images/bpfmap-data"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/fdinfo"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/fifo"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/memfd"
	pipedata "github.com/checkpoint-restore/go-criu/v8/crit/images/pipe-data"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pstree"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/siginfo"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/tty"
	"google.golang.org/protobuf/proto"
)

// A pipe's or FIFO's queued data belongs to one of files.img's, and asks
// for no pipe larger than the task could have made.
func TestCheckQueuedData(t *testing.T) {
	fifoFile := &fdinfo.FileEntry{Type: fdinfo.FdTypes_FIFO.Enum(), Id: proto.Uint32(3),
		Fifo: &fifo.FifoEntry{Id: proto.Uint32(3), PipeId: proto.Uint32(601)}}
	data := func(pipe, bytes, size uint32) *pipedata.PipeDataEntry {
		e := &pipedata.PipeDataEntry{PipeId: proto.Uint32(pipe), Bytes: proto.Uint32(bytes)}
		if size != 0 {
			e.Size = proto.Uint32(size)
		}
		return e
	}
	for _, tc := range []struct {
		name, image string
		entry       *pipedata.PipeDataEntry
		payload     int // bytes written after the entry
		err         string
	}{
		{name: "a pipe's data", image: "pipes-data.img", entry: data(501, 6, 65536), payload: 6},
		{name: "a FIFO's data", image: "fifo-data.img", entry: data(601, 6, 65536), payload: 6},
		{name: "data of no pipe", image: "pipes-data.img", entry: data(999, 6, 0), payload: 6, err: "pipes-data.img: pipe_id 999 is no pipe of files.img"},
		{name: "a pipe's id in fifo-data.img", image: "fifo-data.img", entry: data(501, 6, 0), payload: 6, err: "fifo-data.img: pipe_id 501 is no FIFO of files.img"},
		{name: "a pipe beyond pipe-max-size", image: "pipes-data.img", entry: data(501, 6, 1<<31), payload: 6, err: "above fs.pipe-max-size"},
		{name: "more data than its pipe holds", image: "pipes-data.img", entry: data(501, 8192, 4096), payload: 8192, err: "holds 8192 bytes, more than its pipe's 4096"},
		{name: "data cut short", image: "pipes-data.img", entry: data(501, 6, 0), payload: 3, err: "pipes-data.img is truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := images(t, thread())
			taskFds(t, dir.Name(), []*fdinfo.FileEntry{pipeFile(1, 501), regEntry(2, "/fifo"), fifoFile}, nil)
			magic := map[string]string{"pipes-data.img": "PIPES_DATA", "fifo-data.img": "FIFO_DATA"}[tc.image]
			writeImage(t, dir.Name(), tc.image, magic, tc.entry)
			f, err := os.OpenFile(filepath.Join(dir.Name(), tc.image), os.O_APPEND|os.O_WRONLY, 0)
			must(t, err)
			_, err = f.Write(make([]byte, tc.payload))
			must(t, err)
			must(t, f.Close())
			byID, err := filesByID(dir)
			must(t, err)
			g, err := grantOf(&Process{UID: 1000, GID: 1000}, defaultConfig())
			must(t, err)
			wantErr(t, g.checkQueuedData(dir, byID), tc.err)
		})
	}
}

func TestCheckTtyData(t *testing.T) {
	for _, tc := range []struct {
		name string
		id   uint32
		err  string
	}{
		{name: "a pty's data", id: 7},
		{name: "data of no tty", id: 8, err: "tty-data.img: tty_id 8 is no pseudo-terminal of tty-info.img"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := images(t, thread())
			writeImage(t, dir.Name(), "tty-data.img", "TTY_DATA", &tty.TtyDataEntry{TtyId: proto.Uint32(tc.id), Data: []byte("hello")})
			wantErr(t, checkTtyData(dir, map[uint32]tty.TtyType{7: tty.TtyType_PTY}), tc.err)
		})
	}
}

// CRIU sets a memfd's owner and mode as root: a non-root task gets only
// memfds of its own user.
func TestCheckMemfds(t *testing.T) {
	inode := func(uid, gid, mode uint32) *memfd.MemfdInodeEntry {
		return &memfd.MemfdInodeEntry{Name: proto.String("x"), Uid: proto.Uint32(uid), Gid: proto.Uint32(gid), Size: proto.Uint64(0),
			Shmid: proto.Uint32(1), Seals: proto.Uint32(0), InodeId: proto.Uint64(1), Mode: proto.Uint32(mode)}
	}
	for _, tc := range []struct {
		name string
		uid  int
		m    *memfd.MemfdInodeEntry
		err  string
	}{
		{name: "the user's own", uid: 1000, m: inode(1000, 1000, 0o777)},
		{name: "root's, set-uid, for user 1000", uid: 1000, m: inode(0, 0, 0o4755), err: `memfd "x" is owned by 0:0, not the config's user 1000`},
		{name: "another group", uid: 1000, m: inode(1000, 0, 0o2755), err: "is owned by 1000:0"},
		{name: "any owner for root", uid: 0, m: inode(0, 0, 0o4755)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := images(t, thread())
			writeImage(t, dir.Name(), "memfd.img", "MEMFD_INODE", tc.m)
			g, err := grantOf(&Process{UID: tc.uid, GID: tc.uid}, defaultConfig())
			must(t, err)
			wantErr(t, g.checkMemfds(dir), tc.err)
		})
	}
}

func TestCheckSignalsStreamsAndBpfmapData(t *testing.T) {
	sig := func(signo uint32, size int) *siginfo.SignalQueueEntry {
		b := make([]byte, size)
		if size >= 4 {
			binary.NativeEndian.PutUint32(b, signo)
		}
		return &siginfo.SignalQueueEntry{Signals: []*siginfo.SiginfoEntry{{Siginfo: b}}}
	}
	for _, tc := range []struct {
		name string
		q    *siginfo.SignalQueueEntry
		err  string
	}{
		{name: "SIGUSR1 pending", q: sig(10, 128)},
		{name: "signal 0", q: sig(0, 128), err: "signal-p-1.img: signal 0 is no siginfo of a signal"},
		{name: "a short siginfo", q: sig(10, 16), err: "is no siginfo of a signal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := images(t, thread())
			writeImage(t, dir.Name(), "signal-p-1.img", "SIGNAL", tc.q)
			wantErr(t, checkSignals(dir, []*pstree.PstreeEntry{{Pid: proto.Uint32(1), Threads: []uint32{1}}}), tc.err)
		})
	}
	for _, tc := range []struct {
		name, image string
		err         string
	}{
		{name: "a TCP socket's stream", image: "tcp-stream-3e8.img"},
		{name: "the stream of no socket", image: "tcp-stream-3e9.img", err: "tcp-stream-3e9.img is the stream of no socket of files.img"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := images(t, thread())
			taskFds(t, dir.Name(), []*fdinfo.FileEntry{file(fdinfo.FdTypes_INETSK, 1000)}, nil)
			must(t, os.WriteFile(filepath.Join(dir.Name(), tc.image), nil, 0o600))
			byID, err := filesByID(dir)
			must(t, err)
			wantErr(t, checkTcpStreams(dir, byID), tc.err)
		})
	}
	dir := images(t, thread())
	taskFds(t, dir.Name(), nil, nil)
	writeImage(t, dir.Name(), "bpfmap-data.img", "BPFMAP_DATA", &bpfmapdata.BpfmapDataEntry{MapId: proto.Uint32(5), KeysBytes: proto.Uint32(0), ValuesBytes: proto.Uint32(0), Count: proto.Uint32(0)})
	wantErr(t, checkBpfmapData(dir, nil), "bpfmap-data.img: map_id 5 is no BPF map of files.img")
}
