// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

// Package jail starts a restore's CRIU in a mount namespace that holds
// only the container, its images, the config's bind sources and CRIU's
// own files: whatever the checks miss, the host's other files are not
// there to name.
package jail

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	criurpc "github.com/checkpoint-restore/go-criu/v8/rpc"
	"github.com/moby/sys/mountinfo"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// CRIU restores as root, and some of what it makes or opens is named by the
// images (ghost and link-remap files, unix socket names, FIFOs). A name that
// climbs out of the container's root with ".." or a symlink reaches whatever
// CRIU's mount namespace holds. A restoring CRIU therefore runs in a mount
// namespace of its own whose root is an empty tmpfs holding only what CRIU
// and the programs it runs need; the rest of the host is absent there.

type jailKind int

// In this order at one depth: a bind at a path replaces a link there, and
// a link is made only where nothing is.
const (
	jailTmpfs jailKind = iota
	jailProc
	jailDevpts
	jailBind
	jailLink
)

// jailMount is one thing of the jail, at dst (absolute and clean).
type jailMount struct {
	kind  jailKind
	dst   string
	src   string  // bind: the host path; link: the link's target
	ro    bool    // bind: read-only, recursively
	dir   bool    // bind: the source is a directory
	flags uintptr // tmpfs, proc, devpts
	data  string
	fd    int // bind: the source's mount tree, cloned before the jail hides it
}

// criuJail is the content of the mount namespace a restoring CRIU runs in.
type criuJail struct {
	mounts []*jailMount
}

// jailDevices are the host's device nodes any restore may need (tun for
// CRIU's probe of the kernel's features), added where present, with the
// NVIDIA nodes that the CUDA plugin's cuda-checkpoint opens.
var jailDevices = []string{"null", "zero", "full", "random", "urandom", "tty", "net/tun"}

// jailSystemDirs hold the libraries, programs and configuration CRIU and
// what it runs read (ld.so.cache, /etc/criu, iptables' alternatives, the
// GPU driver's libraries); they are bound read-only, and where one is a
// symlink (merged /usr) it is copied as one.
var jailSystemDirs = []string{"/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// newCriuJail returns a jail holding what any restore needs.
func newCriuJail() (*criuJail, error) {
	j := &criuJail{}
	const nosuid = unix.MS_NOSUID | unix.MS_NODEV
	j.add(&jailMount{kind: jailTmpfs, dst: "/", flags: nosuid | unix.MS_NOEXEC, data: "mode=755,size=1m"})
	// CRIU makes its mount yard, a proc of the restored tasks and the
	// kerndat cache in /tmp and /run: they start empty.
	j.add(&jailMount{kind: jailTmpfs, dst: "/tmp", flags: nosuid, data: "mode=1777"})
	j.add(&jailMount{kind: jailTmpfs, dst: "/run", flags: nosuid, data: "mode=755"})
	// CRIU writes /proc/sys/kernel/ns_last_pid and the tasks' /proc files.
	j.add(&jailMount{kind: jailProc, dst: "/proc", flags: nosuid | unix.MS_NOEXEC})
	// The CUDA plugin reads /sys/bus/pci and /sys/devices; nothing of a
	// restore writes there (runc has placed CRIU in the cgroups).
	if err := j.bind("/sys", true, false); err != nil {
		return nil, err
	}
	j.add(&jailMount{kind: jailTmpfs, dst: "/dev", flags: unix.MS_NOSUID | unix.MS_NOEXEC, data: "mode=755,size=64k"})
	j.add(&jailMount{kind: jailTmpfs, dst: "/dev/shm", flags: nosuid | unix.MS_NOEXEC, data: "mode=1777"})
	// A pty of the jail's own, never one of the host's.
	j.add(&jailMount{kind: jailDevpts, dst: "/dev/pts", flags: unix.MS_NOSUID | unix.MS_NOEXEC, data: "newinstance,ptmxmode=0666,mode=0620"})
	j.add(&jailMount{kind: jailLink, dst: "/dev/ptmx", src: "pts/ptmx"})
	j.add(&jailMount{kind: jailLink, dst: "/dev/fd", src: "/proc/self/fd"})
	for i, n := range []string{"stdin", "stdout", "stderr"} {
		j.add(&jailMount{kind: jailLink, dst: "/dev/" + n, src: "/proc/self/fd/" + strconv.Itoa(i)})
	}
	for _, n := range jailDevices {
		if err := j.bind("/dev/"+n, false, true); err != nil {
			return nil, err
		}
	}
	gpus, _ := filepath.Glob("/dev/nvidia*") // nvidiactl, nvidia-uvm, nvidiaN, nvidia-caps/
	for _, n := range gpus {
		if err := j.bind(n, false, true); err != nil {
			return nil, err
		}
	}
	for _, d := range jailSystemDirs {
		fi, err := os.Lstat(d)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("%s: %w", d, err)
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(d)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", d, err)
			}
			j.add(&jailMount{kind: jailLink, dst: d, src: target})
		default:
			if err := j.bind(d, true, false); err != nil {
				return nil, err
			}
		}
	}
	return j, nil
}

// restoreJail returns the jail for CRIU to run req in: besides what any
// restore needs, what runc names to CRIU by host path.
func restoreJail(req *criurpc.CriuReq, dirs Dirs, criuPath string) (*criuJail, error) {
	j, err := newCriuJail()
	if err != nil {
		return nil, err
	}
	// The container's root (criu-root, a mount below the state dir), the
	// images and the work dir, as runc knows them.
	for _, p := range []string{dirs.State, dirs.Images, dirs.Work} {
		if p == "" || detachedDir(p) {
			continue
		}
		if err := j.bind(absPath(p), false, false); err != nil {
			return nil, err
		}
	}
	// CRIU binds the sources of external mounts by their host paths: the
	// config's binds, cgroup v1 hierarchies (in the jail's /sys already),
	// devices. Read-only: CRIU gives each bind the images' flags. Where the
	// config binds one of the jail's own folders, the host's takes its
	// place as it is (CRIU's scratch in /tmp goes there then). Those that
	// do not exist need not (the images name the ones CRIU uses).
	for _, m := range req.GetOpts().GetExtMnt() {
		v := filepath.Clean(m.GetVal())
		if under(v, "/sys") || under(v, "/proc") {
			continue
		}
		own := v == "/tmp" || v == "/run" || v == "/dev" || v == "/dev/shm"
		if err := j.bind(m.GetVal(), !own, true); err != nil {
			return nil, err
		}
	}
	for _, f := range []string{req.GetOpts().GetConfigFile(), os.Getenv("CRIU_CONFIG_FILE")} {
		if f != "" {
			if err := j.bind(f, true, true); err != nil {
				return nil, err
			}
		}
	}
	// CRIU itself, its plugins (PREFIX/lib/criu beside PREFIX/bin/criu, or
	// CRIU_LIBS_DIR), and what it execs by name: tar, iptables-restore,
	// ip, cuda-checkpoint.
	ro := filepath.SplitList(os.Getenv("PATH"))
	if exe, err := filepath.EvalSymlinks(criuPath); err == nil {
		ro = append(ro, filepath.Dir(criuPath), filepath.Dir(exe), filepath.Join(filepath.Dir(exe), "..", "lib", "criu"))
	}
	if d := os.Getenv("CRIU_LIBS_DIR"); d != "" {
		ro = append(ro, d)
	}
	for _, p := range ro {
		if filepath.IsAbs(p) {
			if err := j.bind(p, true, true); err != nil {
				return nil, err
			}
		}
	}
	return j, nil
}

// bind adds the host path src to the jail, at its own path with symlinks
// resolved, and where src itself differs, a link to it. A missing src is
// an error unless optional.
func (j *criuJail) bind(src string, ro, optional bool) error {
	if !filepath.IsAbs(src) {
		return fmt.Errorf("bind %q: not an absolute path", src)
	}
	real, err := filepath.EvalSymlinks(src)
	if err == nil && real == "/" {
		return fmt.Errorf("bind %s: the host's root cannot be held in CRIU's mount namespace", src)
	}
	if err == nil {
		var fi os.FileInfo
		if fi, err = os.Stat(real); err == nil {
			j.add(&jailMount{kind: jailBind, dst: real, src: real, ro: ro, dir: fi.IsDir()})
			if src = filepath.Clean(src); src != real {
				j.add(&jailMount{kind: jailLink, dst: src, src: real})
			}
			return nil
		}
	}
	if optional && errors.Is(err, os.ErrNotExist) {
		logrus.Debugf("CRIU's mount namespace: %s does not exist, not bound", src)
		return nil
	}
	return fmt.Errorf("bind %s: %w", src, err)
}

// add adds m, merging it with what is at its place already: one bind of a
// path, writable where any asks for it so; a bind over a link.
func (j *criuJail) add(m *jailMount) {
	for i, o := range j.mounts {
		if o.dst != m.dst {
			continue
		}
		switch {
		case o.kind == jailBind && m.kind == jailBind:
			o.ro = o.ro && m.ro
			return
		case o.kind == jailLink && m.kind == jailBind:
			j.mounts[i] = m
			return
		case m.kind == jailLink:
			return
		}
	}
	j.mounts = append(j.mounts, m)
}

func (j *criuJail) String() string {
	var b strings.Builder
	for _, m := range j.mounts {
		switch m.kind {
		case jailTmpfs:
			fmt.Fprintf(&b, " %s(tmpfs)", m.dst)
		case jailProc:
			fmt.Fprintf(&b, " %s(proc)", m.dst)
		case jailDevpts:
			fmt.Fprintf(&b, " %s(devpts)", m.dst)
		case jailBind:
			if m.ro {
				fmt.Fprintf(&b, " %s(ro)", m.dst)
			} else {
				fmt.Fprintf(&b, " %s", m.dst)
			}
		case jailLink:
			fmt.Fprintf(&b, " %s->%s", m.dst, m.src)
		}
	}
	return strings.TrimSpace(b.String())
}

// start starts cmd in a new mount namespace holding the jail. Namespaces
// are a thread's: a goroutine locked to its thread unshares, builds the jail,
// pivots into it and forks cmd, which inherits that thread's namespace and
// root. The thread is never unlocked, so it runs nothing else of runc and
// ends with the goroutine; runc's other threads keep the host's namespace.
// inJail, where not nil, runs in the jail before cmd starts.
func (j *criuJail) start(cmd *exec.Cmd, inJail func() error) error {
	errc := make(chan error, 1)
	go j.lockAndEnter(cmd, inJail, errc)
	return <-errc
}

func (j *criuJail) lockAndEnter(cmd *exec.Cmd, inJail func() error, errc chan<- error) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// Go parks its main thread for good, rather than ending it, when
		// its goroutine ends locked, and /proc/self is that thread's (runc
		// reads /proc/self/mountinfo): enter from another thread, holding
		// this one meanwhile so that the other goroutine cannot run on it.
		done := make(chan struct{})
		go func() {
			defer close(done)
			j.lockAndEnter(cmd, inJail, errc)
		}()
		<-done
		runtime.UnlockOSThread()
		return
	}
	errc <- j.enter(cmd, inJail)
}

func (j *criuJail) enter(cmd *exec.Cmd, inJail func() error) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return os.NewSyscallError("unshare(CLONE_NEWNS)", err)
	}
	// Nothing done here reaches the host's namespace, nor comes from it.
	if err := unix.Mount("", "/", "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		return &os.PathError{Op: "make / rprivate", Path: "/", Err: err}
	}
	// Every source is cloned first: the jail's root is then mounted on
	// /tmp, which may hold some of them.
	if err := j.build("/tmp"); err != nil {
		return err
	}
	if inJail != nil {
		if err := inJail(); err != nil {
			return err
		}
	}
	return cmd.Start()
}

// build builds the jail at the directory at, then makes it this thread's
// root.
func (j *criuJail) build(at string) (retErr error) {
	depth := func(p string) int {
		if p == "/" {
			return 0
		}
		return strings.Count(p, "/")
	}
	// Parents first; at one place, in the order of their kinds.
	slices.SortStableFunc(j.mounts, func(a, b *jailMount) int {
		if d := depth(a.dst) - depth(b.dst); d != 0 {
			return d
		}
		return int(a.kind) - int(b.kind)
	})
	for _, m := range j.mounts {
		m.fd = -1
	}
	defer func() {
		for _, m := range j.mounts {
			if m.fd >= 0 {
				_ = unix.Close(m.fd)
			}
		}
	}()
	for _, m := range j.mounts {
		if m.kind != jailBind {
			continue
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, m.src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return fmt.Errorf("bind %s: open_tree: %w", m.src, err)
		}
		m.fd = fd
		if m.ro {
			attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
			if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
				return fmt.Errorf("bind %s read-only: mount_setattr: %w", m.src, err)
			}
		}
	}
	if len(j.mounts) == 0 || j.mounts[0].dst != "/" || j.mounts[0].kind != jailTmpfs {
		return errors.New("the jail has no root tmpfs")
	}
	r := j.mounts[0]
	if err := unix.Mount("tmpfs", at, "tmpfs", r.flags, r.data); err != nil {
		return &os.PathError{Op: "mount the jail's root tmpfs", Path: at, Err: err}
	}
	root, err := os.OpenFile(at, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer root.Close()
	// The jail's own tmpfs mounts, in which mountpoints may be made; below
	// a bind they must exist on the host.
	ours := map[uint64]bool{}
	if err := addMountID(ours, int(root.Fd())); err != nil {
		return err
	}
	var readonly []string // the jail's own mounts, read-only once built
	for _, m := range j.mounts[1:] {
		if err := j.place(root, m, ours); err != nil {
			return fmt.Errorf("%s at %s: %w", kindName(m), m.dst, err)
		}
		if m.kind == jailTmpfs && m.dst == "/dev" {
			readonly = append(readonly, "dev")
		}
	}
	setRO := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
	for _, p := range readonly {
		if err := unix.MountSetattr(int(root.Fd()), p, unix.AT_SYMLINK_NOFOLLOW, setRO); err != nil {
			return fmt.Errorf("make /%s read-only: %w", p, err)
		}
	}
	if err := unix.MountSetattr(int(root.Fd()), "", unix.AT_EMPTY_PATH, setRO); err != nil {
		return fmt.Errorf("make the jail's root read-only: %w", err)
	}
	// The old root stacks on the new one and is detached: only the jail
	// remains in this namespace.
	if err := unix.Fchdir(int(root.Fd())); err != nil {
		return os.NewSyscallError("fchdir", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return os.NewSyscallError("pivot_root", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return os.NewSyscallError("detach the old root", err)
	}
	return os.NewSyscallError("chdir", unix.Chdir("/"))
}

func kindName(m *jailMount) string {
	return [...]string{"tmpfs", "proc", "devpts", "bind " + m.src, "link to " + m.src}[m.kind]
}

// place makes m's mountpoint below root and mounts m there.
func (j *criuJail) place(root *os.File, m *jailMount, ours map[uint64]bool) error {
	rel := strings.TrimPrefix(m.dst, "/")
	parent, name := filepath.Split(rel)
	dir, err := openMountpoint(root, strings.TrimSuffix(parent, "/"), ours)
	if m.kind == jailLink {
		// Made only on the jail's own tmpfs, where nothing is yet: a bound
		// folder shows the host's own entries and is never written to.
		if err != nil {
			logrus.Debugf("CRIU's mount namespace: no link at %s: %v", m.dst, err)
			return nil
		}
		defer dir.Close()
		if !onMount(ours, int(dir.Fd())) {
			return nil
		}
		if err := unix.Symlinkat(m.src, int(dir.Fd()), name); err != nil && !errors.Is(err, unix.EEXIST) {
			return os.NewSyscallError("symlinkat", err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	defer dir.Close()
	mp, err := openEntry(dir, name)
	if errors.Is(err, unix.ENOENT) {
		if !onMount(ours, int(dir.Fd())) {
			return fmt.Errorf("%s is missing below a bound folder", m.dst)
		}
		if m.kind != jailBind || m.dir {
			err = unix.Mkdirat(int(dir.Fd()), name, 0o755)
		} else {
			var fd int
			if fd, err = unix.Openat(int(dir.Fd()), name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644); err == nil {
				_ = unix.Close(fd)
			}
		}
		if err != nil {
			return fmt.Errorf("make the mountpoint: %w", err)
		}
		mp, err = openEntry(dir, name)
	}
	if err != nil {
		return err
	}
	defer mp.Close()
	switch m.kind {
	case jailBind:
		err = unix.MoveMount(m.fd, "", int(mp.Fd()), "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
		if err != nil {
			return os.NewSyscallError("move_mount", err)
		}
		_ = unix.Close(m.fd)
		m.fd = -1
		return nil
	default:
		fstype := [...]string{jailTmpfs: "tmpfs", jailProc: "proc", jailDevpts: "devpts"}[m.kind]
		target := "/proc/self/fd/" + strconv.Itoa(int(mp.Fd()))
		if err := unix.Mount(fstype, target, fstype, m.flags, m.data); err != nil {
			return os.NewSyscallError("mount", err)
		}
		if m.kind != jailTmpfs {
			return nil
		}
		top, err := openEntry(dir, name)
		if err != nil {
			return err
		}
		defer top.Close()
		return addMountID(ours, int(top.Fd()))
	}
}

// openEntry opens name in dir as a mountpoint (or the mount on it), never
// through a symlink.
func openEntry(dir *os.File, name string) (*os.File, error) {
	fd, err := unix.Openat2(int(dir.Fd()), name, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		f.Close()
		return nil, fmt.Errorf("%s is a symlink", name)
	}
	return f, nil
}

// openMountpoint opens the folder rel below root, making the missing ones
// where they would be on the jail's own tmpfs.
func openMountpoint(root *os.File, rel string, ours map[uint64]bool) (*os.File, error) {
	cur, err := openEntry(root, ".")
	if err != nil {
		return nil, err
	}
	if rel == "" {
		return cur, nil
	}
	for _, name := range strings.Split(rel, "/") {
		next, err := openEntry(cur, name)
		if errors.Is(err, unix.ENOENT) {
			if !onMount(ours, int(cur.Fd())) {
				cur.Close()
				return nil, fmt.Errorf("/%s is missing below a bound folder", rel)
			}
			if err = unix.Mkdirat(int(cur.Fd()), name, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = openEntry(cur, name)
			}
		}
		cur.Close()
		if err != nil {
			return nil, err
		}
		cur = next
	}
	return cur, nil
}

// detachedDir reports whether p is a folder on a mount that is in no
// mount namespace's tree, runc's included.
func detachedDir(p string) bool {
	if p == "" {
		return false
	}
	fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	id, err := mountID(fd)
	if err != nil {
		return false
	}
	mounts, err := mountinfo.GetMounts(func(m *mountinfo.Info) (bool, bool) {
		return uint64(m.ID) != id, uint64(m.ID) == id
	})
	return err == nil && len(mounts) == 0
}

func mountID(fd int) (uint64, error) {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &stx); err != nil {
		return 0, os.NewSyscallError("statx", err)
	}
	return stx.Mnt_id, nil
}

func addMountID(ids map[uint64]bool, fd int) error {
	id, err := mountID(fd)
	if err == nil {
		ids[id] = true
	}
	return err
}

func onMount(ids map[uint64]bool, fd int) bool {
	id, err := mountID(fd)
	return err == nil && ids[id]
}

// Dirs are the folders runc names to CRIU by host path for a restore.
type Dirs struct {
	State  string // runc's state dir of the container, which holds criu-root
	Images string // the CRIU images
	Work   string // CRIU's work dir (its logs)
}

// StartCRIU starts cmd, CRIU for the restore req, in its jail. The
// descriptors it returns are to be closed once CRIU is done.
func StartCRIU(cmd *exec.Cmd, req *criurpc.CriuReq, dirs Dirs) ([]*os.File, error) {
	if cmd.Err != nil {
		return nil, cmd.Err
	}
	j, err := restoreJail(req, dirs, cmd.Path)
	if err != nil {
		return nil, fmt.Errorf("restore: CRIU's mount namespace: %w", err)
	}
	logrus.Debugf("CRIU's mount namespace holds: %s", j)
	// CRIU opens the images and work dirs as /proc/RUNC/fd/N. runc's own
	// descriptors are of the host's mounts, from which ".." climbs to the
	// host's root; these are of the jail's binds.
	var files []*os.File
	fds := []struct {
		path string
		fd   **int32
	}{{dirs.Images, &req.Opts.ImagesDirFd}, {dirs.Work, &req.Opts.WorkDirFd}}
	for i := range fds {
		// Where the jail binds them; the jail's thread has another root
		// and working directory. A folder on a mount of no namespace (the
		// shim's memory tmpfs of decoded pages, /proc/PID/fd/N) is not
		// bound, and runc's descriptor stays: ".." ends at its root.
		if detachedDir(fds[i].path) {
			fds[i].path = ""
		}
		if fds[i].path != "" {
			if fds[i].path, err = filepath.EvalSymlinks(absPath(fds[i].path)); err != nil {
				return nil, fmt.Errorf("restore: CRIU's mount namespace: %w", err)
			}
		}
	}
	reopen := func() error {
		for _, d := range fds {
			if d.path == "" || *d.fd == nil {
				continue
			}
			f, err := os.OpenFile(d.path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			files = append(files, f)
			fd := int32(f.Fd())
			*d.fd = &fd
		}
		return nil
	}
	if err := j.start(cmd, reopen); err != nil {
		CloseFiles(files)
		return nil, fmt.Errorf("restore: CRIU's mount namespace: %w", err)
	}
	return files, nil
}

// CloseFiles closes the descriptors StartCRIU returned.
func CloseFiles(files []*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// absPath is p made absolute, as far as that can be done.
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// under reports whether p is dir or below it.
func under(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}
