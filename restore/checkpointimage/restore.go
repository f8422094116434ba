// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/containerd/platforms"
	"github.com/opencontainers/image-spec/identity"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/diff"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/rootfs"
	"rekindle.local/contract/layout"
)

const (
	// restoreKeyPrefix names the snapshots made for one restored container.
	restoreKeyPrefix = "checkpoint-restore/"

	labelGCContainerBackRef = "containerd.io/gc.bref.container"
	labelGCSnapshotRef      = "containerd.io/gc.ref.snapshot."
)

// Restorer turns a container whose image is a checkpoint image into the
// inputs of a restore: the CRIU images and a root filesystem made of the
// checkpoint's base image plus its rootfs diff.
type Restorer struct {
	Images  images.Store
	Content content.Store
	Leases  leases.Manager
	Applier diff.Applier
	// Snapshotter returns the snapshotter of the given name, nil if unknown.
	Snapshotter func(name string) snapshots.Snapshotter
	// Mounts mounts a checkpoint layer that the applier kept in place; nil
	// makes such a layer extracted instead.
	Mounts mount.Manager
	// Platform selects the manifests of the checkpoint and base images.
	Platform platforms.MatchComparer
	// Pull fetches a base image that is not in the local store; nil
	// makes a missing base image an error.
	Pull Puller
	// Host returns the facts of this host that Preflight compares; nil
	// reads them from /proc.
	Host func() Host
	// Policy says which checkpoint images this host restores; nil
	// restores none.
	Policy *Policy
	// Containers, when set, tells which containers still exist, so that
	// dropping a damaged cache entry first removes the snapshots of
	// restored containers already deleted; nil leaves them to the GC.
	Containers containers.Store

	// inFlight counts the restores of each checkpoint layer between
	// Prepare and Done, so that Forget never removes files one reads.
	inFlight inFlight
	// decodes are the decoded copies of entries to make (decoded.go).
	decodes decodes
}

// Restore holds what the runtime needs to restore a container.
type Restore struct {
	Image *Image
	// ImagePath is the directory of CRIU images.
	ImagePath string
	// Rootfs are the mounts of the restored container's root filesystem.
	Rootfs []mount.Mount
	// Spec is the spec the checkpointed container ran with.
	DumpedSpec *specs.Spec
	// Config is the checkpoint's config.dump.
	Config *crmetadata.ContainerConfig
	// Fallback is set when this host cannot restore the image and the
	// image asks for a cold start instead: ImagePath is then empty and
	// Rootfs is the base image's, without the checkpoint's rootfs diff.
	Fallback *Fallback
}

// Fallback is a cold start in place of a restore.
type Fallback struct {
	// Reasons say why this host cannot restore the image.
	Reasons []string
	// BaseImage is the image the container starts from.
	BaseImage string
	// Spec is the container's spec running the checkpointed container's
	// process afresh.
	Spec *specs.Spec
}

// Prepare returns the restore inputs for container c, or nil when c's image
// is not a checkpoint image.
//
// A restore that Prepare returns is in flight until Done is called with its
// checkpoint layer, which the caller does once the runtime has restored
// the container or failed to.
func (r *Restorer) Prepare(ctx context.Context, c containers.Container) (*Restore, error) {
	return r.prepare(ctx, c, nil)
}

// PrepareCold returns the inputs of a cold start of container c after the
// runtime failed to restore it with failure, when c's image asks for a
// cold start (WantsColdFallback); the Restore's Fallback is set. It is in
// flight until Done, as a restore is.
func (r *Restorer) PrepareCold(ctx context.Context, c containers.Container, failure error) (*Restore, error) {
	res, err := r.prepare(ctx, c, failure)
	if err == nil && res == nil {
		err = fmt.Errorf("image %s of container %s is not a checkpoint image: %w", c.Image, c.ID, errdefs.ErrInvalidArgument)
	}
	return res, err
}

func (r *Restorer) prepare(ctx context.Context, c containers.Container, failure error) (res *Restore, err error) {
	if c.Image == "" {
		return nil, nil
	}
	img, err := r.Images.Get(ctx, c.Image)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	ci, err := Detect(ctx, r.Content, img, r.platform())
	if err != nil || ci == nil {
		return nil, err
	}
	r.inFlight.add(ci.Layer.Digest, 1)
	defer func() {
		if err != nil {
			r.Done(ci.Layer.Digest)
		}
	}()
	log.G(ctx).WithField("container", c.ID).Infof("image %s is a checkpoint of container %q: restoring instead of starting", ci.Name, ci.ContainerName)

	// A host that cannot restore the image is found out before any work,
	// rather than by CRIU or, after the restore, by a SIGILL.
	// A restore the runtime failed is not checked again for its GPUs.
	var spec *specs.Spec
	if failure == nil {
		spec = specOf(c)
	}
	reasons, err := r.check(ci, spec)
	if err != nil {
		return nil, err
	}
	failedAt := FailedPreflight
	if failure != nil {
		if !WantsColdFallback(ci.Manifest.Annotations) {
			return nil, fmt.Errorf("checkpoint image %s does not ask for a cold start (%s=%s): %w",
				ci.Name, AnnotationFallback, FallbackCold, errdefs.ErrFailedPrecondition)
		}
		reasons, failedAt = RuntimeFailure(failure), FailedInRuntime
	}

	if c.Snapshotter == "" {
		return nil, fmt.Errorf("container %s has no snapshotter; a checkpoint image needs one for its root filesystem: %w", c.ID, errdefs.ErrInvalidArgument)
	}
	sn := r.Snapshotter(c.Snapshotter)
	if sn == nil {
		return nil, fmt.Errorf("snapshotter %q of container %s: %w", c.Snapshotter, c.ID, errdefs.ErrNotFound)
	}

	ctx, done, err := r.withLease(ctx)
	if err != nil {
		return nil, err
	}
	defer done()

	dataDir, err := r.holdData(ctx, sn, c.Snapshotter, ci, c.ID)
	if err != nil {
		return nil, err
	}
	defer func() {
		// A restore that will not read the entry lets it go.
		if err != nil || (res != nil && res.Fallback != nil) {
			if rerr := removeIfExists(context.WithoutCancel(ctx), sn, holdKey(c.ID)); rerr != nil {
				log.G(ctx).WithError(rerr).Warn("checkpoint cache: release the hold of a restore that does not read the entry")
			}
		}
	}()
	res = &Restore{Image: ci, ImagePath: filepath.Join(dataDir, crmetadata.CheckpointDirectory)}
	if res.DumpedSpec, _, err = crmetadata.ReadContainerCheckpointSpecDump(dataDir); err != nil {
		return nil, fmt.Errorf("checkpoint image %s: %w", ci.Name, err)
	}
	if res.Config, _, err = crmetadata.ReadContainerCheckpointConfigDump(dataDir); err != nil {
		return nil, fmt.Errorf("checkpoint image %s: %w", ci.Name, err)
	}
	var current *specs.Spec
	if c.Spec != nil {
		current = new(specs.Spec)
		if err := json.Unmarshal(c.Spec.GetValue(), current); err != nil {
			return nil, fmt.Errorf("spec of container %s: %w", c.ID, err)
		}
	}
	if len(reasons) == 0 {
		if err := CheckMounts(res.DumpedSpec, current); err != nil {
			return nil, fmt.Errorf("cannot restore checkpoint image %s into container %s: %w", ci.Name, c.ID, err)
		}
	}

	base, err := ResolveBase(ctx, r.Images, r.Content, r.platform(), BaseRefFromConfig(res.Config), r.Pull)
	if err != nil {
		return nil, fmt.Errorf("cannot restore checkpoint image %s: %w", ci.Name, err)
	}
	chainID, err := r.unpack(ctx, sn, c.Snapshotter, base)
	if err != nil {
		return nil, fmt.Errorf("unpack base image %s of checkpoint image %s: %w", base.Name, ci.Name, err)
	}
	if len(reasons) > 0 {
		return r.cold(ctx, sn, c, current, res, base.Name, chainID, failedAt, reasons)
	}
	res.ImagePath = r.decodedImages(ctx, sn, c.Snapshotter, ci, c.ID, res.ImagePath)
	if res.Rootfs, err = r.rootfs(ctx, sn, c.Snapshotter, c, ci, chainID, dataDir); err != nil {
		return nil, fmt.Errorf("root filesystem of checkpoint image %s: %w", ci.Name, err)
	}
	return res, nil
}

// cold turns res into a cold start of the checkpointed container's process
// on a fresh snapshot of its base image, unpacked as chainID, because the
// restore failed at failedAt (preflight, in the runtime) for reasons.
func (r *Restorer) cold(ctx context.Context, sn snapshots.Snapshotter, c containers.Container, current *specs.Spec, res *Restore, base, chainID, failedAt string, reasons []string) (*Restore, error) {
	if current == nil {
		return nil, fmt.Errorf("container %s has no spec to start cold: %w", c.ID, errdefs.ErrInvalidArgument)
	}
	key := restoreKeyPrefix + c.ID
	if err := removeIfExists(ctx, sn, key); err != nil {
		return nil, err
	}
	mounts, err := sn.Prepare(ctx, key, chainID, snapshots.WithLabels(map[string]string{labelGCContainerBackRef: c.ID}))
	if err != nil {
		return nil, fmt.Errorf("root filesystem from base image %s: %w", base, err)
	}
	LogFallback(ctx, c.ID, res.Image.Name, failedAt, reasons, base)
	res.ImagePath = ""
	res.Rootfs = mounts
	res.Fallback = &Fallback{Reasons: reasons, BaseImage: base, Spec: ColdSpec(current, res.DumpedSpec, r.imageConfig(ctx, res.Image))}
	return res, nil
}

// imageConfig returns the config of checkpoint image ci, whose defaults
// the container's spec holds where the user set nothing; nil when it
// cannot be read.
func (r *Restorer) imageConfig(ctx context.Context, ci *Image) *ocispec.ImageConfig {
	p, err := content.ReadBlob(ctx, r.Content, ci.Manifest.Config)
	var img ocispec.Image
	if err == nil {
		err = json.Unmarshal(p, &img)
	}
	if err != nil {
		log.G(ctx).WithError(err).Warnf("config of checkpoint image %s: the cold start takes the checkpointed process's arguments and environment as they were", ci.Name)
		return nil
	}
	return &img.Config
}

// Check runs the host's policy (name and signature) and Preflight for
// checkpoint image ci on this host. When the host may not or cannot restore
// ci, it returns why if ci asks for a cold start instead, and an error
// saying why (a PolicyError, a SignatureError, a PreflightError) if it does
// not.
func (r *Restorer) Check(ci *Image) ([]string, error) {
	return r.check(ci, nil)
}

// check is Check, comparing also the GPUs that spec, the new container's,
// gives it with the checkpoint's (CheckGPUs) where spec is known. The
// host's facts are read once for both.
func (r *Restorer) check(ci *Image, spec *specs.Spec) ([]string, error) {
	if err := r.Policy.CheckImage(ci); err != nil {
		var refusal Refusal
		if !errors.As(err, &refusal) || !WantsColdFallback(ci.Manifest.Annotations) {
			return nil, err
		}
		// Nothing of the image is restored: a cold start runs its base
		// image with the new container's own spec.
		return []string{refusal.Reason()}, nil
	}
	h := r.host()
	reasons := append(Preflight(ci.Manifest.Annotations, h), CheckGPUs(ci.Manifest.Annotations, spec, h)...)
	if len(reasons) > 0 && !WantsColdFallback(ci.Manifest.Annotations) {
		return nil, fmt.Errorf("%w (the image sets no %s=%s to start cold instead)",
			&PreflightError{Image: ci.Name, Reasons: reasons}, AnnotationFallback, FallbackCold)
	}
	return reasons, nil
}

func (r *Restorer) host() Host {
	if r.Host != nil {
		return r.Host()
	}
	return ReadHost("/proc")
}

func (r *Restorer) platform() platforms.MatchComparer {
	if r.Platform != nil {
		return r.Platform
	}
	return platforms.Default()
}

// withLease keeps what a restore creates from the garbage collector until
// it is referenced by a container, an image's content or another snapshot.
// The lease expires, so a daemon killed mid-restore leaks nothing for long.
func (r *Restorer) withLease(ctx context.Context) (context.Context, func(), error) {
	if r.Leases == nil {
		return ctx, func() {}, nil
	}
	if _, ok := leases.FromContext(ctx); ok {
		return ctx, func() {}, nil
	}
	l, err := r.Leases.Create(ctx, leases.WithRandomID(), leases.WithExpiration(time.Hour))
	if err != nil {
		return nil, nil, err
	}
	return leases.WithLease(ctx, l.ID), func() {
		if err := r.Leases.Delete(context.WithoutCancel(ctx), l); err != nil {
			log.G(ctx).WithError(err).Warn("failed to delete checkpoint restore lease")
		}
	}, nil
}

// CheckpointDir returns the directory of the extracted checkpoint layer of
// ci in snapshotter snName, from the cache, extracting it on a miss. CRI
// restores read it in place, as Prepare does.
func (r *Restorer) CheckpointDir(ctx context.Context, snName string, ci *Image) (string, error) {
	sn := r.Snapshotter(snName)
	if sn == nil {
		return "", fmt.Errorf("snapshotter %q for the checkpoint cache: %w", snName, errdefs.ErrNotFound)
	}
	ctx, done, err := r.withLease(ctx)
	if err != nil {
		return "", err
	}
	defer done()
	return r.checkpointData(ctx, sn, snName, ci)
}

// HoldCheckpointDir gives container id a view of its own of the extracted
// checkpoint of ci in snapshotter snName, which the garbage collector keeps
// as long as the container exists, and returns the view's directory. A CRI
// restore reads its CRIU images only at StartContainer: without a hold, the
// cache entry it found at CreateContainer could be pruned in between (by
// cache-gc, or by the collector once the image is gone). The entry must be
// in the cache (CheckpointDir put it there) and the caller's lease must
// cover the time until the container exists.
func (r *Restorer) HoldCheckpointDir(ctx context.Context, snName string, ci *Image, id string) (string, error) {
	sn := r.Snapshotter(snName)
	if sn == nil {
		return "", fmt.Errorf("snapshotter %q for the checkpoint cache: %w", snName, errdefs.ErrNotFound)
	}
	key := holdKey(id)
	mounts, err := viewHold(ctx, sn, ci, id)
	if err != nil {
		return "", err
	}
	dir, err := r.dataDir(ctx, sn, snName, key, mounts, ci)
	if err != nil {
		if rerr := sn.Remove(context.WithoutCancel(ctx), key); rerr != nil {
			log.G(ctx).WithError(rerr).Warnf("remove snapshot %s", key)
		}
		return "", err
	}
	return dir, nil
}

// viewHold makes container id's hold on the extracted checkpoint of ci in
// sn (holdKey), a view of the entry's data, and returns its mounts.
func viewHold(ctx context.Context, sn snapshots.Snapshotter, ci *Image, id string) ([]mount.Mount, error) {
	info, err := sn.Stat(ctx, cacheKey(ci.Layer.Digest)+"/data-view")
	if err != nil {
		return nil, fmt.Errorf("extracted checkpoint of checkpoint image %s: %w", ci.Name, err)
	}
	key := holdKey(id)
	if err := removeIfExists(ctx, sn, key); err != nil {
		return nil, err
	}
	return sn.View(ctx, key, info.Parent, snapshots.WithLabels(map[string]string{labelGCContainerBackRef: id}))
}

// ReleaseCheckpointDir drops the view that HoldCheckpointDir gave container
// id in snapshotter snName, once the container no longer restores from it,
// unmounting at once the layer kept in place if it was mounted for it; the
// cache entry is then free to go. A container without one is left as is.
func (r *Restorer) ReleaseCheckpointDir(ctx context.Context, snName, id string) error {
	sn := r.Snapshotter(snName)
	if sn == nil {
		return fmt.Errorf("snapshotter %q for the checkpoint cache: %w", snName, errdefs.ErrNotFound)
	}
	key := restoreKeyPrefix + id + "/checkpoint"
	if err := r.unmountInPlace(ctx, key); err != nil {
		return err
	}
	if err := removeIfExists(ctx, sn, decodedHoldKey(id)); err != nil {
		return err
	}
	return removeIfExists(ctx, sn, key)
}

// ReleaseTask lets go of what the restore of container id took in
// snapshotter snName, once its task is deleted: the hold on its cache
// entry (ReleaseCheckpointDir) and the root filesystem that Prepare or
// PrepareCold made for it, which the runtime no longer mounts and the next
// restore prepares afresh. The collector would remove the root filesystem
// with the container, but only on its next run, minutes later on a busy
// host, and a container can be kept for long after its task. A container
// restored from no checkpoint image is left as is.
func (r *Restorer) ReleaseTask(ctx context.Context, snName, id string) error {
	sn := r.Snapshotter(snName)
	if sn == nil {
		return nil
	}
	key := restoreKeyPrefix + id
	_, err := sn.Stat(ctx, key)
	if errdefs.IsNotFound(err) {
		_, err = sn.Stat(ctx, holdKey(id))
	}
	if errdefs.IsNotFound(err) {
		// Most tasks restore nothing: no write for them.
		return nil
	}
	if err := r.ReleaseCheckpointDir(ctx, snName, id); err != nil {
		return err
	}
	return removeIfExists(ctx, sn, key)
}

// ResetSnapshot replaces the active snapshot key in snapshotter snName by a
// new one on the same parent, with the same labels: the root filesystem as
// its parent has it, for a cold start in a snapshot that a failed restore
// has changed (a CRI restore applies the checkpoint's rootfs diff to the
// container's own snapshot). A lease keeps the parent in between.
func (r *Restorer) ResetSnapshot(ctx context.Context, snName, key string) error {
	sn := r.Snapshotter(snName)
	if sn == nil {
		return fmt.Errorf("snapshotter %q: %w", snName, errdefs.ErrNotFound)
	}
	ctx, done, err := r.withLease(ctx)
	if err != nil {
		return err
	}
	defer done()
	info, err := sn.Stat(ctx, key)
	if err != nil {
		return err
	}
	if info.Kind != snapshots.KindActive {
		return fmt.Errorf("snapshot %s is %s, not active: %w", key, info.Kind, errdefs.ErrFailedPrecondition)
	}
	if l, ok := leases.FromContext(ctx); ok && r.Leases != nil && info.Parent != "" {
		if err := r.Leases.AddResource(ctx, leases.Lease{ID: l}, leases.Resource{ID: info.Parent, Type: "snapshots/" + snName}); err != nil {
			return fmt.Errorf("lease the parent of snapshot %s: %w", key, err)
		}
	}
	if err := sn.Remove(ctx, key); err != nil {
		return fmt.Errorf("remove snapshot %s: %w", key, err)
	}
	if _, err := sn.Prepare(ctx, key, info.Parent, snapshots.WithLabels(info.Labels)); err != nil {
		return fmt.Errorf("prepare snapshot %s again on %s: %w", key, info.Parent, err)
	}
	return nil
}

// checkpointData returns the directory of the extracted checkpoint layer:
// a view of the checkpoint image's own unpacked snapshot when the client
// unpacked the image before creating the container (nerdctl and CRI do),
// else a copy extracted into the cache on the first restore.
func (r *Restorer) checkpointData(ctx context.Context, sn snapshots.Snapshotter, snName string, ci *Image) (string, error) {
	view := cacheKey(ci.Layer.Digest) + "/data-view"
	defer lockEntry(snName + "/" + view)()
	if err := r.checkBlobSize(ctx, ci); err != nil {
		r.dropDamaged(ctx, sn, snName, ci, err)
		return "", err
	}
	if mounts, err := sn.Mounts(ctx, view); err == nil {
		log.G(ctx).WithField("snapshot", view).Infof("checkpoint cache hit: extracted checkpoint of checkpoint layer %s", ci.Layer.Digest)
		rebuild, err := r.checkStamp(ctx, sn, snName, view, mounts, ci)
		if err != nil {
			return "", err
		}
		dir := ""
		if !rebuild {
			dir, err = r.dataDir(ctx, sn, snName, view, mounts, ci)
		}
		if !rebuild && !errors.Is(err, errMountInPlace) {
			return dir, err
		}
		// The layer was read in place before, but no longer can be (a new
		// kernel, no loop devices left): set the entry up again, which
		// extracts the layer.
		log.G(ctx).WithError(err).Warnf("checkpoint cache: rebuilding the entry of checkpoint layer %s", ci.Layer.Digest)
		if err := sn.Remove(ctx, view); err != nil && !errdefs.IsNotFound(err) {
			return "", err
		}
	} else if !errdefs.IsNotFound(err) {
		return "", err
	}

	parent, err := r.unpackedCheckpoint(ctx, sn, snName, ci)
	if err != nil {
		return "", err
	}
	if parent == "" {
		parent = cacheKey(ci.Layer.Digest) + "/data"
		if err := cachedSnapshot(ctx, sn, snName, parent, "", ci.Layer.Digest, "extracted checkpoint",
			func(ctx context.Context, mounts []mount.Mount) error {
				dir, err := bindDir(mounts)
				if err != nil {
					return err
				}
				return extractLayer(ctx, r.Content, ci.Layer, dir)
			}); err != nil {
			return "", fmt.Errorf("extract checkpoint image %s: %w", ci.Name, withImage(err, ci.Name))
		}
	}
	mounts, err := sn.View(ctx, view, parent, snapshots.WithLabels(cacheLabels(ci.Layer.Digest)))
	if errdefs.IsAlreadyExists(err) {
		mounts, err = sn.Mounts(ctx, view)
	}
	if err != nil {
		return "", err
	}
	if err := r.stampEntry(ctx, sn, snName, view, parent, mounts, ci); err != nil {
		return "", err
	}
	return r.dataDir(ctx, sn, snName, view, mounts, ci)
}

// dataDir returns the directory of the checkpoint layer behind view, the
// mounts of a view of the layer's snapshot: the view's own directory, or
// where the layer is mounted when the applier kept it in place.
func (r *Restorer) dataDir(ctx context.Context, sn snapshots.Snapshotter, snName, view string, mounts []mount.Mount, ci *Image) (string, error) {
	dir, err := bindDir(mounts)
	if err != nil || !inPlaceShaped(ci, dir) {
		return dir, err
	}
	// Files named as the form's that are not the applier's are no
	// checkpoint: neither mounted nor read.
	if err := r.isLayerBlob(ctx, ci.Layer, filepath.Join(dir, layout.InPlaceBlob)); err != nil {
		return "", fmt.Errorf("%w: %w", errMountInPlace, err)
	}
	return r.mountInPlace(ctx, snName, view, dir, ci.Layer.Digest)
}

// rootfs prepares the restored container's root filesystem: an active
// snapshot on the cached base image chainID with the checkpoint's rootfs
// diff applied.
func (r *Restorer) rootfs(ctx context.Context, sn snapshots.Snapshotter, snName string, c containers.Container, ci *Image, chainID, dataDir string) ([]mount.Mount, error) {
	name := cacheKey(ci.Layer.Digest) + "/rootfs/" + chainID
	if err := cachedSnapshot(ctx, sn, snName, name, chainID, ci.Layer.Digest, "root filesystem",
		func(ctx context.Context, mounts []mount.Mount) error {
			if done, err := applyToOverlayUpper(ctx, mounts, dataDir); done {
				return err
			}
			return mount.WithTempMount(ctx, mounts, func(root string) error {
				return ApplyRootfsDiff(ctx, root, dataDir)
			})
		}); err != nil {
		return nil, err
	}
	key := restoreKeyPrefix + c.ID
	if err := removeIfExists(ctx, sn, key); err != nil {
		return nil, err
	}
	return sn.Prepare(ctx, key, name, snapshots.WithLabels(map[string]string{labelGCContainerBackRef: c.ID}))
}

// unpack makes sure the base image img is unpacked into sn and returns the
// chain ID of its top snapshot.
func (r *Restorer) unpack(ctx context.Context, sn snapshots.Snapshotter, snName string, img images.Image) (string, error) {
	manifest, err := images.Manifest(ctx, r.Content, img.Target, r.platform())
	if err != nil {
		return "", err
	}
	diffIDs, err := images.RootFS(ctx, r.Content, manifest.Config)
	if err != nil {
		return "", err
	}
	if len(diffIDs) != len(manifest.Layers) {
		return "", fmt.Errorf("image %s has %d layers but %d diff IDs: %w", img.Name, len(manifest.Layers), len(diffIDs), errdefs.ErrInvalidArgument)
	}
	chainID := identity.ChainID(diffIDs).String()
	if _, err := sn.Stat(ctx, chainID); err == nil {
		return chainID, nil
	} else if !errdefs.IsNotFound(err) {
		return "", err
	}
	if r.Applier == nil {
		return "", fmt.Errorf("image %s is not unpacked in snapshotter %s: %w", img.Name, snName, errdefs.ErrNotFound)
	}
	log.G(ctx).Infof("unpacking base image %s into snapshotter %s", img.Name, snName)
	layers := make([]rootfs.Layer, len(diffIDs))
	for i := range diffIDs {
		layers[i] = rootfs.Layer{
			Blob: manifest.Layers[i],
			Diff: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: diffIDs[i]},
		}
	}
	if _, err := rootfs.ApplyLayers(ctx, layers, sn, r.Applier); err != nil {
		return "", err
	}
	// Keep the unpacked snapshots as long as the image, as the unpacker does.
	label := labelGCSnapshotRef + snName
	if _, err := r.Content.Update(ctx, content.Info{
		Digest: manifest.Config.Digest,
		Labels: map[string]string{label: chainID},
	}, "labels."+label); err != nil {
		return "", err
	}
	return chainID, nil
}

func removeIfExists(ctx context.Context, sn snapshots.Snapshotter, key string) error {
	if err := sn.Remove(ctx, key); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("remove stale snapshot %s: %w", key, err)
	}
	return nil
}

// bindDir returns the directory behind mounts when they are a single bind
// mount, which is how snapshotters such as overlayfs and native expose a
// snapshot without parents (or a view of a single committed snapshot).
func bindDir(mounts []mount.Mount) (string, error) {
	if len(mounts) == 1 {
		m := mounts[0]
		if m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind") {
			return m.Source, nil
		}
	}
	return "", fmt.Errorf("snapshotter returned %d mount(s) (%+v) where one bind mount of a directory was expected; "+
		"checkpoint images need a snapshotter such as overlayfs or native: %w", len(mounts), mounts, errdefs.ErrNotImplemented)
}

// specOf returns container c's spec, nil where it has none or it does not
// parse (prepare reports that where it needs the spec).
func specOf(c containers.Container) *specs.Spec {
	if c.Spec == nil {
		return nil
	}
	var s specs.Spec
	if json.Unmarshal(c.Spec.GetValue(), &s) != nil {
		return nil
	}
	return &s
}
