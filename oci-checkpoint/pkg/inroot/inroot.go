// Package inroot reads and writes files inside a running container's root
// filesystem from the host, through /proc/PID/root, without following a
// symlink the container planted out of its root (openat2 RESOLVE_IN_ROOT).
package inroot

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Root is a container's root directory, opened once.
type Root struct {
	fd   int
	Path string // for messages
}

// Open opens dir (e.g. /proc/PID/root) as a root.
func Open(dir string) (*Root, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open container root %s: %w", dir, err)
	}
	return &Root{fd: fd, Path: dir}, nil
}

// Close releases the root.
func (r *Root) Close() error { return unix.Close(r.fd) }

func (r *Root) open(name string, flags uint64, mode uint64) (*os.File, error) {
	return r.openHow(name, flags, mode, unix.RESOLVE_IN_ROOT|unix.RESOLVE_NO_MAGICLINKS)
}

func (r *Root) openHow(name string, flags, mode, resolve uint64) (*os.File, error) {
	fd, err := unix.Openat2(r.fd, name, &unix.OpenHow{
		Flags:   flags | unix.O_CLOEXEC,
		Mode:    mode,
		Resolve: resolve,
	})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: filepath.Join(r.Path, name), Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(r.Path, name)), nil
}

// MkdirAll creates dir (relative to the root) and its parents.
func (r *Root) MkdirAll(dir string, mode os.FileMode) error {
	dir = filepath.Clean("/" + dir)
	if dir == "/" {
		return nil
	}
	if err := r.MkdirAll(filepath.Dir(dir), mode); err != nil {
		return err
	}
	parent, err := r.open(filepath.Dir(dir), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer parent.Close()
	err = unix.Mkdirat(int(parent.Fd()), filepath.Base(dir), uint32(mode.Perm()))
	if err != nil && !errors.Is(err, unix.EEXIST) {
		if errors.Is(err, unix.EROFS) {
			return fmt.Errorf("create %s in the container: its root filesystem is read-only", dir)
		}
		return &os.PathError{Op: "mkdir", Path: filepath.Join(r.Path, dir), Err: err}
	}
	return nil
}

// ChownDir gives directory dir to uid and gid; a symlink there is refused,
// not followed.
func (r *Root) ChownDir(dir string, uid, gid int) error {
	f, err := r.open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fchownat(int(f.Fd()), "", uid, gid, unix.AT_EMPTY_PATH); err != nil {
		return &os.PathError{Op: "chown", Path: f.Name(), Err: err}
	}
	return nil
}

// WriteFile writes name atomically: a temporary file beside it, renamed.
func (r *Root) WriteFile(name string, data []byte, mode os.FileMode) error {
	_, err := r.writeFile(name, data, mode, false)
	return err
}

// WriteFileHeld writes name as WriteFile does and returns the file it
// wrote, opened read-only: what the container does to the name afterwards
// (a rename, another file in its place) does not change what it reads.
func (r *Root) WriteFileHeld(name string, data []byte, mode os.FileMode) (*os.File, error) {
	return r.writeFile(name, data, mode, true)
}

func (r *Root) writeFile(name string, data []byte, mode os.FileMode, hold bool) (*os.File, error) {
	name = filepath.Clean("/" + name)
	if err := r.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return nil, err
	}
	// A fresh name, created exclusively: a FIFO or a hard link the
	// container planted at a fixed one would block or be truncated.
	var suffix [8]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return nil, err
	}
	tmp := name + ".tmp-" + hex.EncodeToString(suffix[:])
	f, err := r.open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, uint64(mode.Perm()))
	if err != nil {
		if errors.Is(err, unix.EROFS) {
			return nil, fmt.Errorf("write %s in the container: its root filesystem is read-only", name)
		}
		return nil, err
	}
	var held *os.File
	done := false
	defer func() {
		if !done {
			if held != nil {
				held.Close()
			}
			_ = r.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Chmod(mode.Perm()); err != nil {
		f.Close()
		return nil, err
	}
	if hold {
		// Our own descriptor, reopened: no name in the container is walked.
		held, err = os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), os.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			f.Close()
			return nil, err
		}
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	if err := r.rename(tmp, name); err != nil {
		return nil, err
	}
	done = true
	return held, nil
}

func (r *Root) rename(from, to string) error {
	dir, err := r.open(filepath.Dir(to), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer dir.Close()
	if err := unix.Renameat(int(dir.Fd()), filepath.Base(from), int(dir.Fd()), filepath.Base(to)); err != nil {
		return &os.PathError{Op: "rename", Path: filepath.Join(r.Path, to), Err: err}
	}
	return nil
}

// MaxReadSize is the most ReadFile reads: the files read from a container
// (the wake helper's status, devices.json) are small JSON.
const MaxReadSize = 1 << 20

// ReadFile reads name, a regular file of at most MaxReadSize bytes. The
// container controls what is there: anything else (a FIFO, which would
// block an open for reading forever, a device, whose open alone can act,
// a symlink, a directory) is refused before it is opened for reading, and
// a larger file before it is read.
func (r *Root) ReadFile(name string) ([]byte, error) {
	name = filepath.Clean("/" + name)
	p, err := r.open(name, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return readChecked(p, MaxReadSize)
}

// ReadFileBeneath reads name as ReadFile does, at most limit bytes, but
// follows symlinks that stay beneath the root: the kubelet's volumes are
// made of them (token -> ..data/token -> ..2025_01_01_00_00_00.1/token).
// One that leads out of the root, absolute or by "..", is refused rather
// than resolved inside it; what the name ends at must be a regular file.
func (r *Root) ReadFileBeneath(name string, limit int64) ([]byte, error) {
	rel := strings.TrimPrefix(filepath.Clean("/"+name), "/")
	p, err := r.openHow(rel, unix.O_PATH, 0, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_MAGICLINKS)
	if errors.Is(err, unix.EXDEV) {
		return nil, fmt.Errorf("%s: a symlink in it leads out of %s: refusing to follow it", filepath.Join(r.Path, rel), r.Path)
	}
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return readChecked(p, limit)
}

// readChecked reads the file p (an O_PATH descriptor) holds when it is a
// regular file of at most limit bytes.
func readChecked(p *os.File, limit int64) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(p.Fd()), &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: p.Name(), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s is %s, not a regular file: refusing to read it", p.Name(), fileKind(st.Mode))
	}
	if st.Size > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes (%d): refusing to read it", p.Name(), limit, st.Size)
	}
	// Reopen the inode just checked, for reading: through the O_PATH
	// descriptor, so nothing the container swaps in meanwhile is opened.
	// O_NONBLOCK and O_NOCTTY do nothing to a regular file; they are a
	// second guard should it be anything else.
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", p.Fd()), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p.Name(), Err: err}
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "open", Path: p.Name(), Err: err}
	}
	f := os.NewFile(uintptr(fd), p.Name())
	defer f.Close()
	// It may have grown since the fstat: read one byte past the cap to tell.
	buf := make([]byte, 0, max(st.Size+1, 512))
	for int64(len(buf)) <= limit {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := f.Read(buf[len(buf):min(int64(cap(buf)), limit+1)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%s is larger than %d bytes: refusing to read it", p.Name(), limit)
}

// fileKind names the type in mode, with its article, for messages.
func fileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symlink"
	case unix.S_IFSOCK:
		return "a socket"
	}
	return fmt.Sprintf("of type %#o", mode&unix.S_IFMT)
}

// Remove removes name; a missing name is not an error.
func (r *Root) Remove(name string) error {
	name = filepath.Clean("/" + name)
	dir, err := r.open(filepath.Dir(name), unix.O_PATH|unix.O_DIRECTORY, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer dir.Close()
	err = unix.Unlinkat(int(dir.Fd()), filepath.Base(name), 0)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "remove", Path: filepath.Join(r.Path, name), Err: err}
	}
	return nil
}

// CharDevices returns the device numbers of the character devices in dir
// whose names match the glob pattern, keyed by name. Symlinks are skipped.
func (r *Root) CharDevices(dir, pattern string) (map[string]uint64, error) {
	d, err := r.open(filepath.Clean("/"+dir), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, n := range names {
		if ok, _ := filepath.Match(pattern, n); !ok {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(int(d.Fd()), n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue
		}
		if st.Mode&unix.S_IFMT == unix.S_IFCHR {
			out[n] = st.Rdev
		}
	}
	return out, nil
}
