// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"slices"
	"strings"
	"testing"

	bpfmapfile "github.com/checkpoint-restore/go-criu/v8/crit/images/bpfmap-file"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/fdinfo"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/fown"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/fsnotify"
	packetsock "github.com/checkpoint-restore/go-criu/v8/crit/images/packet-sock"
	skinet "github.com/checkpoint-restore/go-criu/v8/crit/images/sk-inet"
	skopts "github.com/checkpoint-restore/go-criu/v8/crit/images/sk-opts"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/tun"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/opencontainers/runc/libcontainer/configs"
)

// file is a files.img entry of type typ, as CRIU dumps one.
func file(typ fdinfo.FdTypes, id uint32) *fdinfo.FileEntry {
	n, f := proto.Uint32, false
	own := &fown.FownEntry{Uid: n(0), Euid: n(0), Signum: n(0), PidType: n(0), Pid: n(0)}
	opts := &skopts.SkOptsEntry{
		SoSndbuf: n(212992), SoRcvbuf: n(212992), SoSndTmoSec: proto.Uint64(0),
		SoSndTmoUsec: proto.Uint64(0), SoRcvTmoSec: proto.Uint64(0), SoRcvTmoUsec: proto.Uint64(0),
	}
	e := &fdinfo.FileEntry{Type: typ.Enum(), Id: n(id)}
	switch typ {
	case fdinfo.FdTypes_INETSK:
		e.Isk = &skinet.InetSkEntry{
			Id: n(id), Ino: n(id), Family: n(unix.AF_INET), Type: n(unix.SOCK_STREAM), Proto: n(unix.IPPROTO_TCP),
			State: n(10), SrcPort: n(0), DstPort: n(0), Flags: n(2), Backlog: n(0),
			SrcAddr: []uint32{0}, Fown: own, Opts: opts,
		}
	case fdinfo.FdTypes_PACKETSK:
		e.Psk = &packetsock.PacketSockEntry{
			Id: n(id), Type: n(unix.SOCK_RAW), Protocol: n(0x300), Flags: n(2), Ifindex: n(0), Fown: own, Opts: opts,
			Version: n(0), Reserve: n(0), AuxData: &f, OrigDev: &f, VnetHdr: &f, Loss: &f, Timestamp: n(0), CopyThresh: n(0),
		}
	case fdinfo.FdTypes_FANOTIFY:
		e.Ffy = &fsnotify.FanotifyFileEntry{Id: n(id), Flags: n(2), Fown: own, Faflags: n(0), Evflags: n(0)}
	case fdinfo.FdTypes_BPFMAP:
		e.Bpf = &bpfmapfile.BpfmapFileEntry{
			Id: n(id), Flags: n(2), Pos: proto.Uint64(0), Fown: own, MapType: n(2), KeySize: n(4), ValueSize: n(8),
			MapId: n(7), MaxEntries: n(1), MapFlags: n(0), Memlock: proto.Uint64(4096), Frozen: &f,
			MapName: proto.String("counts"), Ifindex: n(0),
		}
	case fdinfo.FdTypes_TUNF:
		e.Tunf = &tun.TunfileEntry{Id: n(id), Netdev: proto.String("tun0")}
	}
	return e
}

// listener is a TCP socket listening on port.
func listener(id, port uint32) *fdinfo.FileEntry {
	e := file(fdinfo.FdTypes_INETSK, id)
	e.Isk.SrcPort = proto.Uint32(port)
	return e
}

func TestCheckRestorePrivilegesFiles(t *testing.T) {
	raw := file(fdinfo.FdTypes_INETSK, 4)
	// CRIU dumps a raw socket's protocol as its port.
	raw.Isk.Type, raw.Isk.Proto, raw.Isk.SrcPort = proto.Uint32(unix.SOCK_RAW), proto.Uint32(unix.IPPROTO_ICMP), proto.Uint32(unix.IPPROTO_ICMP)
	dns := file(fdinfo.FdTypes_INETSK, 5)
	dns.Isk.Type, dns.Isk.Proto, dns.Isk.State = proto.Uint32(unix.SOCK_DGRAM), proto.Uint32(unix.IPPROTO_UDP), proto.Uint32(7)
	dns.Isk.Family, dns.Isk.SrcPort, dns.Isk.SrcAddr = proto.Uint32(unix.AF_INET6), proto.Uint32(53), []uint32{0, 0, 0, 0}
	noIsk := file(fdinfo.FdTypes_INETSK, 6)
	noIsk.Isk = nil

	drop := func(name string) func(*configs.Config) {
		return func(c *configs.Config) {
			c.Capabilities.Permitted = slices.DeleteFunc(slices.Clone(c.Capabilities.Permitted), func(s string) bool { return s == name })
		}
	}
	add := func(name string) func(*configs.Config) {
		return func(c *configs.Config) {
			c.Capabilities.Permitted = append(slices.Clone(c.Capabilities.Permitted), name)
		}
	}
	for _, tc := range []struct {
		name    string
		files   []*fdinfo.FileEntry
		config  func(*configs.Config)
		process Process
		err     string
	}{
		{
			name:   "a packet socket without CAP_NET_RAW",
			files:  []*fdinfo.FileEntry{file(fdinfo.FdTypes_PACKETSK, 3)},
			config: drop("CAP_NET_RAW"),
			err:    "files.img: file 3 is a packet socket (type PACKETSK) without CAP_NET_RAW among the config's permitted capabilities [CAP_CHOWN",
		},
		{name: "a packet socket with CAP_NET_RAW", files: []*fdinfo.FileEntry{file(fdinfo.FdTypes_PACKETSK, 3)}},
		{
			name:    "a packet socket for a user that keeps no capability",
			files:   []*fdinfo.FileEntry{file(fdinfo.FdTypes_PACKETSK, 3)},
			config:  func(c *configs.Config) { c.NoNewPrivileges = true },
			process: Process{UID: 1000, GID: 1000},
			err:     "files.img: file 3 is a packet socket (type PACKETSK) without CAP_NET_RAW among the config's ambient capabilities []",
		},
		{
			name:   "a raw socket without CAP_NET_RAW",
			files:  []*fdinfo.FileEntry{listener(1, 8080), raw},
			config: drop("CAP_NET_RAW"),
			err:    "files.img: file 4 is a raw socket (isk.type SOCK_RAW) without CAP_NET_RAW",
		},
		{name: "a raw socket with CAP_NET_RAW", files: []*fdinfo.FileEntry{raw}, config: drop("CAP_NET_BIND_SERVICE")},
		{
			name:   "a listener on port 80 without CAP_NET_BIND_SERVICE",
			files:  []*fdinfo.FileEntry{listener(9, 80)},
			config: drop("CAP_NET_BIND_SERVICE"),
			err:    "files.img: file 9 has isk.src_port 80, below 1024, without CAP_NET_BIND_SERVICE",
		},
		{
			name:   "a bound UDP socket on port 53 without CAP_NET_BIND_SERVICE",
			files:  []*fdinfo.FileEntry{dns},
			config: drop("CAP_NET_BIND_SERVICE"),
			err:    "files.img: file 5 has isk.src_port 53, below 1024, without CAP_NET_BIND_SERVICE",
		},
		{name: "a listener on port 8080", files: []*fdinfo.FileEntry{listener(9, 8080), file(fdinfo.FdTypes_INETSK, 10)}, config: drop("CAP_NET_BIND_SERVICE")},
		{name: "a listener on port 80 with CAP_NET_BIND_SERVICE", files: []*fdinfo.FileEntry{listener(9, 80)}},
		{
			name:  "a listener on port 80 where the config lowers ip_unprivileged_port_start",
			files: []*fdinfo.FileEntry{listener(9, 80)},
			config: func(c *configs.Config) {
				drop("CAP_NET_BIND_SERVICE")(c)
				c.Sysctl = map[string]string{"net.ipv4.ip_unprivileged_port_start": "0"}
			},
		},
		{name: "an inet socket without its entry", files: []*fdinfo.FileEntry{noIsk}, err: "files.img: file 6 of type INETSK has no isk"},
		{
			name:  "a fanotify group without CAP_SYS_ADMIN",
			files: []*fdinfo.FileEntry{file(fdinfo.FdTypes_FANOTIFY, 7)},
			err:   "files.img: file 7 is a fanotify group (type FANOTIFY) without CAP_SYS_ADMIN",
		},
		{name: "a fanotify group with CAP_SYS_ADMIN", files: []*fdinfo.FileEntry{file(fdinfo.FdTypes_FANOTIFY, 7)}, config: add("CAP_SYS_ADMIN")},
		{
			name:  "a BPF map without CAP_BPF",
			files: []*fdinfo.FileEntry{file(fdinfo.FdTypes_BPFMAP, 8)},
			err:   "files.img: file 8 is a BPF map (type BPFMAP) without CAP_BPF or CAP_SYS_ADMIN",
		},
		{name: "a BPF map with CAP_BPF", files: []*fdinfo.FileEntry{file(fdinfo.FdTypes_BPFMAP, 8)}, config: add("CAP_BPF")},
		{
			name:  "a tun device without CAP_NET_ADMIN",
			files: []*fdinfo.FileEntry{file(fdinfo.FdTypes_TUNF, 2)},
			err:   "files.img: file 2 is a tun device (type TUNF) without CAP_NET_ADMIN",
		},
		{name: "a tun device with CAP_NET_ADMIN", files: []*fdinfo.FileEntry{file(fdinfo.FdTypes_TUNF, 2)}, config: add("CAP_NET_ADMIN")},
		{
			name:   "no capabilities in the config: runc leaves them",
			files:  []*fdinfo.FileEntry{file(fdinfo.FdTypes_PACKETSK, 3), file(fdinfo.FdTypes_TUNF, 2)},
			config: func(c *configs.Config) { c.Capabilities = nil },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			config := defaultConfig()
			if tc.config != nil {
				tc.config(config)
			}
			core := thread()
			if config.Capabilities != nil {
				// The task holds what the config grants.
				caps := capBits(config.Capabilities.Permitted)
				core.ThreadCore.Creds.CapPrm = []uint32{uint32(caps), uint32(caps >> 32)}
				core.ThreadCore.Creds.CapEff = core.ThreadCore.Creds.CapPrm
			}
			dir := images(t, core)
			var entries []proto.Message
			for _, f := range tc.files {
				entries = append(entries, f)
			}
			writeImage(t, dir.Name(), "files.img", "FILES", entries...)
			err := Restore(dir, &tc.process, config, "")
			if tc.err == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			t.Log(err)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("want an error with %q, got %v", tc.err, err)
			}
		})
	}
}

// CRIU reads the per-type images of checkpoints from before files.img;
// runc refuses them as files it does not check.
func TestCheckRestorePrivilegesOldFileImages(t *testing.T) {
	dir := images(t, thread())
	if err := Restore(dir, &Process{}, defaultConfig(), ""); err != nil {
		t.Fatalf("refused a checkpoint without files.img: %v", err)
	}
	writeImage(t, dir.Name(), "packetsk.img", "PACKETSK", file(fdinfo.FdTypes_PACKETSK, 3).Psk)
	err := Restore(dir, &Process{}, defaultConfig(), "")
	if err == nil || !strings.Contains(err.Error(), "checkpoint image packetsk.img is no image that runc checks") {
		t.Fatalf("want an error naming packetsk.img, got %v", err)
	}
	// Refused with a files.img beside it too: runc checks neither form.
	writeImage(t, dir.Name(), "files.img", "FILES", listener(1, 8080))
	if err := Restore(dir, &Process{}, defaultConfig(), ""); err == nil {
		t.Fatal("restored a checkpoint that holds packetsk.img")
	}
}
