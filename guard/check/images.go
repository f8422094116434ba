// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/checkpoint-restore/go-criu/v8/crit/images/fdinfo"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/mnt"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/tty"
	"github.com/checkpoint-restore/go-criu/v8/magic"
	"golang.org/x/sys/unix"
)

// imageFile is a name a checkpoint may hold, as a regular file, and what
// reads it before CRIU does: reader, the function that parses it and
// checks what CRIU or runc acts on; or shownBy, the test that shows its
// content changes nothing runc or CRIU does on the host. Anything else is
// refused, so that an image type a newer CRIU reads fails closed until
// the guard reads it. "N" stands for a number. TestImageFilesHaveReaders
// walks the table; shownBy names a test of this package, or a system
// test as "FILE: a stretch of its name".
type imageFile struct {
	name, reader, shownBy string
	why                   string
}

var imageFiles = []imageFile{
	{name: "inventory.img", reader: "checkNamespaces", why: "the root ids the tasks' namespaces are compared with"},
	{name: "pstree.img", reader: "Restore", why: "every task, each checked; a tree (checkTree)"},
	{name: "core-N.img", reader: "checkTask", why: "credentials, capabilities, seccomp, scheduling, limits"},
	{name: "ids-N.img", reader: "checkTaskNamespaces", why: "namespaces"},
	{name: "files.img", reader: "checkFiles", why: "file kinds, names, privileges"},
	{name: "fdinfo-N.img", reader: "checkFdinfo", why: "each descriptor names a file of files.img of its own kind"},
	{name: "fs-N.img", reader: "checkFs", why: "cwd and root name folders of files.img"},
	{name: "mm-N.img", reader: "checkMm", why: "the executable a regular file of files.img, areas whole pages in order (the areas' files not yet compared)"},
	{name: "pagemap-N.img", reader: "checkPagemaps", why: "where the task's memory pages go: whole pages, in order"},
	{name: "pagemap-shmem-N.img", reader: "checkPagemaps", why: "where shared memory's pages go: whole pages, in order, in its pages image"},
	{name: "pages-N.img", reader: "checkPagemap", why: "memory contents: at least the pages its pagemap says are there"},
	{name: "memfd.img", reader: "checkMemfds", why: "memfd contents: owned by the config's user unless root with CAP_CHOWN"},
	{name: "signal-p-N.img", reader: "checkSignals", why: "the task's pending signals: siginfo of a signal, queued to itself"},
	{name: "signal-s-N.img", reader: "checkSignals", why: "the thread's pending signals: siginfo of a signal, queued to itself"},
	{name: "mountpoints-N.img", reader: "checkMounts", why: "mounts"},
	{name: "cgroup.img", reader: "checkCgroups", why: "cgroups"},
	{name: "seccomp.img", reader: "Restore", why: "seccomp filters, compared with the config's"},
	{name: "apparmor.img", reader: "checkApparmorNamespaces", why: "AppArmor namespaces"},
	{name: "remap-fpath.img", reader: "checkRemaps", why: "ghost and link-remap files"},
	{name: "ghost-file-N.img", reader: "checkRemap", why: "ghost files"},
	{name: "tmpfs-dev-N.tar.gz.img", reader: "checkTmpfsArchives", why: "tmpfs archives"},
	{name: "tmpfs-N.tar.gz.img", reader: "checkTmpfsArchives", why: "tmpfs archives"},
	{name: "pipes-data.img", reader: "checkQueuedData", why: "pipe contents: a pipe of files.img, no larger than a task could make"},
	{name: "fifo-data.img", reader: "checkQueuedData", why: "FIFO contents: a FIFO of files.img, no larger than a task could make"},
	{name: "sk-queues.img", reader: "readQueues", why: "socket queues: the descriptors in flight"},
	{name: "tcp-stream-N.img", reader: "checkTcpStreams", why: "TCP connection state of a socket of files.img"},
	{name: "tty-info.img", reader: "ttyKinds", why: "tty kinds"},
	{name: "tty-data.img", reader: "checkTtyData", why: "pty contents: a pseudo-terminal of tty-info.img"},
	{name: "filelocks.img", reader: "checkFileLocks", why: "locks and leases on the tasks' files"},
	{name: "bpfmap-data.img", reader: "checkBpfmapData", why: "contents of BPF maps of files.img, themselves checked"},
	{name: "utsns-N.img", shownBy: "TestCheckRestorePrivilegesNamespaces", why: "a UTS namespace of the container's own"},
	{name: "ipcns-var-N.img", shownBy: "TestCheckRestorePrivilegesNamespaces", why: "an IPC namespace of the container's own"},
	{name: "ipcns-shm-N.img", shownBy: "TestCheckRestorePrivilegesNamespaces", why: "an IPC namespace of the container's own"},
	{name: "ipcns-msg-N.img", shownBy: "TestCheckRestorePrivilegesNamespaces", why: "an IPC namespace of the container's own"},
	{name: "ipcns-sem-N.img", shownBy: "TestCheckRestorePrivilegesNamespaces", why: "an IPC namespace of the container's own"},
	{name: "timens-N.img", shownBy: "TestCheckRestorePrivilegesNamespaces", why: "a time namespace of the container's own"},
	{name: "pidns-N.img", shownBy: "TestCheckRestorePrivilegesNamespaces", why: "the PID namespace runc gives"},
	{name: "netns-N.img", shownBy: "TestCheckRestorePrivilegesNamespaces", why: "a network namespace of the container's own"},
	{name: "ifaddr-N.img", shownBy: "TestCheckRestorePrivilegesNamespaces", why: "a network namespace of the container's own"},
	{name: "route-N.img", shownBy: "TestCheckRestorePrivilegesNamespaces", why: "a network namespace of the container's own"},
	{name: "route6-N.img", shownBy: "TestCheckRestorePrivilegesNamespaces", why: "a network namespace of the container's own"},
	{name: "rule-N.img", shownBy: "TestCheckRestorePrivilegesNamespaces", why: "a network namespace of the container's own"},
	{name: "iptables-N.img", reader: "checkNetfilter", why: "netfilter rules"},
	{name: "ip6tables-N.img", reader: "checkNetfilter", why: "netfilter rules"},
	{name: "nftables-N.img", reader: "checkNetfilter", why: "netfilter rules"},
	{name: "stats-dump", shownBy: "tests/bats/470-hostile-images.bats: CRIU's statistics and logs in the image folder, whatever they hold, change nothing", why: "CRIU's statistics, not restored"},
	{name: "stats-restore", shownBy: "tests/bats/470-hostile-images.bats: CRIU's statistics and logs in the image folder, whatever they hold, change nothing", why: "CRIU's statistics, written by the restore"},
	{name: "descriptors.json", shownBy: "TestInherits", why: "runc's list of the dumped stdio, no longer read on restore"},
	{name: "dump.log", shownBy: "tests/bats/470-hostile-images.bats: CRIU's statistics and logs in the image folder, whatever they hold, change nothing", why: "a log, not restored"},
	{name: "restore.log", shownBy: "tests/bats/470-hostile-images.bats: CRIU's statistics and logs in the image folder, whatever they hold, change nothing", why: "a log, written by the restore"},
}

var imageFileRe = func() *regexp.Regexp {
	var alt []string
	for _, f := range imageFiles {
		alt = append(alt, strings.ReplaceAll(regexp.QuoteMeta(f.name), "N", "[0-9a-f]+"))
	}
	return regexp.MustCompile("^(" + strings.Join(alt, "|") + ")$")
}()

// checkImageFiles refuses a checkpoint that holds a file runc does not
// check, or anything but regular files: CRIU follows a symlink where it
// opens an image or writes its log and statistics.
func checkImageFiles(dir *os.File) error {
	names, err := imageNames(dir)
	if err != nil {
		return err
	}
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("checkpoint image %s: %w", name, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return fmt.Errorf("checkpoint image %s is not a regular file (mode %#o)", name, st.Mode)
		}
		if !imageFileRe.MatchString(name) {
			return fmt.Errorf("checkpoint image %s is no image that runc checks or lets CRIU restore; "+
				"restore it with a runc that knows it, or checkpoint it again", name)
		}
	}
	return nil
}

// imageNames lists the image folder, sorted.
func imageNames(dir *os.File) ([]string, error) {
	d, err := openDirAgain(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("listing the checkpoint images: %w", err)
	}
	slices.Sort(names)
	return names, nil
}

// openDirAgain opens dir anew, so that listing it moves no offset CRIU
// might share.
func openDirAgain(dir *os.File) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the checkpoint images: %w", err)
	}
	return os.NewFile(uintptr(fd), dir.Name()), nil
}

// fileKindChecked refuses a files.img entry of a kind runc does not
// check; kinds with privileges are checked by checkFile.
func fileKindChecked(f *fdinfo.FileEntry, ttys map[uint32]tty.TtyType) error {
	switch f.GetType() {
	case fdinfo.FdTypes_REG:
		reg := f.GetReg()
		if reg == nil {
			return errors.New("of type REG has no reg")
		}
		if !cleanAbs(reg.GetName()) {
			return fmt.Errorf("has name %q, not a clean absolute path", reg.GetName())
		}
		if reg.GetExt() {
			return errors.New("is an external file (reg.ext), which a plugin opens")
		}
	case fdinfo.FdTypes_PIPE, fdinfo.FdTypes_FIFO, fdinfo.FdTypes_EVENTFD, fdinfo.FdTypes_EVENTPOLL,
		fdinfo.FdTypes_SIGNALFD, fdinfo.FdTypes_TIMERFD, fdinfo.FdTypes_MEMFD, fdinfo.FdTypes_PIDFD,
		fdinfo.FdTypes_INETSK, fdinfo.FdTypes_UNIXSK, fdinfo.FdTypes_PACKETSK, fdinfo.FdTypes_FANOTIFY,
		fdinfo.FdTypes_BPFMAP, fdinfo.FdTypes_TUNF:
		// Objects of the task's own, or checked elsewhere.
	case fdinfo.FdTypes_INOTIFY:
		// CRIU opens a watched file by its handle on the host's
		// mount of that device, wherever it is.
		if n := len(f.GetIfy().GetWd()); n > 0 {
			return fmt.Errorf("is an inotify group with %d watches, which CRIU opens by file handle on the host", n)
		}
	case fdinfo.FdTypes_NETLINKSK:
		if p := f.GetNlsk().GetProtocol(); p != unix.NETLINK_ROUTE {
			return fmt.Errorf("is a netlink socket of protocol %d, not NETLINK_ROUTE", p)
		}
	case fdinfo.FdTypes_TTY:
		t, ok := ttys[f.GetTty().GetTtyInfoId()]
		if !ok {
			return fmt.Errorf("is a tty whose tty_info_id %d is not in tty-info.img", f.GetTty().GetTtyInfoId())
		}
		if t != tty.TtyType_PTY && t != tty.TtyType_EXT_TTY {
			return fmt.Errorf("is a tty of type %s, not a pseudo-terminal", t)
		}
	default:
		return fmt.Errorf("is of type %s, which runc does not check", f.GetType())
	}
	return nil
}

// ttyKinds reads tty-info.img.
func ttyKinds(dir *os.File) (map[uint32]tty.TtyType, error) {
	entries, err := readImage(dir, "tty-info.img", "TTY_INFO", &tty.TtyInfoEntry{})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	kinds := make(map[uint32]tty.TtyType, len(entries))
	for _, e := range entries {
		t := e.(*tty.TtyInfoEntry)
		kinds[t.GetId()] = t.GetType()
	}
	return kinds, nil
}

// iptablesTables are the tables an iptables-save of a network namespace
// names without rules; iptables-restore, run by CRIU as root, loads each
// one's module.
var iptablesTables = []string{"filter", "nat", "mangle", "raw", "security"}

// checkNetfilter refuses netfilter images with rules: CRIU hands them to
// the host's iptables-restore or nft as root, and their matches and
// targets choose which kernel modules load. Tables of built-in chains
// with their policies pass.
func checkNetfilter(dir *os.File) error {
	names, err := imageNames(dir)
	if err != nil {
		return err
	}
	for _, name := range names {
		var err error
		switch {
		case strings.HasPrefix(name, "iptables-"), strings.HasPrefix(name, "ip6tables-"):
			err = checkIptables(dir, name)
		case strings.HasPrefix(name, "nftables-"):
			var b []byte
			if b, err = readRaw(dir, name); err == nil && len(bytes.TrimSpace(b)) > 0 {
				err = errors.New("holds nftables rules")
			}
		default:
			continue
		}
		if err != nil {
			return fmt.Errorf("checkpoint image %s %w; checkpoint the container without netfilter rules of its own", name, err)
		}
	}
	return nil
}

func checkIptables(dir *os.File, name string) error {
	b, err := readRaw(dir, name)
	if err != nil {
		return err
	}
	s := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; s.Scan(); n++ {
		line := strings.TrimSpace(s.Text())
		f := strings.Fields(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || line == "COMMIT":
		case strings.HasPrefix(line, "*") && slices.Contains(iptablesTables, line[1:]):
		case strings.HasPrefix(line, ":") && len(f) >= 2 && builtinChain(f[0][1:]) && (f[1] == "ACCEPT" || f[1] == "DROP"):
		default:
			return fmt.Errorf("line %d %q is a rule, a chain or a table that runc does not let iptables-restore load", n, line)
		}
	}
	return s.Err()
}

func builtinChain(c string) bool {
	return slices.Contains([]string{"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"}, c)
}

// readRaw reads a raw image, past the magic where it has one.
func readRaw(dir *os.File, name string) ([]byte, error) {
	b, err := readImageBytes(dir, name)
	if err != nil {
		return nil, err
	}
	m := magic.LoadMagic().ByName
	if len(b) >= 8 {
		if v := uint64(binary.LittleEndian.Uint32(b)); v == m["IMG_COMMON"] || v == m["IMG_SERVICE"] {
			b = b[8:]
		}
	}
	return b, nil
}

// checkRootfsKinds refuses a regular file of files.img whose name, in the
// rootfs or in its tmpfs mount's archive, is a FIFO or device that the
// image does not say it is, or a FIFO that no FIFO entry opens: CRIU opens
// it by that name with the image's flags, and the open of a FIFO blocks
// the restore (a rootfs diff or an archive can put one there).
func (g *grant) checkRootfsKinds(files map[uint32]*fdinfo.FileEntry, mounts []*mnt.MntEntry, rootfs string) error {
	fifos := make(map[uint32]bool) // regular files FIFO entries open
	for _, f := range files {
		if f.GetType() == fdinfo.FdTypes_FIFO {
			fifos[f.GetFifo().GetRegfId()] = true
		}
	}
	root, err := os.Open(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, id := range slices.Sorted(maps.Keys(files)) {
		reg := files[id].GetReg()
		if files[id].GetType() != fdinfo.FdTypes_REG || reg == nil {
			continue
		}
		m := mountOf(mounts, reg.GetName())
		if m == nil || m.ExtKey != nil {
			continue
		}
		var have uint32
		if m.GetMountpoint() == "/" {
			fd, err := unix.Openat2(int(root.Fd()), reg.GetName(), &unix.OpenHow{
				Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
				Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
			})
			if err != nil {
				continue // CRIU names what it cannot open
			}
			var st unix.Stat_t
			err = unix.Fstat(fd, &st)
			unix.Close(fd)
			if err != nil {
				return fmt.Errorf("checkpoint image files.img: file %d (%s): %w", id, reg.GetName(), err)
			}
			have = st.Mode & unix.S_IFMT
		} else if idx := g.tmpfs[m.GetMntId()]; idx != nil {
			have = archiveKind(idx[inMount(m, reg.GetName())])
		}
		want := reg.GetMode() & unix.S_IFMT
		switch have {
		case unix.S_IFIFO, unix.S_IFSOCK, unix.S_IFCHR, unix.S_IFBLK:
			if have != want {
				return fmt.Errorf("checkpoint image files.img: file %d (%s) is a %s on %s, a %s in the image: "+
					"CRIU would open it as it is", id, reg.GetName(), fileKind(have), m.GetMountpoint(), fileKind(want))
			}
			if have == unix.S_IFIFO && !fifos[id] {
				return fmt.Errorf("checkpoint image files.img: file %d (%s) is a FIFO that a task opens as a file, "+
					"not through a FIFO entry: its open would block", id, reg.GetName())
			}
		}
	}
	return nil
}

func fileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "regular file"
	case unix.S_IFDIR:
		return "folder"
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFLNK:
		return "symlink"
	case 0:
		return "file of no recorded kind"
	}
	return fmt.Sprintf("mode %#o", mode)
}
