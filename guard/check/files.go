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
	"github.com/moby/sys/capability"
	"golang.org/x/sys/unix"

	"github.com/opencontainers/runc/libcontainer/configs"
)

// checkFiles refuses files in files.img that the container's process could
// not have made itself: CRIU creates them as host root before it gives
// each task its credentials, so the task keeps them whatever those are.
func (g *grant) checkFiles(dir *os.File, config *configs.Config) error {
	entries, err := readImage(dir, "files.img", "FILES", &fdinfo.FileEntry{})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// net.ipv4.ip_unprivileged_port_start, which is 1024 in a new network
	// namespace unless the config sets it (Docker sets 0).
	portStart := uint64(1024)
	if v, ok := config.Sysctl["net.ipv4.ip_unprivileged_port_start"]; ok {
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32); err == nil {
			portStart = n
		}
	}
	ttys, err := ttyKinds(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		f := e.(*fdinfo.FileEntry)
		err := fileKindChecked(f, ttys)
		if err == nil {
			err = g.checkFile(f, portStart)
		}
		if err != nil {
			return fmt.Errorf("refusing to restore: checkpoint image files.img: file %d %w; "+
				"restore it into a container whose config grants that, or checkpoint it again as it should run",
				f.GetId(), err)
		}
	}
	return nil
}

func (g *grant) checkFile(f *fdinfo.FileEntry, portStart uint64) error {
	switch f.GetType() {
	case fdinfo.FdTypes_PACKETSK:
		return g.needs("is a packet socket (type PACKETSK)", capability.CAP_NET_RAW)
	case fdinfo.FdTypes_INETSK:
		sk := f.GetIsk()
		if sk == nil {
			return errors.New("of type INETSK has no isk")
		}
		// A raw socket's src_port is its protocol.
		if sk.GetType() == unix.SOCK_RAW {
			return g.needs("is a raw socket (isk.type SOCK_RAW)", capability.CAP_NET_RAW)
		}
		// CRIU binds it, listening or not, to the port it had.
		if port := sk.GetSrcPort(); port != 0 && uint64(port) < portStart {
			return g.needs(fmt.Sprintf("has isk.src_port %d, below %d,", port, portStart), capability.CAP_NET_BIND_SERVICE)
		}
	case fdinfo.FdTypes_FANOTIFY:
		return g.needs("is a fanotify group (type FANOTIFY)", capability.CAP_SYS_ADMIN)
	case fdinfo.FdTypes_BPFMAP:
		return g.needs("is a BPF map (type BPFMAP)", capability.CAP_BPF, capability.CAP_SYS_ADMIN)
	case fdinfo.FdTypes_TUNF:
		return g.needs("is a tun device (type TUNF)", capability.CAP_NET_ADMIN)
	}
	return nil
}

// needs refuses what unless g grants one of caps.
func (g *grant) needs(what string, caps ...capability.Cap) error {
	var names []string
	for _, c := range caps {
		if g.has(c) {
			return nil
		}
		names = append(names, "CAP_"+strings.ToUpper(c.String()))
	}
	return fmt.Errorf("%s without %s among the config's %s capabilities [%s]",
		what, strings.Join(names, " or "), g.prmFrom, strings.Join(g.prmNames, " "))
}
