package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"
)

const directAlign = 4096

// blobFile writes one blob into a content store directory: a temporary
// file in TmpDir, written with O_DIRECT where the filesystem allows it (this
// VM's buffered writes with a final fsync ran at a quarter of its direct
// write rate), renamed to its digest in blobs/ once complete. It holds a
// lock on the file while it writes, so a later create can tell a
// crashed write's leftover from a live one.
type blobFile struct {
	f      *os.File
	tmp    string
	dir    string
	direct bool
	n      int64
}

// TmpDir is where blobs are written before they are renamed into place: on
// the content store's file system, outside blobs/ and ingest/, which
// containerd's store walks. In blobs/, a name that is not a digest is
// reported by the walk and stops the garbage collector's sweep.
func TmpDir(root string) string {
	return filepath.Join(root, "rekindle-tmp")
}

func createBlob(root string) (*blobFile, error) {
	dir := filepath.Join(root, "blobs", digest.Canonical.String())
	tmpDir := TmpDir(root)
	for _, d := range []string{dir, tmpDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	removeStale(tmpDir)
	tmp := filepath.Join(tmpDir, "layer-"+randomID())
	b := &blobFile{tmp: tmp, dir: dir, direct: true}
	fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_DIRECT|unix.O_CLOEXEC, 0o644)
	if errors.Is(err, unix.EINVAL) { // tmpfs and some others refuse O_DIRECT
		b.direct = false
		fd, err = unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
	}
	if err != nil {
		return nil, &os.PathError{Op: "create", Path: tmp, Err: err}
	}
	b.f = os.NewFile(uintptr(fd), tmp)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b.remove()
		return nil, &os.PathError{Op: "lock", Path: tmp, Err: err}
	}
	return b, nil
}

// removeStale removes what a killed create left in dir: the files no live
// writer holds locked.
func removeStale(dir string) {
	names, _ := filepath.Glob(filepath.Join(dir, "layer-*"))
	for _, n := range names {
		f, err := os.OpenFile(n, os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			os.Remove(n)
		}
		f.Close()
	}
}

// Write takes page-aligned buffers (asyncWriter's); only the last may be
// partial: it is written padded to the block size and cut back in finish.
func (b *blobFile) Write(p []byte) (int, error) {
	if !b.direct || len(p)%directAlign == 0 {
		n, err := b.f.Write(p)
		b.n += int64(n)
		return n, err
	}
	padded := p[:(len(p)+directAlign-1)/directAlign*directAlign]
	clear(padded[len(p):])
	if _, err := b.f.Write(padded); err != nil {
		return 0, err
	}
	b.n += int64(len(p))
	return len(p), nil
}

// finish makes the file the blob dgst: cut to size, synced, read-only,
// renamed into place.
func (b *blobFile) finish(dgst digest.Digest) error {
	if err := b.f.Truncate(b.n); err != nil {
		return err
	}
	if err := b.f.Sync(); err != nil {
		return err
	}
	if err := b.f.Close(); err != nil {
		return err
	}
	if err := os.Chmod(b.tmp, 0o444); err != nil {
		return err
	}
	if err := os.Rename(b.tmp, filepath.Join(b.dir, dgst.Encoded())); err != nil {
		return fmt.Errorf("store blob %s: %w", dgst, err)
	}
	if d, err := os.Open(b.dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

func (b *blobFile) remove() {
	b.f.Close()
	os.Remove(b.tmp)
}
