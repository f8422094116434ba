// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

func tempKey(prefix string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return prefix + "/building-" + hex.EncodeToString(b)
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

func (f *inFlight) add(layer digest.Digest, d int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == nil {
		f.n = map[digest.Digest]int{}
	}
	if f.n[layer] += d; f.n[layer] <= 0 {
		delete(f.n, layer)
	}
}

// Done ends a restore that Prepare returned, whether the runtime restored
// the container or not.
func (r *Restorer) Done(layer digest.Digest) {
	r.inFlight.add(layer, -1)
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
		return nil
	}); err != nil {
		return err
	}
	if held > 0 {
		log.G(ctx).Infof("checkpoint cache: kept the entry of checkpoint layer %s after a failed restore: %d container(s) hold it", layer, held)
		return nil
	}
	// Children before their parents: data-view before data. Its mount, if
	// the layer was read in place, goes first.
	if err := r.unmountInPlace(ctx, prefix+"data-view"); err != nil {
		log.G(ctx).WithError(err).Warnf("checkpoint cache: unmount checkpoint layer %s", layer)
	}
	sort.Slice(names, func(i, j int) bool { return len(names[i]) > len(names[j]) })
	dropped, kept := 0, 0
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
	log.G(ctx).Infof("checkpoint cache: dropped %d snapshot(s) of checkpoint layer %s after a failed restore, %d still in use", dropped, layer, kept)
	return nil
}

// isHold reports whether snapshot name is a container's hold on a cache
// entry (HoldCheckpointDir).
func isHold(name string) bool {
	return strings.HasPrefix(name, restoreKeyPrefix) && strings.HasSuffix(name, "/checkpoint")
}
