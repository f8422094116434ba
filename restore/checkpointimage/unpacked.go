// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/labels"
)

// unpackedCheckpoint returns the committed snapshot holding the checkpoint
// image's one layer as the unpacker applied it, or "" when there is none in
// sn or it may not be used. The unpacker checked the layer against its diff
// ID, so its tree is the layer's content; it is used only when that tree is
// what an extraction would have written: directories and regular files
// (entryAllowed) and a checkpoint/ directory, or the layer kept in place
// (an EROFS tar index over its blob) where this host can mount it.
// Otherwise the layer is extracted as before, which drops the other entries.
func (r *Restorer) unpackedCheckpoint(ctx context.Context, sn snapshots.Snapshotter, snName string, ci *Image) (string, error) {
	if ci.Manifest.Config.Digest == "" {
		return "", nil
	}
	diffIDs, err := images.RootFS(ctx, r.Content, ci.Manifest.Config)
	if err != nil || len(diffIDs) != 1 {
		log.G(ctx).WithError(err).Debugf("checkpoint image %s: no single diff ID, extracting its layer", ci.Name)
		return "", nil
	}
	// The config's diff ID is the image's own word, and the snapshot named
	// by it may be another image's: use it only when this host recorded
	// that diff ID for this image's layer.
	if !r.layerHasDiffID(ctx, ci.Layer, diffIDs[0]) {
		log.G(ctx).Debugf("checkpoint image %s: diff ID %s is not known for its layer %s, extracting it", ci.Name, diffIDs[0], ci.Layer.Digest)
		return "", nil
	}
	chainID := identity.ChainID(diffIDs).String()
	if info, err := sn.Stat(ctx, chainID); errdefs.IsNotFound(err) {
		return "", nil
	} else if err != nil {
		return "", err
	} else if info.Kind != snapshots.KindCommitted {
		return "", nil
	}

	// Look at the tree through a view of its own, so no restore trusts it
	// before it was checked, even if this daemon dies in between.
	tmp := tempKey(cacheKey(ci.Layer.Digest) + "/check")
	mounts, err := sn.View(ctx, tmp, chainID)
	if err != nil {
		return "", err
	}
	defer func() {
		if err := sn.Remove(context.WithoutCancel(ctx), tmp); err != nil {
			log.G(ctx).WithError(err).Warnf("remove snapshot %s", tmp)
		}
	}()
	dir, err := bindDir(mounts)
	kept := err == nil && r.inPlace(ctx, ci, dir)
	if kept {
		err = r.checkInPlace(ctx, snName, tmp, dir, ci.Layer.Digest)
	} else if err == nil {
		err = checkpointTree(dir)
	}
	if err != nil {
		log.G(ctx).WithError(err).Warnf("checkpoint image %s: not using its unpacked snapshot %s, extracting its layer instead", ci.Name, chainID)
		return "", nil
	}
	how := ""
	if kept {
		how = ", read in place through its EROFS tar index"
	}
	log.G(ctx).WithField("snapshot", chainID).Infof("checkpoint cache: using the unpacked checkpoint image as the extracted checkpoint of checkpoint layer %s%s", ci.Layer.Digest, how)
	return chainID, nil
}

// layerHasDiffID reports whether diffID is the uncompressed digest of
// layer: the layer's own digest when it is not compressed, else the
// uncompressed digest the unpacker recorded on its blob when it applied
// and checked it.
func (r *Restorer) layerHasDiffID(ctx context.Context, layer ocispec.Descriptor, diffID digest.Digest) bool {
	if c, err := images.DiffCompression(ctx, layer.MediaType); err == nil && c == "" {
		return layer.Digest == diffID
	}
	info, err := r.Content.Info(ctx, layer.Digest)
	return err == nil && info.Labels[labels.LabelUncompressed] == diffID.String()
}

// checkpointTree checks that dir holds only directories and regular files,
// among them a checkpoint/ directory of CRIU images.
func checkpointTree(dir string) error {
	if fi, err := os.Lstat(filepath.Join(dir, crmetadata.CheckpointDirectory)); err != nil || !fi.IsDir() {
		return fmt.Errorf("no %s/ directory of CRIU images", crmetadata.CheckpointDirectory)
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if t := d.Type(); !t.IsDir() && !t.IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			return fmt.Errorf("%s is not a directory or regular file (mode %s)", rel, t)
		}
		return nil
	})
}

// checkInPlace mounts the checkpoint layer kept in place in dir, the
// directory of view, once: a host that cannot mount it, or a layer whose
// tree holds more than directories and regular files, has the layer
// extracted instead, as for an unpacked tree.
func (r *Restorer) checkInPlace(ctx context.Context, snName, view, dir string, layer digest.Digest) error {
	mp, err := r.mountInPlace(ctx, snName, view, dir, layer)
	if err != nil {
		return err
	}
	err = checkpointTree(mp)
	if uerr := r.unmountInPlace(ctx, view); err == nil {
		err = uerr
	}
	return err
}
