// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	criucore "github.com/checkpoint-restore/go-criu/v8/crit/images/criu-core"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/inventory"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pstree"
	criuseccomp "github.com/checkpoint-restore/go-criu/v8/crit/images/seccomp"
	"github.com/checkpoint-restore/go-criu/v8/magic"
	"github.com/moby/sys/capability"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/opencontainers/runc/libcontainer/configs"
)

// maxImageSize bounds what is read of one pstree, core or seccomp image.
// Real ones are kilobytes; the images come from wherever the checkpoint
// did, so nothing in them decides how much runc reads.
const maxImageSize = 64 << 20

// CRIU's seccomp_mode values, the kernel's SECCOMP_MODE_*.
// taskDead is CRIU's task_state of a zombie.
const taskDead = 2

const (
	seccompModeDisabled = 0
	seccompModeStrict   = 1
	seccompModeFilter   = 2
)

// grant is what the container's config gives the process it restores.
type grant struct {
	uid, gid uint32
	gids     []uint32 // gid and the additional groups
	// caps is nil when the config names no capabilities: runc then
	// leaves the process with its own, and there is nothing to compare.
	caps *configs.Capabilities
	// permitted is what the process holds after its exec; prmFrom and
	// prmNames say, for errors, which of the config's lists gives it.
	permitted  uint64
	prmFrom    string
	prmNames   []string
	inherit    uint64
	bounding   uint64
	noNewPrivs bool
	// program is the seccomp program the config loads, nil for none, and
	// filterFlags the SECCOMP_FILTER_FLAG_* a filter may be restored with.
	program     []byte
	filterFlags uint32
	// lsmProfile is the label CRIU is told to restore every task under,
	// "" for the images' own; ownLabel is runc's, which a process that the
	// config gives no label starts under.
	lsmProfile, ownLabel string
	limits               *limits
	// tmpfs is what each tmpfs mount's archive holds, by mount id.
	tmpfs map[uint32]tmpfsIndex
	// config is the container's, whose binds CRIU's by-name work may use.
	config *configs.Config
}

// Restore refuses to restore the images in dir when a task
// in them would get more than the container's config grants its process.
// lsmProfile is the --lsm-profile CRIU gets, "" for none.
//
// CRIU restores each thread's ids, capabilities, securebits, no_new_privs,
// seccomp filters and LSM label from the images, not from the config, and
// runc applies none of the config's on restore; it creates the tasks'
// files as root. The images come from the checkpoint, which may come from
// a registry; without this check they choose the restored process's
// privileges.
func Restore(dir *os.File, p *Process, config *configs.Config, lsmProfile string) error {
	g, err := grantOf(p, config)
	if err != nil {
		return err
	}
	g.lsmProfile = lsmProfile
	if lsmProfile == "" {
		g.ownLabel = ownLsmLabel()
	}
	if err := checkImageFiles(dir); err != nil {
		return fmt.Errorf("refusing to restore: %w", err)
	}
	if err := checkNetfilter(dir); err != nil {
		return fmt.Errorf("refusing to restore: %w", err)
	}
	if err := checkApparmorNamespaces(dir); err != nil {
		return fmt.Errorf("refusing to restore: %w", err)
	}
	trees, err := readImage(dir, "pstree.img", "PSTREE", &pstree.PstreeEntry{})
	if err != nil {
		return err
	}
	var filters []*criuseccomp.SeccompFilter
	if g.program != nil {
		// A checkpoint whose tasks have no filters has no seccomp image.
		entries, err := readImage(dir, "seccomp.img", "SECCOMP", &criuseccomp.SeccompEntry{})
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if len(entries) > 1 {
			return fmt.Errorf("checkpoint image seccomp.img holds %d entries, not one", len(entries))
		}
		for _, e := range entries {
			filters = e.(*criuseccomp.SeccompEntry).GetSeccompFilters()
		}
	}
	if len(trees) == 0 {
		return errors.New("checkpoint image pstree.img lists no task")
	}
	if err := checkNamespaces(dir, trees[0].(*pstree.PstreeEntry).GetPid(), config); err != nil {
		return fmt.Errorf("refusing to restore: %w", err)
	}
	tasks := make([]*pstree.PstreeEntry, len(trees))
	for i, e := range trees {
		tasks[i] = e.(*pstree.PstreeEntry)
	}
	if err := checkTaskNamespaces(dir, tasks); err != nil {
		return fmt.Errorf("refusing to restore: %w", err)
	}
	if err := checkCgroups(dir, tasks); err != nil {
		return fmt.Errorf("refusing to restore: %w", err)
	}
	if err := checkMounts(dir, tasks[0].GetPid(), config); err != nil {
		return fmt.Errorf("refusing to restore: %w", err)
	}
	if err := g.checkFiles(dir, config); err != nil {
		return err
	}
	if err := g.checkTmpfsArchives(dir, tasks[0].GetPid(), config); err != nil {
		return err
	}
	if err := g.checkRemaps(dir, tasks[0].GetPid(), config); err != nil {
		return err
	}
	files, err := filesByID(dir)
	if err != nil {
		return err
	}
	if config.Rootfs != "" && config.Namespaces.Contains(configs.NEWNS) {
		mounts, err := rootMounts(dir, tasks[0].GetPid())
		if err != nil {
			return err
		}
		if err := g.checkRootfsKinds(files, mounts, config.Rootfs); err != nil {
			return fmt.Errorf("refusing to restore: %w; checkpoint the container again from an image that holds the file", err)
		}
	}
	if err := g.checkUnixSockets(dir, tasks, files, config.Rootfs); err != nil {
		return fmt.Errorf("refusing to restore: checkpoint image files.img: %w; "+
			"checkpoint the container with its unix sockets connected among its own tasks", err)
	}
	if err := checkTree(tasks); err != nil {
		return err
	}
	if err := checkPagemaps(dir, tasks); err != nil {
		return err
	}
	if err := checkMm(dir, tasks, files); err != nil {
		return err
	}
	if err := checkFdinfo(dir, tasks, files); err != nil {
		return err
	}
	if err := checkFs(dir, tasks, files); err != nil {
		return err
	}
	if err := g.checkQueuedData(dir, files); err != nil {
		return err
	}
	ttys, err := ttyKinds(dir)
	if err != nil {
		return err
	}
	if err := checkTtyData(dir, ttys); err != nil {
		return err
	}
	if err := g.checkMemfds(dir); err != nil {
		return err
	}
	if err := checkSignals(dir, tasks); err != nil {
		return err
	}
	if err := checkTcpStreams(dir, files); err != nil {
		return err
	}
	if err := checkBpfmapData(dir, files); err != nil {
		return err
	}
	if err := g.checkFileLocks(dir, tasks, files); err != nil {
		return err
	}
	for _, e := range trees {
		task := e.(*pstree.PstreeEntry)
		leader, err := readCore(dir, task.GetPid())
		if err != nil {
			return err
		}
		oldSeccomp(leader)
		if leader.GetTc().GetTaskState() == taskDead {
			// A zombie: CRIU recreates it only to exit, and its pstree
			// entry does not name its thread.
			continue
		}
		if err := g.checkTask(dir, task.GetPid(), leader.GetTc()); err != nil {
			return fmt.Errorf("refusing to restore: checkpoint task %d (%q): %w; "+
				"restore it into a container whose config grants that, or checkpoint it again as it should run",
				task.GetPid(), leader.GetTc().GetComm(), err)
		}
		synced := tsync(leader.GetThreadCore(), filters)
		threads := task.GetThreads()
		if len(threads) == 0 {
			threads = []uint32{task.GetPid()}
		}
		for _, tid := range threads {
			core := leader
			if tid != task.GetPid() {
				if core, err = readCore(dir, tid); err != nil {
					return err
				}
				// CRIU refuses a thread's core with a task's parts.
				if core.Tc != nil || core.Ids != nil {
					return fmt.Errorf("checkpoint image core-%d.img is a thread's but holds a task's core", tid)
				}
			}
			err := g.check(core.GetThreadCore(), filters, synced && tid != task.GetPid())
			if err != nil {
				return fmt.Errorf("refusing to restore: checkpoint task %d thread %d (%q): %w; "+
					"restore it into a container whose config grants that, or checkpoint it again as it should run",
					task.GetPid(), tid, leader.GetTc().GetComm(), err)
			}
		}
	}
	return nil
}

func readCore(dir *os.File, tid uint32) (*criucore.CoreEntry, error) {
	name := fmt.Sprintf("core-%d.img", tid)
	cores, err := readImage(dir, name, "CORE", &criucore.CoreEntry{})
	if err != nil {
		return nil, err
	}
	if len(cores) != 1 {
		return nil, fmt.Errorf("checkpoint image %s holds %d entries, not one", name, len(cores))
	}
	return cores[0].(*criucore.CoreEntry), nil
}

// oldSeccomp moves a task leader's per-task seccomp fields, which images
// from before seccomp was per thread hold, into its thread core, each on
// its own, as CRIU's restore does.
func oldSeccomp(leader *criucore.CoreEntry) {
	tc, th := leader.GetTc(), leader.GetThreadCore()
	if tc == nil || th == nil {
		return
	}
	if tc.OldSeccompMode != nil {
		th.SeccompMode = tc.OldSeccompMode
	}
	if tc.OldSeccompFilter != nil {
		th.SeccompFilter = tc.OldSeccompFilter
	}
}

// checkNamespaces refuses images whose root task would be restored in the
// restoring CRIU's own namespace of a type the config creates anew: CRIU
// creates a namespace only where the root task's id differs from the
// inventory's root_ids, and otherwise leaves the task in its own, the
// host's. A new user namespace is refused, whether the config asks for
// one or the images do: CRIU would write the images' id maps, and a task
// whose credentials read 1000 could be host uid 0. The cgroup namespace
// is compared like the others.
func checkNamespaces(dir *os.File, root uint32, config *configs.Config) error {
	inv, err := readImage(dir, "inventory.img", "INVENTORY", &inventory.InventoryEntry{})
	if err != nil {
		return err
	}
	if len(inv) != 1 || inv[0].(*inventory.InventoryEntry).GetRootIds() == nil {
		return errors.New("checkpoint image inventory.img holds no root_ids")
	}
	rootIds := inv[0].(*inventory.InventoryEntry).GetRootIds()
	name := fmt.Sprintf("ids-%d.img", root)
	ids, err := readImage(dir, name, "IDS", &criucore.TaskKobjIdsEntry{})
	if err != nil {
		return err
	}
	if len(ids) != 1 {
		return fmt.Errorf("checkpoint image %s holds %d entries, not one", name, len(ids))
	}
	task := ids[0].(*criucore.TaskKobjIdsEntry)
	for _, ns := range config.Namespaces {
		if ns.Path != "" {
			continue
		}
		var own, host uint32
		switch ns.Type {
		case configs.NEWNS:
			own, host = task.GetMntNsId(), rootIds.GetMntNsId()
		case configs.NEWPID:
			own, host = task.GetPidNsId(), rootIds.GetPidNsId()
		case configs.NEWNET:
			own, host = task.GetNetNsId(), rootIds.GetNetNsId()
		case configs.NEWIPC:
			own, host = task.GetIpcNsId(), rootIds.GetIpcNsId()
		case configs.NEWUTS:
			own, host = task.GetUtsNsId(), rootIds.GetUtsNsId()
		case configs.NEWTIME:
			own, host = task.GetTimeNsId(), rootIds.GetTimeNsId()
		case configs.NEWCGROUP:
			own, host = task.GetCgroupNsId(), rootIds.GetCgroupNsId()
		case configs.NEWUSER:
			return errors.New("the config creates a user namespace, whose id maps CRIU would take from the checkpoint")
		default:
			continue
		}
		if own == host {
			return fmt.Errorf("checkpoint task %d would be restored in the host's %s namespace, the config creates a new one", root, ns.Type)
		}
	}
	if task.GetUserNsId() != rootIds.GetUserNsId() {
		return fmt.Errorf("checkpoint image %s gives task %d a user namespace of its own (user_ns_id %d, root_ids %d), "+
			"whose id maps CRIU would take from the checkpoint; the config creates none",
			name, root, task.GetUserNsId(), rootIds.GetUserNsId())
	}
	return nil
}

// tsync reports whether the leader's filters are restored with
// SECCOMP_FILTER_FLAG_TSYNC, which gives them to every thread of its task.
// CRIU dumps threads whose filters are the leader's that way, and leaves
// their own seccomp mode disabled.
func tsync(leader *criucore.ThreadCoreEntry, filters []*criuseccomp.SeccompFilter) bool {
	if leader.GetSeccompMode() != seccompModeFilter {
		return false
	}
	chain, err := filterChain(filters, leader.GetSeccompFilter())
	if err != nil {
		return false
	}
	for _, f := range chain {
		if f.GetFlags()&unix.SECCOMP_FILTER_FLAG_TSYNC == 0 {
			return false
		}
	}
	return true
}

func grantOf(p *Process, config *configs.Config) (*grant, error) {
	g := &grant{
		uid:        uint32(p.UID),
		gid:        uint32(p.GID),
		gids:       []uint32{uint32(p.GID)},
		tmpfs:      make(map[uint32]tmpfsIndex),
		config:     config,
		caps:       config.Capabilities,
		noNewPrivs: config.NoNewPrivileges,
	}
	for _, id := range p.AdditionalGroups {
		g.gids = append(g.gids, uint32(id))
	}
	if p.Capabilities != nil {
		g.caps = p.Capabilities
	}
	var err error
	if g.limits, err = limitsOf(p, config); err != nil {
		return nil, err
	}
	if p.NoNewPrivileges != nil {
		g.noNewPrivs = *p.NoNewPrivileges
	}
	if g.caps == nil && g.uid != 0 {
		// runc leaves a config without capabilities alone, and a process
		// that is not root loses them all at its exec; its bounding set
		// stays runc's.
		var all []string
		for _, c := range capability.ListKnown() {
			all = append(all, "CAP_"+strings.ToUpper(c.String()))
		}
		g.caps = &configs.Capabilities{Bounding: all}
	}
	if g.caps != nil {
		g.permitted, g.prmFrom, g.prmNames = capBits(g.caps.Permitted), "permitted", g.caps.Permitted
		g.inherit = capBits(g.caps.Inheritable)
		g.bounding = capBits(g.caps.Bounding)
		if g.uid != 0 && g.noNewPrivs {
			// A process that is not root keeps across its exec only its
			// ambient capabilities (raised only where permitted and
			// inheritable), unless the binary it runs has file
			// capabilities, which this does not credit. Without
			// no_new_privs a setuid-root binary or file capabilities
			// give it back at least its permitted set: that stays the
			// grant.
			g.permitted &= capBits(g.caps.Ambient) & g.inherit
			g.prmFrom, g.prmNames = "ambient", strings.Fields(capNames(g.permitted))
		}
	}
	if config.Seccomp != nil {
		prog, err := p.program(config.Seccomp)
		if err != nil {
			return nil, fmt.Errorf("seccomp program of the container's config: %w", err)
		}
		var b bytes.Buffer
		_ = binary.Write(&b, binary.NativeEndian, prog)
		g.program = b.Bytes()
		// TSYNC and LOG change nothing a filter allows; the others only
		// where the profile asks for them.
		g.filterFlags = unix.SECCOMP_FILTER_FLAG_TSYNC | unix.SECCOMP_FILTER_FLAG_LOG
		for _, f := range config.Seccomp.Flags {
			if f == "SECCOMP_FILTER_FLAG_SPEC_ALLOW" {
				g.filterFlags |= unix.SECCOMP_FILTER_FLAG_SPEC_ALLOW
			}
		}
		for _, c := range config.Seccomp.Syscalls {
			if c != nil && c.Action == configs.Notify {
				g.filterFlags |= unix.SECCOMP_FILTER_FLAG_NEW_LISTENER
			}
		}
	}
	return g, nil
}

func (g *grant) has(c capability.Cap) bool {
	return g.caps == nil || g.permitted&(1<<uint(c)) != 0
}

// check compares thread tc with g. synced is whether the thread gets its
// task leader's seccomp filters, already checked, on restore.
func (g *grant) check(tc *criucore.ThreadCoreEntry, filters []*criuseccomp.SeccompFilter, synced bool) error {
	cr := tc.GetCreds()
	if cr == nil {
		return errors.New("has no credentials in its core image")
	}
	if !g.has(capability.CAP_SETUID) {
		for _, f := range []struct {
			name string
			id   uint32
		}{{"uid", cr.GetUid()}, {"euid", cr.GetEuid()}, {"suid", cr.GetSuid()}, {"fsuid", cr.GetFsuid()}} {
			if f.id != g.uid {
				return fmt.Errorf("%s is %d, the config's user is %d", f.name, f.id, g.uid)
			}
		}
	}
	if !g.has(capability.CAP_SETGID) {
		for _, f := range []struct {
			name string
			id   uint32
		}{{"gid", cr.GetGid()}, {"egid", cr.GetEgid()}, {"sgid", cr.GetSgid()}, {"fsgid", cr.GetFsgid()}} {
			if !slices.Contains(g.gids, f.id) {
				return fmt.Errorf("%s is %d, the config's groups are %v", f.name, f.id, g.gids)
			}
		}
		for _, id := range cr.GetGroups() {
			if !slices.Contains(g.gids, id) {
				return fmt.Errorf("supplementary group %d is not among the config's groups %v", id, g.gids)
			}
		}
	}
	if g.caps != nil {
		for _, f := range []struct {
			name, config string
			have         []uint32
			allowed      uint64
			spec         []string
		}{
			{"cap_prm", g.prmFrom, cr.GetCapPrm(), g.permitted, g.prmNames},
			{"cap_eff", g.prmFrom, cr.GetCapEff(), g.permitted, g.prmNames},
			// A thread may copy a permitted capability to its inheritable set.
			{"cap_inh", "inheritable and " + g.prmFrom, cr.GetCapInh(), g.inherit | g.permitted, append(slices.Clone(g.caps.Inheritable), g.prmNames...)},
			{"cap_amb", g.prmFrom, cr.GetCapAmb(), g.permitted, g.prmNames},
			{"cap_bnd", "bounding", cr.GetCapBnd(), g.bounding, g.caps.Bounding},
		} {
			if extra := words(f.have) &^ f.allowed; extra != 0 {
				return fmt.Errorf("%s has %s, beyond the config's %s capabilities [%s]",
					f.name, capNames(extra), f.config, strings.Join(f.spec, " "))
			}
		}
		// Setting securebits takes CAP_SETPCAP; runc leaves them clear.
		if cr.GetSecbits() != 0 && !g.has(capability.CAP_SETPCAP) {
			return fmt.Errorf("securebits are %#x without CAP_SETPCAP among the config's %s capabilities [%s]",
				cr.GetSecbits(), g.prmFrom, strings.Join(g.prmNames, " "))
		}
	}
	if err := g.checkLsmLabel(cr.GetLsmProfile()); err != nil {
		return err
	}
	if g.noNewPrivs && cr.GetNoNewPrivs() == 0 {
		return errors.New("no_new_privs is off, the config sets noNewPrivileges")
	}
	if err := g.checkSched(tc); err != nil {
		return err
	}
	if g.program != nil {
		switch tc.GetSeccompMode() {
		case seccompModeStrict:
			// Allows less than any filter does.
		case seccompModeDisabled:
			if !synced {
				return errors.New("has no seccomp filter, the config sets a seccomp profile")
			}
		case seccompModeFilter:
			chain, err := filterChain(filters, tc.GetSeccompFilter())
			if err != nil {
				return err
			}
			found := false
			for _, f := range chain {
				if extra := f.GetFlags() &^ g.filterFlags; extra != 0 {
					return fmt.Errorf("a seccomp filter has flags %#x the config's profile does not set", extra)
				}
				found = found || bytes.Equal(f.GetFilter(), g.program)
			}
			if !found {
				return errors.New("seccomp filters do not include the program of the config's seccomp profile")
			}
		default:
			return fmt.Errorf("has seccomp mode %d, the config sets a seccomp profile", tc.GetSeccompMode())
		}
	}
	return nil
}

// filterChain returns the chain of filters that ends at index last, as
// CRIU links a thread's filters (each to its prev), refusing an index out
// of range, a loop and a program that is not whole instructions.
func filterChain(filters []*criuseccomp.SeccompFilter, last uint32) ([]*criuseccomp.SeccompFilter, error) {
	var chain []*criuseccomp.SeccompFilter
	seen := make(map[uint32]bool)
	for i := last; ; {
		if int(i) >= len(filters) {
			return nil, fmt.Errorf("seccomp filter %d is not in seccomp.img", i)
		}
		if seen[i] {
			return nil, fmt.Errorf("seccomp filter %d is its own predecessor", i)
		}
		seen[i] = true
		f := filters[i]
		if len(f.GetFilter()) == 0 || len(f.GetFilter())%8 != 0 {
			return nil, fmt.Errorf("seccomp filter %d is not a whole program", i)
		}
		chain = append(chain, f)
		if f.Prev == nil {
			return chain, nil
		}
		i = f.GetPrev()
	}
}

// readImage reads the CRIU image name in dir, which must hold entries of
// type magicName, each decoded as a copy of entry. It opens no symlink,
// reads only a regular file, and no more than maxImageSize of it.
func readImage(dir *os.File, name, magicName string, entry proto.Message) ([]proto.Message, error) {
	b, err := readImageBytes(dir, name)
	if err != nil {
		return nil, err
	}
	return decodeImage(b, name, magicName, entry)
}

// readImageBytes reads image name of dir, at most maxImageSize bytes of a
// regular file.
func readImageBytes(dir *os.File, name string) ([]byte, error) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("checkpoint image %s: %w", name, &os.PathError{Op: "open", Path: name, Err: err})
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return nil, err
	} else if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("checkpoint image %s is not a regular file", name)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxImageSize+1))
	if err != nil {
		return nil, fmt.Errorf("checkpoint image %s: %w", name, err)
	}
	if len(b) > maxImageSize {
		return nil, fmt.Errorf("checkpoint image %s is larger than %d bytes", name, maxImageSize)
	}
	return b, nil
}

// decodeImage decodes CRIU image b: its magic, then entries, each a
// 32-bit size and a protobuf message. go-criu's crit reads the same form
// but allocates whatever size an entry states.
func decodeImage(b []byte, name, magicName string, entry proto.Message) ([]proto.Message, error) {
	var out []proto.Message
	err := walkImage(b, name, magicName, func(p []byte) (int, error) {
		e := proto.Clone(entry)
		proto.Reset(e)
		if err := proto.Unmarshal(p, e); err != nil {
			return 0, err
		}
		out = append(out, e)
		return 0, nil
	})
	return out, err
}

// walkImage calls fn with each entry of CRIU image b; fn returns how many
// bytes of data follow the entry (sk-queues.img's packets).
func walkImage(b []byte, name, magicName string, fn func([]byte) (int, error)) error {
	m := magic.LoadMagic().ByName
	u32 := func() (uint32, bool) {
		if len(b) < 4 {
			return 0, false
		}
		v := binary.LittleEndian.Uint32(b)
		b = b[4:]
		return v, true
	}
	v, ok := u32()
	if ok && (uint64(v) == m["IMG_COMMON"] || uint64(v) == m["IMG_SERVICE"]) {
		v, ok = u32()
	}
	if !ok || uint64(v) != m[magicName] {
		return fmt.Errorf("checkpoint image %s is not a CRIU %s image", name, magicName)
	}
	for len(b) > 0 {
		size, ok := u32()
		if !ok || uint64(size) > uint64(len(b)) {
			return fmt.Errorf("checkpoint image %s is truncated", name)
		}
		data, err := fn(b[:size])
		if err != nil {
			return fmt.Errorf("checkpoint image %s: %w", name, err)
		}
		b = b[size:]
		if data < 0 || data > len(b) {
			return fmt.Errorf("checkpoint image %s is truncated", name)
		}
		b = b[data:]
	}
	return nil
}

// capBits returns the capabilities named (CAP_*) as a bit set; names this
// runc does not know are left out, as runc leaves them out when it applies
// a config.
func capBits(names []string) uint64 {
	var bits uint64
	for _, c := range capability.ListKnown() {
		if slices.Contains(names, "CAP_"+strings.ToUpper(c.String())) {
			bits |= 1 << uint(c)
		}
	}
	return bits
}

// words joins CRIU's 32-bit capability words into one set.
func words(w []uint32) uint64 {
	var bits uint64
	for i, v := range w {
		if i < 2 {
			bits |= uint64(v) << (32 * i)
		} else if v != 0 {
			bits |= 1 << 63 // a capability beyond 63: no config grants it
		}
	}
	return bits
}

func capNames(bits uint64) string {
	var names []string
	for i := range 64 {
		if bits&(1<<i) == 0 {
			continue
		}
		names = append(names, "CAP_"+strings.ToUpper(capability.Cap(i).String()))
	}
	return strings.Join(names, " ")
}
