package checkpoint

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/checkpoint-restore/go-criu/v8/crit/images/fdinfo"
	remap "github.com/checkpoint-restore/go-criu/v8/crit/images/remap-file-path"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"rekindle.local/oci-checkpoint/pkg/criuimg"
	"rekindle.local/restore/devshm"
)

// criSandboxIDAnnotation names a CRI container's sandbox in its spec.
const criSandboxIDAnnotation = "io.kubernetes.cri.sandbox-id"

// sandboxDevShm returns the folder containerd's CRI binds into a container
// as /dev/shm from its pod's sandbox (STATE/sandboxes/ID/shm), "" when the
// container has none: it is not a CRI container, its pod shares the host's
// IPC namespace (hostIPC: the host's /dev/shm), or it mounts its own.
func sandboxDevShm(spec *specs.Spec) string {
	if spec == nil {
		return ""
	}
	id := spec.Annotations[criSandboxIDAnnotation]
	if id == "" {
		return ""
	}
	for _, m := range spec.Mounts {
		if filepath.Clean(m.Destination) != "/dev/shm" || m.Type != "bind" {
			continue
		}
		src := filepath.Clean(m.Source)
		if filepath.Base(src) == "shm" && filepath.Base(filepath.Dir(src)) == id &&
			filepath.Base(filepath.Dir(filepath.Dir(src))) == "sandboxes" {
			return src
		}
	}
	return ""
}

// writeDevShm writes a CRI container's /dev/shm, its sandbox's tmpfs, into
// the checkpoint folder dir as devshm-checkpoint.tar, as CRI-O does: CRI
// binds it from outside the container, so CRIU dumps no file in it, and a
// file there that a process holds open under a name it has since removed
// (a renamed POSIX semaphore) is dumped as a link_remap.N beside it that
// the restore needs. It writes nothing for a container without one. The
// files are the container's: they are read through descriptors, never
// through a symbolic link, and only directories and regular files, no more
// than the tmpfs's size (package devshm).
//
// A dump that leaves the processes running (oci-checkpoint's default: the
// container is stopped once the image is written) removes the link_remap
// files it made; they are taken, as the dump's images name them, from the
// processes in pids that still hold their files (heldRemaps).
func writeDevShm(spec *specs.Spec, dir, criuDir string, pids []uint32) (string, int64, error) {
	src := sandboxDevShm(spec)
	if src == "" {
		return "", 0, nil
	}
	extra, err := heldRemaps(criuDir, src, pids)
	defer func() {
		for _, e := range extra {
			e.File.Close()
		}
	}()
	if err != nil {
		return src, 0, fmt.Errorf("the pod's /dev/shm: %w", err)
	}
	limit, err := devshm.Size(src)
	if err != nil {
		return src, 0, fmt.Errorf("the pod's /dev/shm: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, devshm.ArchiveName), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return src, 0, err
	}
	defer f.Close()
	n, err := devshm.Write(f, src, limit, extra...)
	if err != nil {
		return src, n, fmt.Errorf("the pod's /dev/shm: %w", err)
	}
	return src, n, f.Close()
}

// remapGhost marks a ghost remap in images without remap_type.
const remapGhost = 1 << 31

// heldRemaps returns the link_remap files of /dev/shm that the dump in
// criuDir names and that are not in shm (the sandbox's /dev/shm) any more,
// each opened through a process of pids that maps or holds open the file
// it stands for, under the name that file had (now removed): CRIU links
// link_remap.N back to that name at restore. A file is taken only from shm's
// file system; one that no process holds any more is an error.
func heldRemaps(criuDir, shm string, pids []uint32) ([]devshm.Extra, error) {
	if _, err := os.Stat(filepath.Join(criuDir, "remap-fpath.img")); os.IsNotExist(err) {
		return nil, nil
	}
	remaps, err := criuimg.Decode(criuDir, "remap-fpath.img", &remap.RemapFilePathEntry{})
	if err != nil {
		return nil, err
	}
	files, err := criuimg.Decode(criuDir, "files.img", &fdinfo.FileEntry{})
	if err != nil {
		return nil, err
	}
	names := map[uint32]string{}
	for _, e := range files.Entries {
		if f, ok := e.Message.(*fdinfo.FileEntry); ok && f.GetReg() != nil {
			names[f.GetId()] = f.GetReg().GetName()
		}
	}
	var dev uint64
	if st, err := os.Stat(shm); err == nil {
		dev = devOf(st)
	}
	var out []devshm.Extra
	for _, e := range remaps.Entries {
		r, ok := e.Message.(*remap.RemapFilePathEntry)
		if !ok || r.GetRemapId()&remapGhost != 0 || r.GetRemapType() != remap.RemapType_LINKED {
			continue
		}
		orig, link := names[r.GetOrigId()], names[r.GetRemapId()]
		rel, ok := strings.CutPrefix(link, "/dev/shm/")
		if !ok || !strings.HasPrefix(orig, "/dev/shm/") || !strings.HasPrefix(path.Base(rel), "link_remap.") {
			continue
		}
		if _, err := os.Lstat(filepath.Join(shm, filepath.FromSlash(rel))); err == nil {
			continue // the dump kept it (--stop-at-dump): the walk finds it
		}
		f, err := openHeld(pids, orig, dev)
		if err != nil {
			for _, e := range out {
				e.File.Close()
			}
			return nil, fmt.Errorf("%s, the dump's link remap of %s: %w", link, orig, err)
		}
		out = append(out, devshm.Extra{Name: rel, File: f})
	}
	return out, nil
}

// openHeld opens the file of device dev that one of pids holds open or
// maps under the removed name name (its /proc link reads "NAME (deleted)").
func openHeld(pids []uint32, name string, dev uint64) (*os.File, error) {
	want := path.Base(name) + " (deleted)"
	for _, pid := range pids {
		for _, sub := range []string{"fd", "map_files"} {
			d := fmt.Sprintf("/proc/%d/%s", pid, sub)
			ents, err := os.ReadDir(d)
			if err != nil {
				continue
			}
			for _, ent := range ents {
				p := d + "/" + ent.Name()
				if l, err := os.Readlink(p); err != nil || path.Base(l) != want {
					continue
				}
				// O_PATH: the file is not opened (a device's open
				// does things); devshm.Write reads it through a
				// descriptor of its own once it is known to be a
				// regular file of the tmpfs.
				fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
				if err != nil {
					continue
				}
				var st unix.Stat_t
				if err := unix.Fstat(fd, &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Dev == dev {
					return os.NewFile(uintptr(fd), p), nil
				}
				unix.Close(fd)
			}
		}
	}
	return nil, fmt.Errorf("no process of the container holds it")
}

func devOf(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Dev
	}
	return 0
}
