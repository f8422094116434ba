// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/checkpoint-restore/go-criu/v8/crit/images/fdinfo"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/mnt"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pstree"
	skpacket "github.com/checkpoint-restore/go-criu/v8/crit/images/sk-packet"
	skunix "github.com/checkpoint-restore/go-criu/v8/crit/images/sk-unix"
	"google.golang.org/protobuf/proto"
)

// CRIU's unix_sk_entry uflags: the socket is outside the tree, CRIU's
// own, a plugin's, or given by --inherit-fd.
const uflagsNotRestored = 1<<0 | 1<<1 | 1<<2 | 1<<3

// checkUnixSockets refuses unix sockets that CRIU would bind or connect
// outside the restored tree. CRIU recreates a task's sockets as root,
// before the task gets its credentials: it binds each named socket at its
// name, removing a socket file already there, and connects each to its
// peer's name. A peer that no restored task holds, or one that is
// outside the tree (--ext-unix-sk), is whatever listens at that name: a
// host listener reachable through a bind of the config saw the peer
// credentials of uid 0 from a task restored as uid 1000.
//
// Allowed are sockets whose peers are sockets a task of the checkpoint
// holds, and names (not abstract ones) that are clean paths on the
// container's own root or tmpfs mounts.
func (g *grant) checkUnixSockets(dir *os.File, tasks []*pstree.PstreeEntry, files map[uint32]*fdinfo.FileEntry, rootfs string) error {
	socks := make(map[uint32]*skunix.UnixSkEntry) // by inode
	for _, f := range files {
		if f.GetType() == fdinfo.FdTypes_UNIXSK {
			if f.GetUsk() == nil {
				return fmt.Errorf("file %d of type UNIXSK has no usk", f.GetId())
			}
			// CRIU binds or unlinks each entry but connects to one
			// per inode: two of one inode are refused.
			if socks[f.GetUsk().GetIno()] != nil {
				return fmt.Errorf("unix socket inode %d is two sockets' (files %d and %d)", f.GetUsk().GetIno(),
					socks[f.GetUsk().GetIno()].GetId(), f.GetId())
			}
			socks[f.GetUsk().GetIno()] = f.GetUsk()
		}
	}
	if len(socks) == 0 {
		return nil
	}
	held, err := heldFiles(dir, tasks)
	if err != nil {
		return err
	}
	mounts, err := rootMounts(dir, tasks[0].GetPid())
	if err != nil {
		return err
	}
	order := slices.SortedFunc(maps.Values(socks), func(a, b *skunix.UnixSkEntry) int { return cmp.Compare(a.GetId(), b.GetId()) })
	for _, sk := range order {
		if err := g.checkUnixSocket(sk, socks, held, mounts, rootfs); err != nil {
			return fmt.Errorf("unix socket %d (inode %d) %w", sk.GetId(), sk.GetIno(), err)
		}
	}
	return nil
}

func (g *grant) checkUnixSocket(sk *skunix.UnixSkEntry, socks map[uint32]*skunix.UnixSkEntry, held map[uint32]bool, mounts []*mnt.MntEntry, rootfs string) error {
	if f := sk.GetUflags() & uflagsNotRestored; f != 0 {
		return fmt.Errorf("has uflags %#x: a socket outside the checkpoint, CRIU's, a plugin's or an inherited one", f)
	}
	if name := sk.GetName(); len(name) > 0 && name[0] != 0 {
		// A relative name is bound in its name_dir.
		full := string(name)
		if full[0] != '/' {
			full = sk.GetNameDir() + "/" + full
		}
		if !cleanAbs(full) {
			return fmt.Errorf("has name %q in %q, not a clean path", name, sk.GetNameDir())
		}
		m := mountOf(mounts, full)
		if m == nil {
			return fmt.Errorf("has name %s on no mount", full)
		}
		// CRIU removes and binds it there, as root.
		if err := g.ownPlace(m, full, rootfs); err != nil {
			return fmt.Errorf("has name %s, which %w", full, err)
		}
	}
	if sk.GetPeer() == 0 {
		return nil
	}
	peer := socks[sk.GetPeer()]
	switch {
	case peer == nil:
		return fmt.Errorf("has peer inode %d, which is no socket of files.img", sk.GetPeer())
	case !held[peer.GetId()]:
		return fmt.Errorf("has peer %d (inode %d, name %q), which no task of the checkpoint holds: CRIU would connect it, as root, to whatever listens at that name",
			peer.GetId(), peer.GetIno(), peer.GetName())
	}
	return nil
}

// heldFiles returns the ids of the files the tasks hold: in their
// descriptor tables, or in flight in a socket's queue.
func heldFiles(dir *os.File, tasks []*pstree.PstreeEntry) (map[uint32]bool, error) {
	held := make(map[uint32]bool)
	seen := make(map[uint32]bool)
	for _, task := range tasks {
		ids, err := readIds(dir, task.GetPid())
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if seen[ids.GetFilesId()] {
			continue
		}
		seen[ids.GetFilesId()] = true
		_, fds, err := readFdinfo(dir, ids.GetFilesId())
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		for _, fd := range fds {
			held[fd.GetId()] = true
		}
	}
	queued, err := readQueues(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range queued {
		for _, scm := range e.GetScm() {
			for _, id := range scm.GetRights() {
				held[id] = true
			}
		}
	}
	return held, nil
}

// readQueues reads sk-queues.img, where each entry is followed by the
// packet's bytes.
func readQueues(dir *os.File) ([]*skpacket.SkPacketEntry, error) {
	b, err := readImageBytes(dir, "sk-queues.img")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*skpacket.SkPacketEntry
	err = walkImage(b, "sk-queues.img", "SK_QUEUES", func(entry []byte) (int, error) {
		e := &skpacket.SkPacketEntry{}
		if err := proto.Unmarshal(entry, e); err != nil {
			return 0, err
		}
		out = append(out, e)
		return int(e.GetLength()), nil
	})
	return out, err
}
