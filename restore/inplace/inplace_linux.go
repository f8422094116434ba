// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package inplace

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/containerd/v2/core/diff"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/log"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	keys "rekindle.local/contract/annotations"
	"rekindle.local/contract/layout"
)

// Apply keeps an uncompressed layer that asks for it as an EROFS tar
// index beside a hard link of its blob, instead of extracting it. Mounting
// the index reads each file from the blob where it lies, so a layer of many
// gigabytes (a checkpoint's memory pages) is neither copied nor written
// again: unpacking it costs a hard link and reading its tar headers.
//
// Only a checkpoint image's layer is kept so: directories and regular
// files, among them a checkpoint/ directory. The annotation comes with the
// image, and the snapshot is committed under the layer's chain ID, which
// any image with the same first layer shares; a layer of that shape is read
// by checkpoint restorers alone, which know the form.
//
// It returns false, having written nothing, where this cannot be done here:
// another media type, stream processors, a layer of another shape, a blob
// that is not a local file or lies on another file system, a snapshot that
// is not one directory, or no mkfs.erofs with --tar=i (erofs-utils 1.7 or
// later). The caller then extracts the layer as usual.
func Apply(ctx context.Context, desc ocispec.Descriptor, ra io.ReaderAt, mounts []mount.Mount, config diff.ApplyConfig) (bool, error) {
	if desc.Annotations[keys.LayerInPlace] != keys.LayerInPlaceEROFS {
		return false, nil
	}
	logger := log.G(ctx).WithField("digest", desc.Digest)
	if desc.MediaType != ocispec.MediaTypeImageLayer && desc.MediaType != images.MediaTypeDockerSchema2Layer {
		logger.Debugf("not keeping the layer in place: media type %s is not an uncompressed tar", desc.MediaType)
		return false, nil
	}
	if len(config.ProcessorPayloads) > 0 {
		return false, nil
	}
	f, ok := ra.(interface{ File() *os.File })
	if !ok {
		logger.Debug("not keeping the layer in place: its blob is not a local file")
		return false, nil
	}
	if len(mounts) != 1 || (mounts[0].Type != "bind" && !slices.Contains(mounts[0].Options, "bind") && !slices.Contains(mounts[0].Options, "rbind")) {
		logger.Debugf("not keeping the layer in place: the snapshot is not one directory (%+v)", mounts)
		return false, nil
	}
	if err := checkpointShaped(f.File().Name()); err != nil {
		logger.WithError(err).Info("not keeping the layer in place: not a checkpoint layer; extracting it")
		return false, nil
	}
	mkfs, err := exec.LookPath("mkfs.erofs")
	if err != nil {
		logger.Info("not keeping the layer in place: no mkfs.erofs in PATH; extracting it")
		return false, nil
	}

	dir := mounts[0].Source
	blob, index := filepath.Join(dir, layout.InPlaceBlob), filepath.Join(dir, layout.InPlaceIndex)
	if err := os.Link(f.File().Name(), blob); err != nil {
		logger.WithError(err).Info("not keeping the layer in place: cannot hard-link its blob into the snapshot; extracting it")
		return false, nil
	}
	undo := func() {
		os.Remove(index)
		os.Remove(blob)
	}
	if fi, err := os.Stat(blob); err != nil || fi.Size() != desc.Size {
		undo()
		if err == nil {
			err = fmt.Errorf("blob %s holds %d bytes, its descriptor gives %d", desc.Digest, fi.Size(), desc.Size)
		}
		return false, err
	}
	// --tar=i writes only the metadata; its data device is the tar itself.
	// The UUID is cleared so that the same layer gives the same index.
	out, err := exec.CommandContext(ctx, mkfs, "--tar=i", "--quiet", "-Uclear", index, blob).CombinedOutput()
	if err != nil {
		undo()
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		// An old mkfs.erofs refuses --tar=i; a tar it cannot read fails the
		// extraction that follows, with the extractor's own error.
		logger.WithError(err).Warnf("not keeping the layer in place: %s --tar=i failed (%s); extracting it", mkfs, strings.TrimSpace(string(out)))
		return false, nil
	}
	if config.SyncFs {
		if err := syncIndex(index, dir); err != nil {
			undo()
			return false, err
		}
	}
	if config.Progress != nil {
		config.Progress(desc.Size)
	}
	logger.Debugf("kept the layer in place as an EROFS tar index over its blob")
	return true, nil
}

// checkpointShaped reads the tar headers of the blob at path, skipping the
// file contents, and fails unless it holds only directories and regular
// files, among them a checkpoint/ directory.
func checkpointShaped(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f) // skips contents by seeking: f is an io.Seeker
	found := false
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		} else if err != nil {
			return err
		}
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Clean("/"+hdr.Name), "/"), "/")
		found = found || name == "checkpoint" || strings.HasPrefix(name, "checkpoint/")
		switch hdr.Typeflag {
		case tar.TypeDir, tar.TypeReg:
		default:
			return fmt.Errorf("%s is not a directory or regular file (type %q)", hdr.Name, hdr.Typeflag)
		}
	}
	if !found {
		return fmt.Errorf("no checkpoint/ directory")
	}
	return nil
}

// syncIndex makes the index and its directory entries durable, as the
// extraction does when asked to sync.
func syncIndex(index, dir string) error {
	for _, p := range []string{index, dir} {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("sync %s: %w", p, err)
		}
	}
	return nil
}
