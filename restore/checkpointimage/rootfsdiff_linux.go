// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/continuity/fs"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/archive"
	"github.com/containerd/containerd/v2/pkg/archive/compression"
)

// applyToOverlayUpper applies the checkpoint's rootfs diff and deleted.files
// (read from dataDir) into the upper directory of an overlay snapshot, as
// containerd's applier unpacks a layer there, with deletions as overlay
// whiteouts. It reports false when mounts are not such a snapshot.
//
// Mounting the overlay to apply the diff would cost, on unmount, a sync of
// the whole upper file system: on a first restore that holds the checkpoint
// layer just unpacked and not yet written back (8.1 s of container-setup
// for a 16.7 GB checkpoint, against 0.01 s cached).
func applyToOverlayUpper(ctx context.Context, mounts []mount.Mount, dataDir string) (bool, error) {
	if len(mounts) != 1 || mounts[0].Type != "overlay" {
		return false, nil
	}
	var upper string
	var lowers []string
	for _, o := range mounts[0].Options {
		if v, ok := strings.CutPrefix(o, "upperdir="); ok {
			upper = v
		} else if v, ok := strings.CutPrefix(o, "lowerdir="); ok {
			lowers = strings.Split(v, ":")
		}
	}
	if upper == "" {
		return false, nil
	}
	opts := []archive.ApplyOpt{archive.WithConvertWhiteout(archive.OverlayConvertWhiteout), archive.WithParents(lowers)}

	f, err := os.Open(filepath.Join(dataDir, crmetadata.RootFsDiffTar))
	switch {
	case err == nil:
		defer f.Close()
		ds, err := compression.DecompressStream(f)
		if err != nil {
			return true, fmt.Errorf("%s: %w", crmetadata.RootFsDiffTar, err)
		}
		defer ds.Close()
		if _, err := archive.Apply(ctx, upper, ds, opts...); err != nil {
			return true, fmt.Errorf("apply %s: %w", crmetadata.RootFsDiffTar, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return true, err
	}

	deleted, _, err := crmetadata.ReadContainerCheckpointDeletedFiles(dataDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return true, nil
		}
		return true, fmt.Errorf("read %s: %w", crmetadata.DeletedFilesFile, err)
	}
	// Each deletion is a whiteout entry (.wh.NAME), which the overlay
	// converter turns into the whiteout device; what the diff put in the
	// upper directory under that name goes first.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range deleted {
		clean := path.Clean("/" + filepath.ToSlash(name))
		if clean == "/" {
			continue
		}
		p, err := fs.RootPath(upper, clean)
		if err != nil {
			return true, fmt.Errorf("%s entry %q: %w", crmetadata.DeletedFilesFile, name, err)
		}
		if err := os.RemoveAll(p); err != nil {
			return true, fmt.Errorf("%s entry %q: %w", crmetadata.DeletedFilesFile, name, err)
		}
		dir, base := path.Split(clean)
		hdr := &tar.Header{Name: strings.TrimPrefix(dir, "/") + ".wh." + base, Typeflag: tar.TypeReg, Mode: 0o600}
		if err := tw.WriteHeader(hdr); err != nil {
			return true, err
		}
	}
	if err := tw.Close(); err != nil {
		return true, err
	}
	if _, err := archive.Apply(ctx, upper, &buf, opts...); err != nil {
		return true, fmt.Errorf("apply %s: %w", crmetadata.DeletedFilesFile, err)
	}
	return true, nil
}
