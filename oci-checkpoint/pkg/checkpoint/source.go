package checkpoint

import (
	"context"
	"fmt"
	"strings"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/opencontainers/go-digest"
)

// Where the patched containerd keeps the root filesystem of a container it
// restored from a checkpoint image (containerd-patches/tasks-restore-containers-created-from-checkpoint-ima, restore/checkpointimage/unpacked.go): the
// container's own snapshot holds the checkpoint archive, not the files the
// engine sees; those are in restoredRootfsPrefix+ID, on top of a cache
// snapshot that holds the base image with the first rootfs diff applied.
const (
	restoredRootfsPrefix = "checkpoint-restore/"
	cacheSnapshotPrefix  = "checkpoint-cache/"
)

// source returns info as a checkpoint needs it, the snapshot its rootfs
// diff is taken against ("": the snapshot's parent), and, for a restored
// container, the digest its checkpoint recorded for the base image. For a container that
// was itself restored from a checkpoint image, that is the image it was
// first made from (the checkpoint's recorded base image), the snapshot its
// root filesystem really lives in, and the base image's own top snapshot
// below the restore cache's: so checkpointing it again gives an image whose
// base and rootfs diff are complete. Other containers come back as they are.
func source(ctx context.Context, c *client.Client, info containers.Container) (containers.Container, string, digest.Digest, error) {
	img, err := c.ImageService().Get(ctx, info.Image)
	if errdefs.IsNotFound(err) {
		return info, "", "", nil // the base image must then be pulled back: pack says so
	} else if err != nil {
		return info, "", "", err
	}
	m, err := images.Manifest(ctx, c.ContentStore(), img.Target, platforms.Default())
	if err != nil {
		return info, "", "", err
	}
	base, ok := m.Annotations[crmetadata.CheckpointAnnotationRootfsImageName]
	if !ok {
		return info, "", "", nil
	}
	// A malformed digest is left out: the base is then looked up by name.
	baseDigest, _ := digest.Parse(m.Annotations[crmetadata.CheckpointAnnotationRootfsImageID])
	if base == "" {
		return info, "", "", fmt.Errorf("container %s runs checkpoint image %s, which names no base image (%s): it cannot be checkpointed again",
			info.ID, info.Image, crmetadata.CheckpointAnnotationRootfsImageName)
	}
	out := info
	out.Image = base
	sn := c.SnapshotService(info.Snapshotter)
	key := restoredRootfsPrefix + info.ID
	st, err := sn.Stat(ctx, key)
	if errdefs.IsNotFound(err) {
		return out, "", baseDigest, nil // restored through CRI: the container's snapshot is its rootfs
	} else if err != nil {
		return info, "", "", err
	}
	out.SnapshotKey = key
	lower := st.Parent
	for strings.HasPrefix(lower, cacheSnapshotPrefix) || strings.HasPrefix(lower, restoredRootfsPrefix) {
		p, err := sn.Stat(ctx, lower)
		if err != nil {
			return info, "", "", fmt.Errorf("restored container %s: snapshot %s: %w", info.ID, lower, err)
		}
		lower = p.Parent
	}
	return out, lower, baseDigest, nil
}
