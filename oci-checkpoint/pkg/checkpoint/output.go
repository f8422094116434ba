package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"golang.org/x/sys/unix"

	"rekindle.local/oci-checkpoint/pkg/annotations"
)

// checkOutput refuses, before Create does anything to the engine, an
// output it could not write or would overwrite unasked: for an OCI archive,
// a folder that is missing or not writable and (without o.Replace) a file
// of that name; in the image store, an image called name (without
// o.Replace) and, even with it, one that is not a checkpoint image.
func checkOutput(ctx context.Context, cs content.Provider, is images.Store, name string, o Options) error {
	if o.OCIArchive != "" {
		return checkArchive(o.OCIArchive, o.Replace)
	}
	img, err := is.Get(ctx, name)
	if errdefs.IsNotFound(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("image %s: %w", name, err)
	}
	m, err := images.Manifest(ctx, cs, img.Target, platforms.Default())
	if err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("image %s exists and its manifest cannot be read: %w", name, err)
	}
	if err != nil || !annotations.IsCheckpoint(m.Annotations) {
		return fmt.Errorf("image %s: %w and is not a checkpoint image: name the checkpoint image otherwise (--replace replaces only a checkpoint image)", name, errdefs.ErrAlreadyExists)
	}
	if !o.Replace {
		return fmt.Errorf("image %s: %w: remove it first ('oci-checkpoint rm %s'), or pass --replace to replace it", name, errdefs.ErrAlreadyExists, name)
	}
	return nil
}

// checkArchive refuses an OCI archive path whose folder is missing or not
// writable, or (unless replace) that names a file already.
func checkArchive(path string, replace bool) error {
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("--output oci-archive:%s: folder %s does not exist: create it first (mkdir -p %s)", path, dir, dir)
	case err != nil:
		return fmt.Errorf("--output oci-archive:%s: %w", path, err)
	case !fi.IsDir():
		return fmt.Errorf("--output oci-archive:%s: %s is not a folder", path, dir)
	}
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return fmt.Errorf("--output oci-archive:%s: folder %s is not writable: %w", path, dir, err)
	}
	fi, err = os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("--output oci-archive:%s: %w", path, err)
	case fi.IsDir():
		return fmt.Errorf("--output oci-archive:%s: %w and is a folder: name a file", path, errdefs.ErrAlreadyExists)
	case !replace:
		return fmt.Errorf("--output oci-archive:%s: %w: remove it first, or pass --replace to replace it", path, errdefs.ErrAlreadyExists)
	}
	return nil
}
