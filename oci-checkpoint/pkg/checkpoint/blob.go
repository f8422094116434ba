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
// file beside the blobs, written with O_DIRECT where the filesystem allows
// it (this VM's buffered writes with a final fsync ran at a quarter of its
// direct write rate), renamed to its digest once complete.
type blobFile struct {
	f      *os.File
	tmp    string
	dir    string
	direct bool
	n      int64
}

func createBlob(root string) (*blobFile, error) {
	dir := filepath.Join(root, "blobs", digest.Canonical.String())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// A leading dot is not a digest: containerd's store walks past it.
	tmp := filepath.Join(dir, ".rekindle-layer-"+randomID())
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
	return b, nil
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
