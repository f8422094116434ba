// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
)

// The extracted-checkpoint cache lives in the container's snapshotter, as
// committed snapshots named after the checkpoint layer's digest:
//
//	checkpoint-cache/<layer digest>/data            the extracted layer
//	checkpoint-cache/<layer digest>/data-view       a view of it, whose directory CRIU reads
//	checkpoint-cache/<layer digest>/rootfs/<chain>  base image <chain> + rootfs diff
//	checkpoint-cache/<layer digest>/decoded(-view)  the CRIU images, compressed pages decoded (decoded.go)
//
// An entry is built in an active snapshot with a random key and published by
// Commit, which is atomic: a restore trusts only committed names, so an
// extraction cut short by a crash is never used, and its leftover is
// collected once the restore's lease expires. Each entry carries a back
// reference to the checkpoint layer's content, so the garbage collector
// keeps it exactly as long as some image holds that layer, across restarts.
const (
	cacheKeyPrefix          = "checkpoint-cache/"
	labelGCContentBackRef   = "containerd.io/gc.bref.content"
	labelCheckpointCacheFor = "containerd.io/checkpoint.cache.layer"
)

// cacheLocks serialises building one cache entry within this daemon, so
// concurrent restores of one image extract it once. Commit settles races
// with anything else.
var cacheLocks sync.Map

func lockEntry(key string) func() {
	v, _ := cacheLocks.LoadOrStore(key, &sync.Mutex{})
	mu := v.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

func cacheKey(layer digest.Digest) string {
	return cacheKeyPrefix + layer.String()
}

func cacheLabels(layer digest.Digest) map[string]string {
	return map[string]string{
		labelGCContentBackRef:   layer.String(),
		labelCheckpointCacheFor: layer.String(),
	}
}

// randomID is 16 random hex digits, for names that must not collide.
func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func tempKey(prefix string) string {
	return prefix + "/building-" + randomID()
}

// cachedSnapshot returns committed snapshot name in sn, building it on a
// miss: build fills an active snapshot prepared on parent.
func cachedSnapshot(ctx context.Context, sn snapshots.Snapshotter, snName, name, parent string, layer digest.Digest, what string,
	build func(ctx context.Context, mounts []mount.Mount) error) error {
	defer lockEntry(snName + "/" + name)()

	if _, err := sn.Stat(ctx, name); err == nil {
		log.G(ctx).WithField("snapshot", name).Infof("checkpoint cache hit: %s of checkpoint layer %s", what, layer)
		return nil
	} else if !errdefs.IsNotFound(err) {
		return err
	}
	log.G(ctx).WithField("snapshot", name).Infof("checkpoint cache miss: building %s of checkpoint layer %s", what, layer)

	tmp := tempKey(name)
	mounts, err := sn.Prepare(ctx, tmp, parent)
	if err != nil {
		return err
	}
	if err := build(ctx, mounts); err != nil {
		_ = sn.Remove(context.WithoutCancel(ctx), tmp)
		return err
	}
	if err := sn.Commit(ctx, name, tmp, snapshots.WithLabels(cacheLabels(layer))); err != nil {
		_ = sn.Remove(context.WithoutCancel(ctx), tmp)
		if errdefs.IsAlreadyExists(err) {
			// Another daemon or restore published it first; theirs is as good.
			return nil
		}
		return fmt.Errorf("commit %s: %w", name, err)
	}
	log.G(ctx).WithField("snapshot", name).Infof("checkpoint cache: stored %s of checkpoint layer %s", what, layer)
	return nil
}

// inFlight counts restores per checkpoint layer; its zero value is ready.
type inFlight struct {
	mu sync.Mutex
	n  map[digest.Digest]int
}

// add changes layer's count by d and returns the new count.
func (f *inFlight) add(layer digest.Digest, d int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == nil {
		f.n = map[digest.Digest]int{}
	}
	f.n[layer] += d
	n := f.n[layer]
	if n <= 0 {
		delete(f.n, layer)
	}
	return n
}

// Done ends a restore that Prepare returned, whether the runtime restored
// the container or not.
func (r *Restorer) Done(layer digest.Digest) {
	if r.inFlight.add(layer, -1) == 0 {
		r.startDecode(layer)
	}
}

// Forget drops the cache entry of checkpoint layer from snapshotter snName
// after a restore from it failed, so that the next restore builds it again
// from the image rather than trust files that a full disk or damage may
// have cut short. It leaves the entry alone while another restore of the
// layer is in flight (between Prepare and Done): that one reads the same
// files, and new restores wait until Forget is done. A snapshot still in
// use (a root filesystem under the failed container's own snapshot) stays
// until its user goes, and the garbage collector takes it then.
func (r *Restorer) Forget(ctx context.Context, snName string, layer digest.Digest) error {
	sn := r.Snapshotter(snName)
	if sn == nil {
		return fmt.Errorf("snapshotter %q of the checkpoint cache: %w", snName, errdefs.ErrNotFound)
	}
	// What failed is no source for a decoded copy.
	r.cancelDecode(layer)
	r.inFlight.mu.Lock()
	defer r.inFlight.mu.Unlock()
	if n := r.inFlight.n[layer]; n > 0 {
		log.G(ctx).Infof("checkpoint cache: kept the entry of checkpoint layer %s after a failed restore: %d other restore(s) of it in flight", layer, n)
		return nil
	}
	prefix := cacheKey(layer) + "/"
	// CRI containers hold views of the entry's data from CreateContainer to
	// their removal (HoldCheckpointDir), and may yet restore from it.
	data := ""
	if info, err := sn.Stat(ctx, prefix+"data-view"); err == nil {
		data = info.Parent
	}
	var names []string
	held := 0
	if err := sn.Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		// An entry being built belongs to its builder, which cleans up.
		if strings.HasPrefix(info.Name, prefix) && !strings.Contains(info.Name, "/building-") {
			names = append(names, info.Name)
		}
		if data != "" && info.Parent == data && isHold(info.Name) {
			held++
		}
		// A restore reading the decoded copy (decoded.go) holds it.
		if info.Parent == prefix+decodedSuffix[1:] && strings.HasPrefix(info.Name, restoreKeyPrefix) {
			held++
		}
		return nil
	}); err != nil {
		return err
	}
	if held > 0 {
		log.G(ctx).Infof("checkpoint cache: kept the entry of checkpoint layer %s after a failed restore: %d container(s) hold it", layer, held)
		return nil
	}
	dropped, kept := r.drop(ctx, sn, layer, names)
	log.G(ctx).Infof("checkpoint cache: dropped %d snapshot(s) of checkpoint layer %s after a failed restore, %d still in use", dropped, layer, kept)
	return nil
}

// entryNames lists the committed snapshots and views of layer's entry.
func entryNames(ctx context.Context, sn snapshots.Snapshotter, layer digest.Digest) ([]string, error) {
	prefix := cacheKey(layer) + "/"
	var names []string
	err := sn.Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		if strings.HasPrefix(info.Name, prefix) && !strings.Contains(info.Name, "/building-") {
			names = append(names, info.Name)
		}
		return nil
	})
	return names, err
}

// drop removes the snapshots names of layer's entry but those in use,
// after the snapshots of removed containers made on it.
func (r *Restorer) drop(ctx context.Context, sn snapshots.Snapshotter, layer digest.Digest, names []string) (dropped, kept int) {
	r.removeGone(ctx, sn, cacheKey(layer)+"/")
	return r.dropNames(ctx, sn, layer, names)
}

// dropNames removes the snapshots names of layer's entry but those in use.
func (r *Restorer) dropNames(ctx context.Context, sn snapshots.Snapshotter, layer digest.Digest, names []string) (dropped, kept int) {
	prefix := cacheKey(layer) + "/"
	// Children before their parents: data-view before data. Its mount, if
	// the layer was read in place, goes first.
	if err := r.unmountInPlace(ctx, prefix+"data-view"); err != nil {
		log.G(ctx).WithError(err).Warnf("checkpoint cache: unmount checkpoint layer %s", layer)
	}
	sort.Slice(names, func(i, j int) bool { return len(names[i]) > len(names[j]) })
	for _, name := range names {
		err := sn.Remove(ctx, name)
		switch {
		case err == nil:
			dropped++
		case errdefs.IsNotFound(err):
		default:
			kept++
			log.G(ctx).WithError(err).WithField("snapshot", name).Info("checkpoint cache: kept a snapshot in use")
		}
	}
	return dropped, kept
}

// removeGone removes the snapshots of restored containers that no longer
// exist (root filesystems, holds) made on the entry under prefix. The
// garbage collector takes them in time, through their back-reference
// label, but a restore that follows the container's removal at once would
// otherwise find the entry in use.
func (r *Restorer) removeGone(ctx context.Context, sn snapshots.Snapshotter, prefix string) {
	if r.Containers == nil {
		return
	}
	var gone []string
	if err := sn.Walk(ctx, func(ctx context.Context, info snapshots.Info) error {
		id := info.Labels[labelGCContainerBackRef]
		if id == "" || !strings.HasPrefix(info.Name, restoreKeyPrefix) || !strings.HasPrefix(info.Parent, prefix) {
			return nil
		}
		if _, err := r.Containers.Get(ctx, id); errdefs.IsNotFound(err) {
			gone = append(gone, info.Name)
		}
		return nil
	}); err != nil {
		log.G(ctx).WithError(err).Warn("checkpoint cache: list the snapshots of removed containers")
		return
	}
	for _, name := range gone {
		if err := sn.Remove(ctx, name); err != nil && !errdefs.IsNotFound(err) {
			log.G(ctx).WithError(err).WithField("snapshot", name).Warn("checkpoint cache: remove a removed container's snapshot")
		}
	}
}

// entryUsers counts the snapshots outside names made on one of them: the
// root filesystems and holds of restored containers.
func entryUsers(ctx context.Context, sn snapshots.Snapshotter, names []string) (int, error) {
	in := map[string]bool{}
	for _, n := range names {
		in[n] = true
	}
	users := 0
	err := sn.Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		if in[info.Parent] && !in[info.Name] {
			users++
		}
		return nil
	})
	return users, err
}

// isHold reports whether snapshot name is a container's hold on a cache
// entry (HoldCheckpointDir).
func isHold(name string) bool {
	return strings.HasPrefix(name, restoreKeyPrefix) && strings.HasSuffix(name, "/checkpoint")
}

// holdKey names container id's hold on a cache entry: a view of the
// entry's data, which the snapshotter will not remove from under it.
func holdKey(id string) string {
	return restoreKeyPrefix + id + "/checkpoint"
}

// holdData returns the directory of the extracted checkpoint of ci, as
// checkpointData does, with a hold of container id on it until the
// restore ends (ReleaseHold, ForgetFailed) or the container goes: the data
// cannot be removed under a restore that reads it, by Forget or cache-gc. CRIU
// reads the entry's own data view, whose mount a layer kept in place
// shares between restores. An entry pruned while this restore took it is
// set up again.
func (r *Restorer) holdData(ctx context.Context, sn snapshots.Snapshotter, snName string, ci *Image, id string) (string, error) {
	key := holdKey(id)
	if err := removeIfExists(ctx, sn, key); err != nil {
		return "", err
	}
	view := cacheKey(ci.Layer.Digest) + "/data-view"
	for attempt := 1; ; attempt++ {
		dir, err := r.checkpointData(ctx, sn, snName, ci)
		if err != nil {
			return "", err
		}
		info, err := sn.Stat(ctx, view)
		if err == nil {
			_, err = sn.View(ctx, key, info.Parent, snapshots.WithLabels(map[string]string{labelGCContainerBackRef: id}))
		}
		if err == nil {
			// The view itself may have gone before the hold was there.
			if _, err = sn.Stat(ctx, view); err == nil {
				return dir, nil
			}
			_ = sn.Remove(context.WithoutCancel(ctx), key)
		}
		if !errdefs.IsNotFound(err) || attempt == 3 {
			return "", fmt.Errorf("hold the extracted checkpoint of checkpoint image %s: %w", ci.Name, err)
		}
		log.G(ctx).Infof("checkpoint cache: the entry of checkpoint layer %s went while a restore took it (cache-gc?): setting it up again", ci.Layer.Digest)
	}
}

// ReleaseHold lets go container id's hold on its cache entry in
// snapshotter snName (holdData), once its restore has ended.
func (r *Restorer) ReleaseHold(ctx context.Context, snName, id string) {
	if err := r.ReleaseCheckpointDir(context.WithoutCancel(ctx), snName, id); err != nil {
		log.G(ctx).WithError(err).WithField("container", id).Warn("checkpoint cache: release the hold of a restore")
	}
}

// IsCancel reports whether err, of a restore, is its caller giving up (a
// cancelled or expired context), not the restore failing.
func IsCancel(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errdefs.IsCanceled(err) || errdefs.IsDeadlineExceeded(err) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// ForgetFailed ends, for the cache, container id's restore from checkpoint
// layer in snapshotter snName that the runtime ended with err. A caller
// that gave up (IsCancel) is no failed restore: the runtime may still be
// reading the entry, and the hold stays until the container goes. A real
// failure lets the container's hold go and drops the entry (Forget), so
// the next restore builds it again.
func (r *Restorer) ForgetFailed(ctx context.Context, snName, id string, layer digest.Digest, err error) {
	if IsCancel(ctx, err) {
		log.G(ctx).WithField("container", id).Infof("checkpoint cache: kept the entry of checkpoint layer %s: the restore's caller gave up (%v), not the restore", layer, err)
		return
	}
	ctx = context.WithoutCancel(ctx)
	r.ReleaseHold(ctx, snName, id)
	if ferr := r.Forget(ctx, snName, layer); ferr != nil {
		log.G(ctx).WithError(ferr).Warn("failed to drop the checkpoint cache entry of a failed restore")
	}
}
