//go:build linux

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
	"runtime"
	"sync"
	"time"
	"unsafe"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"rekindle.local/restore/shim"
)

// A checkpoint layer made with compressed pages images (--compression
// pages) is a fifth of the bytes to read from a cold disk, but the runc
// shim decodes its pages images into memory at every restore: 0.7 s of
// an 8B-class engine's cached restore on an H200. So once the restores of
// such a layer end, the entry gets a copy of its CRIU images with the
// pages images decoded, made off the restore's path:
//
//	checkpoint-cache/<layer digest>/decoded       the CRIU images, pages decoded
//	checkpoint-cache/<layer digest>/decoded-view  the view CRIU reads
//
// A restore reads that copy while its pages are in the page cache, and
// pays no decode; otherwise (a page cache dropped since, memory short) the
// compressed images, which it reads five times fewer bytes of from disk
// before decoding them. The copy is derived data: the cache GC and Forget
// remove it with the rest of the entry, a stamp found changed drops it.
const (
	decodedSuffix = "/decoded"
	// decodedResident: the share of the copy's pages images that must be
	// in the page cache for a restore to read it.
	decodedResident = 0.9
	// decodedSpare: the share of its file system the copy leaves free.
	decodedSpare = 0.1
)

func decodedKey(layer digest.Digest) string { return cacheKey(layer) + decodedSuffix }

// decodedHoldKey names container id's hold on the decoded copy while it
// restores from it.
func decodedHoldKey(id string) string { return restoreKeyPrefix + id + decodedSuffix }

// decodeDelay: a copy starts this long after the restores that asked for
// it end, which leaves the cores to engines serving their first tokens,
// and leaves time for a failed restore to cancel it (Forget).
var decodeDelay = 5 * time.Second

// decodes tracks the copies to make and being made, per checkpoint layer.
type decodes struct {
	mu      sync.Mutex
	pending map[digest.Digest]decodeJob
	// running is true for a copy being made, false once cancelled.
	running map[digest.Digest]bool
}

type decodeJob struct {
	namespace, snapshotter string
	image                  *Image
}

// hasCompressedPages says whether the CRIU images in dir include a
// compressed pages image.
func hasCompressedPages(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "pages-*.img.zst"))
	return len(m) > 0
}

// decodedImages returns the CRIU images to restore container id from when
// images, those of ci's entry, has compressed pages images: the entry's
// decoded copy, held for id until its restore ends (ReleaseCheckpointDir),
// when it has one in the page cache; else images, and a copy is asked for
// if the entry has none. Nothing here fails a restore: the compressed
// images are always there to read.
func (r *Restorer) decodedImages(ctx context.Context, sn snapshots.Snapshotter, snName string, ci *Image, id, images string) string {
	if !hasCompressedPages(images) {
		return images
	}
	key, view := decodedKey(ci.Layer.Digest), decodedKey(ci.Layer.Digest)+"-view"
	info, err := sn.Stat(ctx, view)
	if errdefs.IsNotFound(err) {
		r.wantDecoded(ctx, snName, ci)
		return images
	} else if err != nil {
		log.G(ctx).WithError(err).Warnf("checkpoint cache: the decoded pages images of checkpoint layer %s", ci.Layer.Digest)
		return images
	}
	// The hold keeps the copy from the GC and Forget while CRIU reads
	// it through the view.
	hold := decodedHoldKey(id)
	if err := removeIfExists(ctx, sn, hold); err != nil {
		log.G(ctx).WithError(err).Warnf("checkpoint cache: remove snapshot %s", hold)
		return images
	}
	if _, err := sn.View(ctx, hold, key, snapshots.WithLabels(map[string]string{labelGCContainerBackRef: id})); err != nil {
		log.G(ctx).WithError(err).Infof("checkpoint cache: hold the decoded pages images of checkpoint layer %s", ci.Layer.Digest)
		return images
	}
	release := func() { _ = sn.Remove(context.WithoutCancel(ctx), hold) }
	mounts, err := sn.Mounts(ctx, view)
	var dir string
	if err == nil {
		dir, err = bindDir(mounts)
	}
	if err != nil {
		// Taken meanwhile: the compressed ones it is.
		release()
		log.G(ctx).WithError(err).Infof("checkpoint cache: the decoded pages images of checkpoint layer %s", ci.Layer.Digest)
		return images
	}
	stamp, _, err := entryStamp(dir)
	if err != nil || stamp != info.Labels[labelCacheStamp] {
		release()
		log.G(ctx).Warnf("checkpoint cache: the decoded pages images of checkpoint layer %s changed since they were made (%v): dropping them, restoring from the compressed ones", ci.Layer.Digest, orChanged(err))
		for _, k := range []string{view, key} {
			if err := sn.Remove(ctx, k); err != nil && !errdefs.IsNotFound(err) {
				log.G(ctx).WithError(err).Warnf("checkpoint cache: remove snapshot %s", k)
			}
		}
		r.wantDecoded(ctx, snName, ci)
		return images
	}
	decoded := filepath.Join(dir, crmetadata.CheckpointDirectory)
	share, err := residentShare(decoded)
	if err != nil || share < decodedResident {
		release()
		if err != nil {
			log.G(ctx).WithError(err).Warnf("checkpoint cache: the decoded pages images of checkpoint layer %s: restoring from the compressed ones", ci.Layer.Digest)
		} else {
			log.G(ctx).Infof("checkpoint cache: %.0f%% of the decoded pages images of checkpoint layer %s are in the page cache: restoring from the compressed ones, fewer bytes to read",
				100*share, ci.Layer.Digest)
		}
		return images
	}
	log.G(ctx).Infof("checkpoint cache: restoring from the decoded pages images of checkpoint layer %s (%.0f%% in the page cache): no decode", ci.Layer.Digest, 100*share)
	return decoded
}

// wantDecoded asks for the decoded copy of ci's entry, made once no
// restore of its layer is in flight (Done).
func (r *Restorer) wantDecoded(ctx context.Context, snName string, ci *Image) {
	ns, _ := namespaces.Namespace(ctx)
	r.decodes.mu.Lock()
	defer r.decodes.mu.Unlock()
	if r.decodes.pending == nil {
		r.decodes.pending = map[digest.Digest]decodeJob{}
		r.decodes.running = map[digest.Digest]bool{}
	}
	if !r.decodes.running[ci.Layer.Digest] {
		r.decodes.pending[ci.Layer.Digest] = decodeJob{ns, snName, ci}
	}
}

// startDecode starts the pending copy of layer, if any, now that no
// restore of it is in flight.
func (r *Restorer) startDecode(layer digest.Digest) {
	r.decodes.mu.Lock()
	j, ok := r.decodes.pending[layer]
	if ok {
		delete(r.decodes.pending, layer)
		r.decodes.running[layer] = true
	}
	r.decodes.mu.Unlock()
	if !ok {
		return
	}
	go func() {
		defer func() {
			r.decodes.mu.Lock()
			delete(r.decodes.running, layer)
			r.decodes.mu.Unlock()
		}()
		time.Sleep(decodeDelay)
		r.decodes.mu.Lock()
		cancelled := !r.decodes.running[layer]
		r.decodes.mu.Unlock()
		if cancelled {
			return
		}
		ctx := namespaces.WithNamespace(context.Background(), j.namespace)
		if err := r.decode(ctx, j.snapshotter, j.image); err != nil {
			log.G(ctx).WithError(err).Warnf("checkpoint cache: no decoded pages images for checkpoint layer %s: its restores decode the compressed ones", layer)
		}
	}()
}

// cancelDecode drops the copy of layer asked for, and one not yet begun.
func (r *Restorer) cancelDecode(layer digest.Digest) {
	r.decodes.mu.Lock()
	defer r.decodes.mu.Unlock()
	delete(r.decodes.pending, layer)
	if _, ok := r.decodes.running[layer]; ok {
		r.decodes.running[layer] = false
	}
}

// decode makes the decoded copy of ci's entry in snapshotter snName, with
// a hold on the entry's data while it reads it. It uses a quarter of the
// host's CPUs: engines just restored may be serving their first tokens.
func (r *Restorer) decode(ctx context.Context, snName string, ci *Image) error {
	sn := r.Snapshotter(snName)
	if sn == nil {
		return fmt.Errorf("snapshotter %q: %w", snName, errdefs.ErrNotFound)
	}
	ctx, done, err := r.withLease(ctx)
	if err != nil {
		return err
	}
	defer done()
	holder := "decode-" + randomID()
	dataDir, err := r.holdData(ctx, sn, snName, ci, holder)
	if err != nil {
		return err
	}
	defer r.ReleaseHold(ctx, snName, holder)
	start := time.Now()
	var size int64
	key := decodedKey(ci.Layer.Digest)
	err = cachedSnapshot(ctx, sn, snName, key, "", ci.Layer.Digest, "decoded pages images",
		func(ctx context.Context, mounts []mount.Mount) error {
			dir, err := bindDir(mounts)
			if err != nil {
				return err
			}
			target := filepath.Join(dir, crmetadata.CheckpointDirectory)
			if err := os.Mkdir(target, 0o700); err != nil {
				return err
			}
			size, err = shim.DecodePages(ctx, filepath.Join(dataDir, crmetadata.CheckpointDirectory), target,
				max(runtime.NumCPU()/4, 1), func(n int64) error { return roomFor(dir, n) })
			if err != nil {
				return err
			}
			// The copy is read back from the page cache, not from
			// disk; what is dirty goes out at the kernel's pace.
			return nil
		})
	if err != nil {
		return err
	}
	// CRIU reads the copy through this view; its stamp catches a change
	// before a restore reads it.
	view := key + "-view"
	mounts, err := sn.View(ctx, view, key, snapshots.WithLabels(cacheLabels(ci.Layer.Digest)))
	if errdefs.IsAlreadyExists(err) {
		mounts, err = sn.Mounts(ctx, view)
	}
	if err != nil {
		return err
	}
	dir, err := bindDir(mounts)
	if err != nil {
		return err
	}
	stamp, _, err := entryStamp(dir)
	if err == nil {
		err = r.setStamp(ctx, sn, view, stamp)
	}
	if err != nil {
		return errors.Join(err, removeIfExists(ctx, sn, view), removeIfExists(ctx, sn, key))
	}
	if size > 0 {
		log.G(ctx).Infof("checkpoint cache: decoded the pages images of checkpoint layer %s, %d MiB, in %.2fs, for its next restores",
			ci.Layer.Digest, size>>20, time.Since(start).Seconds())
	}
	return nil
}

func orChanged(err error) error {
	if err == nil {
		return errors.New("stamp differs")
	}
	return err
}

// roomFor refuses n bytes more in the file system of dir when they would
// leave it less than decodedSpare free.
func roomFor(dir string, n int64) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return err
	}
	avail := int64(st.Bavail) * int64(st.Bsize)
	spare := int64(float64(int64(st.Blocks)*int64(st.Bsize)) * decodedSpare)
	if n > avail-spare {
		return fmt.Errorf("the decoded pages images take %d MiB, and the file system of %s has %d MiB free, of which %d MiB stay free: not made",
			n>>20, dir, avail>>20, spare>>20)
	}
	return nil
}

// residentShare returns the share of the bytes of the pages images in dir
// that are in the page cache.
func residentShare(dir string) (float64, error) {
	files, err := filepath.Glob(filepath.Join(dir, "pages-*.img"))
	if err != nil {
		return 0, err
	}
	page := int64(os.Getpagesize())
	var total, in int64
	for _, f := range files {
		n, size, err := resident(f, page)
		if err != nil {
			return 0, err
		}
		in += n
		total += (size + page - 1) / page
	}
	if total == 0 {
		return 1, nil
	}
	return float64(in) / float64(total), nil
}

// resident returns how many pages of file are in the page cache, and its
// size.
func resident(file string, page int64) (int64, int64, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return 0, 0, err
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, 0, err
	}
	defer unix.Munmap(m)
	vec := make([]byte, (fi.Size()+page-1)/page)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		return 0, 0, fmt.Errorf("mincore %s: %w", file, e)
	}
	var n int64
	for _, v := range vec {
		n += int64(v & 1)
	}
	return n, fi.Size(), nil
}
