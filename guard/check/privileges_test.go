// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/checkpoint-restore/go-criu/v8/crit/images/creds"
	criucore "github.com/checkpoint-restore/go-criu/v8/crit/images/criu-core"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/inventory"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/mnt"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pstree"
	criuseccomp "github.com/checkpoint-restore/go-criu/v8/crit/images/seccomp"
	"github.com/checkpoint-restore/go-criu/v8/magic"
	"google.golang.org/protobuf/proto"

	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"
)

// writeImage writes a CRIU image of kind magicName holding entries.
func writeImage(t *testing.T, dir, name, magicName string, entries ...proto.Message) {
	t.Helper()
	m := magic.LoadMagic().ByName
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, uint32(m["IMG_COMMON"]))
	_ = binary.Write(&b, binary.LittleEndian, uint32(m[magicName]))
	for _, e := range entries {
		p, err := proto.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		_ = binary.Write(&b, binary.LittleEndian, uint32(len(p)))
		b.Write(p)
	}
	if err := os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// defaultCaps are the capabilities a container engine grants by default.
var defaultCaps = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}

// thread is one task's only thread, as CRIU dumps a process that runs with
// the default capabilities as root.
func thread() *criucore.CoreEntry {
	caps := []uint32{uint32(capBits(defaultCaps)), 0}
	return &criucore.CoreEntry{
		Mtype: criucore.CoreEntry_X86_64.Enum(),
		Tc: &criucore.TaskCoreEntry{
			TaskState: proto.Uint32(1), ExitCode: proto.Uint32(0), Personality: proto.Uint32(0),
			Flags: proto.Uint32(0), BlkSigset: proto.Uint64(0), Comm: proto.String("engine"),
		},
		ThreadCore: &criucore.ThreadCoreEntry{
			FutexRla: proto.Uint64(0), FutexRlaLen: proto.Uint32(0),
			Creds: &creds.CredsEntry{
				Uid: proto.Uint32(0), Gid: proto.Uint32(0), Euid: proto.Uint32(0), Egid: proto.Uint32(0),
				Suid: proto.Uint32(0), Sgid: proto.Uint32(0), Fsuid: proto.Uint32(0), Fsgid: proto.Uint32(0),
				CapInh: []uint32{0, 0}, CapPrm: caps, CapEff: caps, CapBnd: caps,
				Secbits: proto.Uint32(0),
			},
		},
	}
}

// kobjIds are task 1's object ids: its namespaces are those of base,
// its user namespace is the restoring CRIU's, as a container's without
// one of its own is.
func kobjIds(base uint32) *criucore.TaskKobjIdsEntry {
	n := proto.Uint32
	return &criucore.TaskKobjIdsEntry{
		VmId: n(1), FilesId: n(1), FsId: n(1), SighandId: n(1),
		PidNsId: n(base), NetNsId: n(base + 1), IpcNsId: n(base + 2), UtsNsId: n(base + 3),
		MntNsId: n(base + 4), UserNsId: n(5), CgroupNsId: n(base + 6), TimeNsId: n(base + 7),
	}
}

// writeNamespaces writes the inventory and task 1's ids: in namespaces of
// its own, as a container's init is, unless same names types it shares
// with the restoring CRIU.
func writeNamespaces(t *testing.T, dir string, same ...string) {
	t.Helper()
	root, task := kobjIds(100), kobjIds(200)
	for _, s := range same {
		switch s {
		case "pid":
			task.PidNsId = root.PidNsId
		case "mnt":
			task.MntNsId = root.MntNsId
		case "cgroup":
			task.CgroupNsId = root.CgroupNsId
		case "net":
			task.NetNsId = root.NetNsId
		case "ipc":
			task.IpcNsId = root.IpcNsId
		case "uts":
			task.UtsNsId = root.UtsNsId
		case "time":
			task.TimeNsId = root.TimeNsId
		case "own user":
			task.UserNsId = proto.Uint32(*root.UserNsId + 1)
		}
	}
	writeImage(t, dir, "inventory.img", "INVENTORY", &inventory.InventoryEntry{ImgVersion: proto.Uint32(2), RootIds: root})
	writeImage(t, dir, "ids-1.img", "IDS", task)
	writeImage(t, dir, fmt.Sprintf("mountpoints-%d.img", task.GetMntNsId()), "MNTS", &mnt.MntEntry{
		MntId: proto.Uint32(1), ParentMntId: proto.Uint32(0), Mountpoint: proto.String("/"), Root: proto.String("/"),
		Fstype: proto.Uint32(0), RootDev: proto.Uint32(1), Flags: proto.Uint32(0), Source: proto.String("none"), Options: proto.String(""),
	})
}

func images(t *testing.T, core *criucore.CoreEntry, filters ...*criuseccomp.SeccompFilter) *os.File {
	t.Helper()
	dir := t.TempDir()
	writeNamespaces(t, dir)
	writeImage(t, dir, "pstree.img", "PSTREE", &pstree.PstreeEntry{Pid: proto.Uint32(1), Ppid: proto.Uint32(0), Pgid: proto.Uint32(1), Sid: proto.Uint32(1), Threads: []uint32{1}})
	writeImage(t, dir, "core-1.img", "CORE", core)
	if filters != nil {
		writeImage(t, dir, "seccomp.img", "SECCOMP", &criuseccomp.SeccompEntry{SeccompFilters: filters})
	}
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func defaultConfig() *configs.Config {
	c := slicesOf(defaultCaps)
	return &configs.Config{Capabilities: &configs.Capabilities{Bounding: c, Effective: c, Permitted: c}}
}

func slicesOf(s []string) []string { return append([]string(nil), s...) }

func TestCheckRestorePrivileges(t *testing.T) {
	for _, tc := range []struct {
		name    string
		core    func(*criucore.CoreEntry)
		process Process
		config  func(*configs.Config)
		err     string // empty: the restore may go on
	}{
		{name: "as dumped"},
		{
			name: "more effective capabilities",
			core: func(c *criucore.CoreEntry) {
				c.ThreadCore.Creds.CapEff = []uint32{0xffffffff, 0x1ff}
				c.ThreadCore.Creds.CapPrm = c.ThreadCore.Creds.CapEff
			},
			err: `task 1 thread 1 ("engine"): cap_prm has CAP_DAC_READ_SEARCH`,
		},
		{
			name:   "capabilities the config dropped",
			config: func(c *configs.Config) { c.Capabilities = &configs.Capabilities{} },
			err:    "cap_prm has CAP_CHOWN CAP_DAC_OVERRIDE",
		},
		{
			name: "a wider bounding set",
			core: func(c *criucore.CoreEntry) { c.ThreadCore.Creds.CapBnd = []uint32{0xffffffff, 0x1ff} },
			err:  "cap_bnd has CAP_DAC_READ_SEARCH",
		},
		{
			name: "ambient capabilities beyond permitted",
			core: func(c *criucore.CoreEntry) { c.ThreadCore.Creds.CapAmb = []uint32{1 << 21} },
			err:  "cap_amb has CAP_SYS_ADMIN, beyond the config's permitted capabilities [CAP_CHOWN",
		},
		{
			name:   "no capabilities in the config: runc leaves them",
			config: func(c *configs.Config) { c.Capabilities = nil },
		},
		{
			name:    "no capabilities in the config for another user: none are left",
			process: Process{UID: 1000, GID: 1000},
			config:  func(c *configs.Config) { c.Capabilities = nil },
			err:     "uid is 0, the config's user is 1000",
		},
		{
			name:    "root for a config's user",
			process: Process{UID: 1000, GID: 1000},
			config:  func(c *configs.Config) { c.Capabilities = &configs.Capabilities{} },
			core: func(c *criucore.CoreEntry) {
				c.ThreadCore.Creds.CapPrm, c.ThreadCore.Creds.CapEff, c.ThreadCore.Creds.CapBnd = nil, nil, nil
			},
			err: "uid is 0, the config's user is 1000",
		},
		{
			name:    "a group the config does not give",
			process: Process{UID: 0, GID: 0, AdditionalGroups: []int{10}},
			config:  func(c *configs.Config) { c.Capabilities.Permitted = []string{"CAP_SETUID"} },
			core: func(c *criucore.CoreEntry) {
				c.ThreadCore.Creds.Groups = []uint32{10, 27}
				c.ThreadCore.Creds.CapPrm, c.ThreadCore.Creds.CapEff = nil, nil
			},
			err: "supplementary group 27 is not among the config's groups [0 10]",
		},
		{
			name:   "securebits without CAP_SETPCAP",
			config: func(c *configs.Config) { c.Capabilities.Permitted = []string{"CAP_CHOWN"} },
			core: func(c *criucore.CoreEntry) {
				c.ThreadCore.Creds.Secbits = proto.Uint32(0x2f)
				c.ThreadCore.Creds.CapPrm, c.ThreadCore.Creds.CapEff = []uint32{1}, []uint32{1}
			},
			err: "securebits are 0x2f",
		},
		{
			name:   "no_new_privs off",
			config: func(c *configs.Config) { c.NoNewPrivileges = true },
			err:    "no_new_privs is off, the config sets noNewPrivileges",
		},
		{
			name:   "no_new_privs on",
			config: func(c *configs.Config) { c.NoNewPrivileges = true },
			core:   func(c *criucore.CoreEntry) { c.ThreadCore.Creds.NoNewPrivs = proto.Uint32(1) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, config := thread(), defaultConfig()
			if tc.core != nil {
				tc.core(core)
			}
			if tc.config != nil {
				tc.config(config)
			}
			err := Restore(images(t, core), &tc.process, config, "")
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

// fakeProgram stands for runc's seccomp.Program (tested in runc): the
// check compares what the images hold with whatever runc compiles.
func fakeProgram(t *testing.T, profile *configs.Seccomp) (func(*configs.Seccomp) ([]unix.SockFilter, error), []unix.SockFilter) {
	prog := []unix.SockFilter{{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 4}, {Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW}}
	return func(s *configs.Seccomp) ([]unix.SockFilter, error) {
		if s != profile {
			t.Errorf("compiled %+v, not the config's profile", s)
		}
		return prog, nil
	}, prog
}

func TestCheckRestorePrivilegesSeccomp(t *testing.T) {
	profile := &configs.Seccomp{
		DefaultAction: configs.Allow,
		Syscalls:      []*configs.Syscall{{Name: "getcwd", Action: configs.Errno}},
	}
	compile, prog := fakeProgram(t, profile)
	var spec bytes.Buffer
	_ = binary.Write(&spec, binary.NativeEndian, prog)
	other := []byte{6, 0, 0, 0, 0, 0, 0xff, 0x7f} // ret ALLOW

	filtered := func(mode, last uint32) *criucore.CoreEntry {
		c := thread()
		c.ThreadCore.SeccompMode = criucore.SeccompMode(mode).Enum()
		c.ThreadCore.SeccompFilter = proto.Uint32(last)
		return c
	}
	for _, tc := range []struct {
		name    string
		core    *criucore.CoreEntry
		filters []*criuseccomp.SeccompFilter
		err     string
	}{
		{name: "no filter", core: thread(), err: "has no seccomp filter, the config sets a seccomp profile"},
		{name: "the config's program", core: filtered(seccompModeFilter, 0), filters: []*criuseccomp.SeccompFilter{{Filter: spec.Bytes()}}},
		{
			name: "the config's program under one of the process's own",
			core: filtered(seccompModeFilter, 1),
			filters: []*criuseccomp.SeccompFilter{
				{Filter: spec.Bytes()},
				{Filter: other, Prev: proto.Uint32(0)},
			},
		},
		{
			name:    "another program",
			core:    filtered(seccompModeFilter, 0),
			filters: []*criuseccomp.SeccompFilter{{Filter: other}},
			err:     "seccomp filters do not include the program of the config's seccomp profile",
		},
		{
			name:    "a chain that loops",
			core:    filtered(seccompModeFilter, 0),
			filters: []*criuseccomp.SeccompFilter{{Filter: other, Prev: proto.Uint32(0)}},
			err:     "seccomp filter 0 is its own predecessor",
		},
		{name: "strict mode", core: filtered(seccompModeStrict, 0)},
		{
			name:    "the config's program above a loop",
			core:    filtered(seccompModeFilter, 0),
			filters: []*criuseccomp.SeccompFilter{{Filter: spec.Bytes(), Prev: proto.Uint32(1)}, {Filter: other, Prev: proto.Uint32(0)}},
			err:     "its own predecessor",
		},
		{
			name:    "flags the profile does not set",
			core:    filtered(seccompModeFilter, 0),
			filters: []*criuseccomp.SeccompFilter{{Filter: spec.Bytes(), Flags: proto.Uint32(4 | 8)}},
			err:     "a seccomp filter has flags 0xc the config's profile does not set",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			config := defaultConfig()
			config.Seccomp = profile
			err := Restore(images(t, tc.core, tc.filters...), &Process{SeccompProgram: compile}, config, "")
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

// CRIU dumps the other threads of a task whose filters are all the
// leader's with their mode disabled, and the leader's filters with TSYNC.
func TestCheckRestorePrivilegesThreadsSyncedFromTheLeader(t *testing.T) {
	profile := &configs.Seccomp{
		DefaultAction: configs.Allow,
		Syscalls:      []*configs.Syscall{{Name: "getcwd", Action: configs.Errno}},
	}
	compile, prog := fakeProgram(t, profile)
	var spec bytes.Buffer
	_ = binary.Write(&spec, binary.NativeEndian, prog)
	for _, tc := range []struct {
		name  string
		flags uint32
		above bool // the leader's chain: an allow-all filter over the profile's
		err   string
	}{
		{name: "with TSYNC", flags: 1},
		{name: "without TSYNC", err: `task 1 thread 2 ("engine"): has no seccomp filter`},
		{name: "TSYNC on a filter above the profile's only", flags: 1, above: true, err: `task 1 thread 2 ("engine"): has no seccomp filter`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			leader, other := thread(), thread()
			leader.ThreadCore.SeccompMode = criucore.SeccompMode_filter.Enum()
			leader.ThreadCore.SeccompFilter = proto.Uint32(0)
			other.Tc = nil
			writeNamespaces(t, dir)
			writeImage(t, dir, "pstree.img", "PSTREE", &pstree.PstreeEntry{Pid: proto.Uint32(1), Ppid: proto.Uint32(0), Pgid: proto.Uint32(1), Sid: proto.Uint32(1), Threads: []uint32{1, 2}})
			writeImage(t, dir, "core-1.img", "CORE", leader)
			writeImage(t, dir, "core-2.img", "CORE", other)
			filters := []*criuseccomp.SeccompFilter{{Filter: spec.Bytes(), Flags: proto.Uint32(tc.flags)}}
			if tc.above {
				filters[0].Flags = proto.Uint32(0)
				filters = append(filters, &criuseccomp.SeccompFilter{Filter: []byte{6, 0, 0, 0, 0, 0, 0xff, 0x7f}, Prev: proto.Uint32(0), Flags: proto.Uint32(tc.flags)})
				leader.ThreadCore.SeccompFilter = proto.Uint32(1)
				writeImage(t, dir, "core-1.img", "CORE", leader)
			}
			writeImage(t, dir, "seccomp.img", "SECCOMP", &criuseccomp.SeccompEntry{SeccompFilters: filters})
			f, err := os.Open(dir)
			must(t, err)
			defer f.Close()
			config := defaultConfig()
			config.Seccomp = profile
			err = Restore(f, &Process{SeccompProgram: compile}, config, "")
			wantErr(t, err, tc.err)
		})
	}
}

// CRIU dumps a zombie with a core image of its own but, in its pstree
// entry, a thread id it does not set; the zombie never runs again.
func TestCheckRestorePrivilegesSkipsZombies(t *testing.T) {
	dir := t.TempDir()
	writeNamespaces(t, dir)
	zombie := thread()
	zombie.Tc.TaskState = proto.Uint32(taskDead)
	zombie.ThreadCore.Creds.CapPrm = []uint32{0xffffffff, 0x1ff}
	writeImage(t, dir, "pstree.img", "PSTREE",
		&pstree.PstreeEntry{Pid: proto.Uint32(1), Ppid: proto.Uint32(0), Pgid: proto.Uint32(1), Sid: proto.Uint32(1), Threads: []uint32{1}},
		&pstree.PstreeEntry{Pid: proto.Uint32(24), Ppid: proto.Uint32(1), Pgid: proto.Uint32(24), Sid: proto.Uint32(24), Threads: []uint32{1117722720}})
	writeImage(t, dir, "core-1.img", "CORE", thread())
	writeImage(t, dir, "core-24.img", "CORE", zombie)
	f, err := os.Open(dir)
	must(t, err)
	defer f.Close()
	if err := Restore(f, &Process{}, defaultConfig(), ""); err != nil {
		t.Fatalf("refused: %v", err)
	}

	// The same task alive is checked, and its missing thread named.
	zombie.Tc.TaskState = proto.Uint32(1)
	writeImage(t, dir, "core-24.img", "CORE", zombie)
	err = Restore(f, &Process{}, defaultConfig(), "")
	if err == nil || !strings.Contains(err.Error(), "core-1117722720.img") {
		t.Fatalf("want an error naming core-1117722720.img, got %v", err)
	}
}

func TestCheckRestorePrivilegesNamespaces(t *testing.T) {
	for _, tc := range []struct {
		name string
		same []string
		ns   configs.Namespaces
		err  string
	}{
		{name: "new namespaces as the config's", ns: configs.Namespaces{{Type: configs.NEWPID}, {Type: configs.NEWNS}, {Type: configs.NEWNET}}},
		{name: "the host's pid namespace", same: []string{"pid"}, ns: configs.Namespaces{{Type: configs.NEWPID}}, err: "checkpoint task 1 would be restored in the host's NEWPID namespace"},
		{name: "the host's mount namespace", same: []string{"mnt"}, ns: configs.Namespaces{{Type: configs.NEWNS}}, err: "host's NEWNS namespace"},
		{name: "a namespace the config joins by path", same: []string{"pid"}, ns: configs.Namespaces{{Type: configs.NEWPID, Path: "/proc/1/ns/pid"}}},
		{name: "a new user namespace", ns: configs.Namespaces{{Type: configs.NEWUSER}}, err: "creates a user namespace"},
		{name: "a user namespace of the images' own", same: []string{"own user"}, ns: configs.Namespaces{{Type: configs.NEWPID}}, err: "ids-1.img gives task 1 a user namespace of its own (user_ns_id 6, root_ids 5)"},
		{name: "a new cgroup namespace", ns: configs.Namespaces{{Type: configs.NEWCGROUP}}},
		{name: "the host's cgroup namespace", same: []string{"cgroup"}, ns: configs.Namespaces{{Type: configs.NEWCGROUP}}, err: "host's NEWCGROUP namespace"},
		// CRIU restores utsns-N.img, ipcns-*-N.img, timens-N.img and the
		// network images into these: only ever new ones.
		{name: "the host's network namespace", same: []string{"net"}, ns: configs.Namespaces{{Type: configs.NEWNET}}, err: "host's NEWNET namespace"},
		{name: "the host's IPC namespace", same: []string{"ipc"}, ns: configs.Namespaces{{Type: configs.NEWIPC}}, err: "host's NEWIPC namespace"},
		{name: "the host's UTS namespace", same: []string{"uts"}, ns: configs.Namespaces{{Type: configs.NEWUTS}}, err: "host's NEWUTS namespace"},
		{name: "the host's time namespace", same: []string{"time"}, ns: configs.Namespaces{{Type: configs.NEWTIME}}, err: "host's NEWTIME namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := images(t, thread())
			writeNamespaces(t, dir.Name(), tc.same...)
			config := defaultConfig()
			config.Namespaces = tc.ns
			err := Restore(dir, &Process{}, config, "")
			wantErr(t, err, tc.err)
		})
	}
}

func TestCheckRestorePrivilegesBadImages(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(dir string)
		err   string
	}{
		{
			name: "a core image that is a symlink",
			spoil: func(dir string) {
				must(t, os.Rename(filepath.Join(dir, "core-1.img"), filepath.Join(dir, "real")))
				must(t, os.Symlink("real", filepath.Join(dir, "core-1.img")))
			},
			err: "core-1.img",
		},
		{
			name:  "a missing core image",
			spoil: func(dir string) { must(t, os.Remove(filepath.Join(dir, "core-1.img"))) },
			err:   "checkpoint image core-1.img",
		},
		{
			name: "an entry that states more than the file holds",
			spoil: func(dir string) {
				b, err := os.ReadFile(filepath.Join(dir, "core-1.img"))
				must(t, err)
				binary.LittleEndian.PutUint32(b[8:], 0xffffffff)
				must(t, os.WriteFile(filepath.Join(dir, "core-1.img"), b, 0o600))
			},
			err: "checkpoint image core-1.img is truncated",
		},
		{
			name: "another kind of image",
			spoil: func(dir string) {
				writeImage(t, dir, "core-1.img", "PSTREE", &pstree.PstreeEntry{Pid: proto.Uint32(1), Ppid: proto.Uint32(0), Pgid: proto.Uint32(1), Sid: proto.Uint32(1)})
			},
			err: "checkpoint image core-1.img is not a CRIU CORE image",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := images(t, thread())
			tc.spoil(dir.Name())
			err := Restore(dir, &Process{}, defaultConfig(), "")
			t.Log(err)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("want an error with %q, got %v", tc.err, err)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A process run as another user than root keeps after its exec only the
// config's ambient capabilities, where the config sets noNewPrivileges.
func TestCheckRestorePrivilegesNonRoot(t *testing.T) {
	// user gives a thread uid and gid 1000 and only the capabilities caps.
	user := func(caps ...string) func(*criucore.CoreEntry) {
		return func(c *criucore.CoreEntry) {
			cr := c.ThreadCore.Creds
			for _, id := range []**uint32{&cr.Uid, &cr.Euid, &cr.Suid, &cr.Fsuid, &cr.Gid, &cr.Egid, &cr.Sgid, &cr.Fsgid} {
				*id = proto.Uint32(1000)
			}
			set := []uint32{uint32(capBits(caps)), 0}
			cr.CapPrm, cr.CapEff, cr.CapInh, cr.CapAmb = set, set, set, set
		}
	}
	ambient := func(c *configs.Config) {
		c.Capabilities.Ambient = []string{"CAP_NET_BIND_SERVICE"}
		c.Capabilities.Inheritable = []string{"CAP_NET_BIND_SERVICE"}
	}
	for _, tc := range []struct {
		name   string
		core   func(*criucore.CoreEntry)
		config func(*configs.Config)
		nnp    bool // the config's noNewPrivileges
		err    string
	}{
		{name: "root", nnp: true, err: `task 1 thread 1 ("engine"): uid is 0, the config's user is 1000`},
		{
			name: "the default capabilities", nnp: true,
			core: user(defaultCaps...),
			err:  "cap_prm has CAP_CHOWN CAP_DAC_OVERRIDE CAP_FOWNER",
		},
		{
			name: "a capability added, not ambient", nnp: true,
			config: func(c *configs.Config) { c.Capabilities.Permitted = append(c.Capabilities.Permitted, "CAP_NET_ADMIN") },
			core:   user("CAP_NET_ADMIN"),
			err:    "cap_prm has CAP_NET_ADMIN, beyond the config's ambient capabilities []",
		},
		{name: "an ambient capability", nnp: true, config: ambient, core: user("CAP_NET_BIND_SERVICE")},
		{
			name: "an ambient capability and another", nnp: true, config: ambient,
			core: user("CAP_NET_BIND_SERVICE", "CAP_NET_RAW"),
			err:  "cap_prm has CAP_NET_RAW, beyond the config's ambient capabilities [CAP_NET_BIND_SERVICE]",
		},
		{
			name: "an ambient capability the kernel does not raise", nnp: true,
			config: func(c *configs.Config) {
				ambient(c)
				c.Capabilities.Inheritable = nil
			},
			core: user("CAP_NET_BIND_SERVICE"),
			err:  "cap_prm has CAP_NET_BIND_SERVICE, beyond the config's ambient capabilities []",
		},
		{name: "without noNewPrivileges: the permitted set", core: user(defaultCaps...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, config := thread(), defaultConfig()
			config.NoNewPrivileges = tc.nnp
			if tc.nnp {
				core.ThreadCore.Creds.NoNewPrivs = proto.Uint32(1)
			}
			if tc.core != nil {
				tc.core(core)
			}
			if tc.config != nil {
				tc.config(config)
			}
			err := Restore(images(t, core), &Process{UID: 1000, GID: 1000}, config, "")
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

// wantErr fails the test unless err is nil where want is empty, or holds
// want.
func wantErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("refused: %v", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("want an error with %q, got %v", want, err)
	}
}
