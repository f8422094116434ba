// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	criucore "github.com/checkpoint-restore/go-criu/v8/crit/images/criu-core"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/mnt"
	"golang.org/x/sys/unix"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer/configs"
)

// mountFlags are the mount flags a restored mount must keep where the
// config sets them.
const mountFlags = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC

// configFstypes are the filesystems a restore may mount anew, each at a
// destination where the config mounts that type.
var configFstypes = map[string][]mnt.Fstype{
	"proc":    {mnt.Fstype_PROC},
	"sysfs":   {mnt.Fstype_SYSFS},
	"tmpfs":   {mnt.Fstype_TMPFS},
	"devpts":  {mnt.Fstype_DEVPTS},
	"mqueue":  {mnt.Fstype_MQUEUE},
	"cgroup2": {mnt.Fstype_CGROUP2},
	// cgroup v2, or v1's tmpfs that holds a mount per controller.
	"cgroup": {mnt.Fstype_CGROUP2, mnt.Fstype_TMPFS},
}

// mountRules is what the config allows a mount image to hold.
type mountRules struct {
	dests    map[string]*configs.Mount // the config's mounts by destination
	external map[string]*configs.Mount // runc's external keys: binds, v1 cgroup binds, devices
	masked   []string
	readonly []string
	rootRO   bool
}

// checkMounts refuses a mount image that mounts more than the config.
//
// CRIU mounts what mountpoints-N.img lists, as root: a mount that is not
// a bind of an external mount goes to mount(2) with the image's source,
// type and flags (a block device, binfmt_misc, a second proc whose
// /proc/sys is writable), and an external bind is remounted with the
// image's flags, so a mount the config makes read-only comes back
// read-write. runc does not apply maskedPaths and readonlyPaths on
// restore: the images carry them or not.
//
// Allowed are the root; external binds at the destination whose key they
// name, with at least the config's flags; proc, sysfs, tmpfs, devpts,
// mqueue and cgroup at destinations where the config mounts that type,
// with its flags; tmpfs anywhere; and the masks and read-only binds of the
// config's masked and read-only paths. Nothing but another external bind
// is mounted inside an external bind. Each of those paths that exists on this
// host must be masked or read-only in the images.
func checkMounts(dir *os.File, root uint32, config *configs.Config) error {
	if !config.Namespaces.Contains(configs.NEWNS) || config.Namespaces.PathOf(configs.NEWNS) != "" {
		return nil // CRIU restores no mount namespace
	}
	name := fmt.Sprintf("ids-%d.img", root)
	ids, err := readImage(dir, name, "IDS", &criucore.TaskKobjIdsEntry{})
	if err != nil {
		return err
	}
	if len(ids) != 1 {
		return fmt.Errorf("checkpoint image %s holds %d entries, not one", name, len(ids))
	}
	name = fmt.Sprintf("mountpoints-%d.img", ids[0].(*criucore.TaskKobjIdsEntry).GetMntNsId())
	entries, err := readImage(dir, name, "MNTS", &mnt.MntEntry{})
	if err != nil {
		return err
	}
	r, err := rulesOf(config)
	if err != nil {
		return err
	}
	mounts := make([]*mnt.MntEntry, len(entries))
	for i, e := range entries {
		mounts[i] = e.(*mnt.MntEntry)
	}
	if err := r.check(mounts); err != nil {
		return fmt.Errorf("checkpoint image %s: %w", name, err)
	}
	return nil
}

func rulesOf(config *configs.Config) (*mountRules, error) {
	r := &mountRules{
		dests:    make(map[string]*configs.Mount),
		external: make(map[string]*configs.Mount),
		rootRO:   config.Readonlyfs,
	}
	for _, p := range config.MaskPaths {
		r.masked = append(r.masked, path.Clean(p))
	}
	for _, p := range config.ReadonlyPaths {
		r.readonly = append(r.readonly, path.Clean(p))
	}
	cgroupns := config.Namespaces.Contains(configs.NEWCGROUP)
	// The same keys Restore hands CRIU.
	for _, m := range config.Mounts {
		dest := path.Clean("/" + m.Destination)
		r.dests[dest] = m
		switch m.Device {
		case "bind":
			r.external[dest] = m
		case "cgroup":
			if cgroups.IsCgroup2UnifiedMode() || cgroupns {
				continue
			}
			hier, err := cgroups.GetCgroupMounts(false)
			if err != nil {
				return nil, err
			}
			// runc binds each v1 hierarchy below the cgroup mount, by
			// the hierarchy's folder name, with the mount's flags.
			for _, h := range hier {
				dest := path.Join("/", m.Destination, path.Base(h.Mountpoint))
				r.external[dest] = &configs.Mount{Destination: dest, Flags: unix.MS_BIND | unix.MS_REC | m.Flags}
			}
		}
	}
	for _, d := range config.Devices {
		r.external[path.Clean("/"+d.Path)] = &configs.Mount{Destination: d.Path}
	}
	return r, nil
}

func (r *mountRules) check(mounts []*mnt.MntEntry) error {
	byID := make(map[uint32]*mnt.MntEntry)
	at := make(map[string]*mnt.MntEntry)
	for _, m := range mounts {
		mp := m.GetMountpoint()
		if !clean(mp) {
			return fmt.Errorf("mount %d: mountpoint %q is not a clean absolute path", m.GetMntId(), mp)
		}
		if !clean(m.GetRoot()) {
			return fmt.Errorf("mount %d at %s: root %q is not a clean absolute path", m.GetMntId(), mp, m.GetRoot())
		}
		if other := at[mp]; other != nil {
			// A second mount would cover the first, a mask included.
			return fmt.Errorf("mounts %d and %d are both at %s", other.GetMntId(), m.GetMntId(), mp)
		}
		at[mp] = m
		byID[m.GetMntId()] = m
	}
	var root *mnt.MntEntry
	for _, m := range mounts {
		p := byID[m.GetParentMntId()]
		if p == nil {
			if root != nil {
				return fmt.Errorf("mounts %d and %d both have no parent in the image", root.GetMntId(), m.GetMntId())
			}
			root = m
			continue
		}
		if !under(m.GetMountpoint(), p.GetMountpoint()) || m.GetMountpoint() == p.GetMountpoint() {
			return fmt.Errorf("mount %d at %s is not below its parent %d at %s", m.GetMntId(), m.GetMountpoint(), p.GetMntId(), p.GetMountpoint())
		}
		if external(p) && !external(m) {
			// CRIU would make its mountpoint in the host's folder.
			return fmt.Errorf("mount %d at %s is inside the external bind at %s", m.GetMntId(), m.GetMountpoint(), p.GetMountpoint())
		}
	}
	if root == nil || root.GetMountpoint() != "/" {
		return errors.New("holds no root mount at /")
	}
	if r.rootRO && flagsOf(root)&unix.MS_RDONLY == 0 {
		return errors.New("root mount at / is read-write, the config's root is read-only")
	}
	for _, m := range mounts {
		if m == root {
			continue
		}
		if err := r.allow(m); err != nil {
			return fmt.Errorf("mount %d at %s (fstype %s, root %s): %w", m.GetMntId(), m.GetMountpoint(), mnt.Fstype(m.GetFstype()), m.GetRoot(), err)
		}
	}
	for _, p := range append(slices.Clone(r.masked), r.readonly...) {
		if at[p] != nil || !(under(p, "/proc") || under(p, "/sys")) {
			continue
		}
		// runc skips a path that does not exist; one that exists here
		// would be left open by a restore.
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("does not mask %s, which the config masks or makes read-only", p)
		}
	}
	return nil
}

// allow checks one mount that is not the root.
func (r *mountRules) allow(m *mnt.MntEntry) error {
	mp, fl := m.GetMountpoint(), flagsOf(m)
	if external(m) {
		key := m.GetExtKey()
		if key == "/dev/null" && slices.Contains(r.masked, mp) {
			return nil // a masked file
		}
		c := r.external[path.Clean("/"+key)]
		if c == nil || path.Clean("/"+key) != mp {
			return fmt.Errorf("external mount %q is not one the config binds at %s", key, mp)
		}
		return wantFlags(fl, c.Flags)
	}
	fstype := mnt.Fstype(m.GetFstype())
	switch {
	case slices.Contains(r.readonly, mp):
		if !pseudoFS(fstype) {
			return errors.New("a read-only path of the config must be a bind of proc, sysfs or tmpfs")
		}
		return wantFlags(fl, unix.MS_RDONLY)
	case slices.Contains(r.masked, mp):
		if fstype != mnt.Fstype_TMPFS || m.GetRoot() != "/" {
			return errors.New("a masked path of the config must be masked by an empty tmpfs")
		}
		return wantFlags(fl, unix.MS_RDONLY)
	}
	c := r.dests[mp]
	if fstype == mnt.Fstype_TMPFS {
		// A tmpfs holds only what the images put in it, which they
		// could as well put in the rootfs: allowed anywhere, with the
		// config's flags where the config mounts something there. CDI
		// hooks make some (nvidia-cdi-hook's params file over
		// /proc/driver/nvidia/params, and the tmpfs it comes from);
		// podman binds /dev/shm where nerdctl mounts a tmpfs.
		switch {
		case c == nil:
			return nil
		case c.Device == "cgroup":
			// runc leaves cgroup v1's tmpfs writable; the
			// controllers' mounts in it get the config's flags.
			return wantFlags(fl, c.Flags&^unix.MS_RDONLY)
		}
		return wantFlags(fl, c.Flags)
	}
	if m.GetRoot() != "/" {
		return errors.New("a bind mount that is neither external, of a tmpfs, nor one of the config's read-only paths")
	}
	if c != nil && slices.Contains(configFstypes[c.Device], fstype) {
		return wantFlags(fl, c.Flags)
	}
	// cgroup v1 in a cgroup namespace: a mount per controller below the
	// config's cgroup mount.
	if c := r.dests[path.Dir(mp)]; c != nil && c.Device == "cgroup" && fstype == mnt.Fstype_CGROUP {
		return wantFlags(fl, c.Flags)
	}
	return errors.New("the config mounts no such filesystem there")
}

func pseudoFS(t mnt.Fstype) bool {
	switch t {
	case mnt.Fstype_PROC, mnt.Fstype_SYSFS, mnt.Fstype_TMPFS:
		return true
	}
	return false
}

func wantFlags(have uint32, config int) error {
	if missing := uint32(config) & mountFlags &^ have; missing != 0 {
		return fmt.Errorf("lacks %s, which the config sets", flagNames(missing))
	}
	return nil
}

func external(m *mnt.MntEntry) bool { return m.GetExtKey() != "" || m.GetExtMount() }

func flagsOf(m *mnt.MntEntry) uint32 { return m.GetFlags() | m.GetSbFlags() }

func flagNames(f uint32) string {
	var s []string
	for _, n := range []struct {
		bit  uint32
		name string
	}{{unix.MS_RDONLY, "ro"}, {unix.MS_NOSUID, "nosuid"}, {unix.MS_NODEV, "nodev"}, {unix.MS_NOEXEC, "noexec"}} {
		if f&n.bit != 0 {
			s = append(s, n.name)
		}
	}
	return strings.Join(s, ",")
}

func clean(p string) bool { return strings.HasPrefix(p, "/") && path.Clean(p) == p }

// under reports whether p is dir or below it.
func under(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}
