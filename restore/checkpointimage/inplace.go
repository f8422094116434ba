// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/moby/sys/mountinfo"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/mount"
	"rekindle.local/contract/layout"
)

const (
	labelGCSnapshotBackRef = "containerd.io/gc.bref.snapshot."
	// labelInPlaceIndex names the index a mount was made of: the mount
	// manager keeps no mount's source.
	labelInPlaceIndex = "org.rekindle.checkpoint.in-place-index"
)

// errMountInPlace marks a checkpoint layer kept in place that this host
// or this restorer cannot mount.
var errMountInPlace = errors.New("cannot mount the checkpoint layer in place")

// inPlaceShaped reports whether dir holds exactly the two files of the
// in-place form of the checkpoint layer of ci (an EROFS tar index and
// what should be a hard link of the layer's blob), whoever wrote them.
func inPlaceShaped(ci *Image, dir string) bool {
	if ci.Layer.MediaType != ocispec.MediaTypeImageLayer && ci.Layer.MediaType != images.MediaTypeDockerSchema2Layer {
		return false
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 2 {
		return false
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || (e.Name() != layout.InPlaceIndex && e.Name() != layout.InPlaceBlob) {
			return false
		}
	}
	return true
}

// inPlace reports whether dir holds the checkpoint layer of ci kept in
// place by the applier (an EROFS tar index beside a hard link of the
// layer's blob) rather than its extracted tree. It decides from the
// directory, not from the image's annotation, which another image of the
// same layer may lack; and only a link of the blob itself passes: the
// form's layer.tar must be the very file (inode) that the content store
// keeps the layer's blob in (isLayerBlob). An extracted layer can plant
// both names, and its layer.tar can state any size (a PAX sparse file of
// the blob's size costs a few bytes), but it is never the blob: it is read
// as a tree, and its index is never mounted.
func (r *Restorer) inPlace(ctx context.Context, ci *Image, dir string) bool {
	return inPlaceShaped(ci, dir) && r.isLayerBlob(ctx, ci.Layer, filepath.Join(dir, layout.InPlaceBlob)) == nil
}

// isLayerBlob returns nil when the file at path is the content store's
// blob of layer itself (the applier hard-links it), and why not otherwise.
func (r *Restorer) isLayerBlob(ctx context.Context, layer ocispec.Descriptor, path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if r.Content == nil {
		return fmt.Errorf("no content store to find the blob of layer %s in", layer.Digest)
	}
	ra, err := r.Content.ReaderAt(ctx, layer)
	if err != nil {
		return fmt.Errorf("blob of layer %s: %w", layer.Digest, err)
	}
	defer ra.Close()
	f, ok := ra.(interface{ File() *os.File })
	if !ok {
		return fmt.Errorf("the content store does not keep the blob of layer %s as a local file", layer.Digest)
	}
	bi, err := f.File().Stat()
	if err != nil {
		return err
	}
	if !os.SameFile(fi, bi) {
		return fmt.Errorf("%s is not the content store's blob of layer %s", path, layer.Digest)
	}
	return nil
}

// inPlaceDirectBelow is the share of a blob in the page cache, in percent,
// under which its in-place mount reads it with direct I/O. EROFS reads the
// blob of a file-backed mount through the blob's own page cache by
// default: a cold read then fills two page caches, the blob's and the
// mount's, and is copied between them. With directio (Linux 6.13) it reads
// the blob straight into the mount's. A blob mostly cached (just pulled,
// say) is read faster from where it is.
const inPlaceDirectBelow = 25

// inPlaceDirectRefused is set once a mount failed with directio and
// succeeded without it.
var inPlaceDirectRefused atomic.Bool

// mountInPlace mounts the EROFS tar index in dir, the directory of view in
// snapshotter snName, and returns where the checkpoint layer's files are:
// CRIU then reads its pages from the layer's blob where they lie, with
// nothing unpacked. The mount manager holds the mount for as long as view
// exists (the garbage collector unmounts it with the view), so later
// restores through view find the mount, and its page cache, in place. A
// failure to mount is errMountInPlace.
func (r *Restorer) mountInPlace(ctx context.Context, snName, view, dir string, layer digest.Digest) (string, error) {
	if r.Mounts == nil {
		return "", fmt.Errorf("%w: no mount manager", errMountInPlace)
	}
	name := view + "/erofs"
	index := filepath.Join(dir, layout.InPlaceIndex)
	// Concurrent callers race through here: the mount manager activates a
	// name once, and the loser reads the winner's mount.
	for range 2 {
		if info, err := r.Mounts.Info(ctx, name); err == nil {
			if n := len(info.Active); n > 0 && info.Labels[labelInPlaceIndex] == index {
				if ok, _ := mountinfo.Mounted(info.Active[n-1].MountPoint); ok {
					return info.Active[n-1].MountPoint, nil
				}
			}
			// Left from an earlier view of that name, or unmounted since.
			if err := r.Mounts.Deactivate(ctx, name); err != nil && !errdefs.IsNotFound(err) {
				return "", fmt.Errorf("drop stale mount %s: %w", name, err)
			}
		} else if !errdefs.IsNotFound(err) {
			return "", err
		}
		blob := filepath.Join(dir, layout.InPlaceBlob)
		// CRIU only reads image files from it.
		opts := []string{"ro", "nosuid", "nodev", "noexec", "device=" + blob}
		activate := func(opts []string) (mount.ActivationInfo, error) {
			return r.Mounts.Activate(ctx, name, []mount.Mount{{Type: "erofs", Source: index, Options: opts}},
				mount.WithLabels(map[string]string{labelGCSnapshotBackRef + snName: view, labelInPlaceIndex: index}))
		}
		// Decided once: later restores read through the same mount.
		how, cachedHow := "buffered", "unknown"
		cached, cerr := cachedPercent(blob)
		if cerr == nil {
			cachedHow = fmt.Sprintf("%d%%", cached)
		}
		direct := cerr == nil && cached < inPlaceDirectBelow && !inPlaceDirectRefused.Load()
		try := opts
		if direct {
			how = "direct I/O"
			try = append(slices.Clip(opts), "directio")
		}
		info, err := activate(try)
		if err != nil && direct && !errdefs.IsAlreadyExists(err) {
			// Linux 6.12 mounts files, but knows no directio; any other
			// failure is tried once more without it too.
			how = "buffered"
			if info, err = activate(opts); err == nil {
				inPlaceDirectRefused.Store(true)
				log.G(ctx).Warnf("checkpoint cache: this kernel refuses EROFS's directio: checkpoint layers kept in place are mounted buffered")
			}
		}
		if errdefs.IsAlreadyExists(err) {
			continue
		} else if err != nil {
			return "", fmt.Errorf("%w (layer %s): %w", errMountInPlace, layer, err)
		}
		mp := info.Active[len(info.Active)-1].MountPoint
		log.G(ctx).WithField("mount", mp).Infof("checkpoint cache: mounted checkpoint layer %s in place (EROFS tar index over its blob, %s: %s of the blob in the page cache)",
			layer, how, cachedHow)
		return mp, nil
	}
	return "", fmt.Errorf("%w (layer %s): mount %s keeps changing", errMountInPlace, layer, name)
}

// unmountInPlace drops the mount that mountInPlace made for view, if any.
func (r *Restorer) unmountInPlace(ctx context.Context, view string) error {
	if r.Mounts == nil {
		return nil
	}
	if err := r.Mounts.Deactivate(ctx, view+"/erofs"); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	return nil
}
