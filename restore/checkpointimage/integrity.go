// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/log"
	"rekindle.local/contract/layout"
)

// DamagedLayerError is a checkpoint layer whose blob in the local content
// store is not the content its digest names: cut short, or changed since
// it was pulled. Nothing of it is restored.
type DamagedLayerError struct {
	// Image is the checkpoint image's name, when known.
	Image string
	Layer digest.Digest
	// Blob is the blob's file, when the store keeps one.
	Blob   string
	Reason string
}

func (e *DamagedLayerError) Error() string {
	image, rmi := "", "the image"
	if e.Image != "" {
		image, rmi = "checkpoint image "+e.Image+": ", e.Image
	}
	blob := ""
	if e.Blob != "" {
		blob = " (" + e.Blob + ")"
	}
	return fmt.Sprintf("%sthe local blob of checkpoint layer %s%s %s: this host's copy is damaged; remove the image (nerdctl rmi %s) and pull it again",
		image, e.Layer, blob, e.Reason, rmi)
}

func (e *DamagedLayerError) Unwrap() error { return errdefs.ErrDataLoss }

// withImage names image in a DamagedLayerError within err.
func withImage(err error, image string) error {
	var d *DamagedLayerError
	if errors.As(err, &d) && d.Image == "" {
		d.Image = image
	}
	return err
}

// blobPath returns the file the content store keeps ra's blob in, or "".
func blobPath(ra content.ReaderAt) string {
	if f, ok := ra.(interface{ File() *os.File }); ok {
		return f.File().Name()
	}
	return ""
}

// verifyingReader hashes what is read through it; check compares the
// whole stream with the layer's digest once it is read to its end.
type verifyingReader struct {
	r     io.Reader
	d     digest.Digester
	n     int64
	layer ocispec.Descriptor
	blob  string
}

func newVerifyingReader(ra content.ReaderAt, layer ocispec.Descriptor) (*verifyingReader, error) {
	if err := layer.Digest.Validate(); err != nil {
		return nil, err
	}
	v := &verifyingReader{r: content.NewReader(ra), d: layer.Digest.Algorithm().Digester(), layer: layer, blob: blobPath(ra)}
	if ra.Size() != layer.Size {
		return nil, &DamagedLayerError{Layer: layer.Digest, Blob: v.blob,
			Reason: fmt.Sprintf("is %d bytes where the image says %d", ra.Size(), layer.Size)}
	}
	return v, nil
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.n += int64(n)
	v.d.Hash().Write(p[:n])
	return n, err
}

// check reads what the consumer left (a tar's padding) and compares.
func (v *verifyingReader) check() error {
	if _, err := io.Copy(io.Discard, v); err != nil {
		return &DamagedLayerError{Layer: v.layer.Digest, Blob: v.blob, Reason: "cannot be read: " + err.Error()}
	}
	if v.n != v.layer.Size {
		return &DamagedLayerError{Layer: v.layer.Digest, Blob: v.blob,
			Reason: fmt.Sprintf("holds %d bytes where the image says %d", v.n, v.layer.Size)}
	}
	if got := v.d.Digest(); got != v.layer.Digest {
		return &DamagedLayerError{Layer: v.layer.Digest, Blob: v.blob, Reason: "does not match its digest (its content hashes to " + got.String() + ")"}
	}
	return nil
}

// VerifyBlob reads the blob of layer from provider to its end and returns
// a DamagedLayerError unless it is the layer's content.
func VerifyBlob(ctx context.Context, provider content.Provider, layer ocispec.Descriptor) error {
	ra, err := provider.ReaderAt(ctx, layer)
	if err != nil {
		return fmt.Errorf("checkpoint layer %s: %w", layer.Digest, err)
	}
	defer ra.Close()
	v, err := newVerifyingReader(ra, layer)
	if err != nil {
		return err
	}
	return v.check()
}

// The stamp of a cache entry: the identity of the files a restore reads in
// bulk (the pages images, or the in-place layer's index and blob) as the
// entry was made: size, inode, mtime and ctime. A write to one of them
// changes its ctime, which no user sets, so a changed stamp finds a blob
// or pages image changed under the entry with a stat per file, at every
// restore; only then is the blob read through again (VerifyBlob).
const labelCacheStamp = "containerd.io/checkpoint.cache.stamp"

// stampFiles lists the files of a stamp in dir, the entry's data.
func stampFiles(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, crmetadata.CheckpointDirectory, "pages-*.img*"))
	if err != nil {
		return nil, err
	}
	for _, name := range []string{layout.InPlaceBlob, layout.InPlaceIndex} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			files = append(files, filepath.Join(dir, name))
		}
	}
	sort.Strings(files)
	return files, nil
}

// entryStamp returns the stamp of the data in dir and the newest ctime of
// its files.
func entryStamp(dir string) (string, time.Time, error) {
	files, err := stampFiles(dir)
	if err != nil {
		return "", time.Time{}, err
	}
	h := sha256.New()
	var newest time.Time
	for _, f := range files {
		fi, err := os.Lstat(f)
		if err != nil {
			return "", time.Time{}, err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return "", time.Time{}, fmt.Errorf("stat %s: no inode", f)
		}
		ctime := time.Unix(st.Ctim.Sec, st.Ctim.Nsec)
		if ctime.After(newest) {
			newest = ctime
		}
		rel, _ := filepath.Rel(dir, f)
		fmt.Fprintf(h, "%s %d %d %d.%09d %d.%09d\n", rel, fi.Size(), st.Ino, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
	}
	return "v1:" + hex.EncodeToString(h.Sum(nil)), newest, nil
}

// checkBlobSize refuses a checkpoint layer whose blob is not the size its
// descriptor says: a stat, at every restore. A blob the store no longer
// has is not checked (the restore reads the unpacked snapshot).
func (r *Restorer) checkBlobSize(ctx context.Context, ci *Image) error {
	if r.Content == nil {
		return nil
	}
	ra, err := r.Content.ReaderAt(ctx, ci.Layer)
	if errdefs.IsNotFound(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("checkpoint layer %s of checkpoint image %s: %w", ci.Layer.Digest, ci.Name, err)
	}
	defer ra.Close()
	if ra.Size() != ci.Layer.Size {
		return &DamagedLayerError{Image: ci.Name, Layer: ci.Layer.Digest, Blob: blobPath(ra),
			Reason: fmt.Sprintf("is %d bytes where the image says %d", ra.Size(), ci.Layer.Size)}
	}
	return nil
}

// dropDamaged drops the cache entry of ci, whose blob err found damaged:
// nothing restores from it, and its next restore after a new pull builds
// it again.
func (r *Restorer) dropDamaged(ctx context.Context, sn snapshots.Snapshotter, snName string, ci *Image, err error) {
	names, werr := entryNames(ctx, sn, ci.Layer.Digest)
	if werr != nil {
		log.G(ctx).WithError(werr).Warnf("checkpoint cache: list the entry of checkpoint layer %s", ci.Layer.Digest)
		return
	}
	dropped, kept := r.drop(ctx, sn, ci.Layer.Digest, names)
	log.G(ctx).WithError(err).Errorf("checkpoint cache: refused checkpoint image %s, its checkpoint layer's blob is damaged: dropped %d snapshot(s) of its entry, %d still in use", ci.Name, dropped, kept)
}

func (r *Restorer) setStamp(ctx context.Context, sn snapshots.Snapshotter, view, stamp string) error {
	_, err := sn.Update(ctx, snapshots.Info{Name: view, Labels: map[string]string{labelCacheStamp: stamp}}, "labels."+labelCacheStamp)
	return err
}

// stampEntry records the stamp of the entry just made as view, a view of
// parent. A file changed after parent was made (its ctime is later) has
// the blob read through first.
func (r *Restorer) stampEntry(ctx context.Context, sn snapshots.Snapshotter, snName, view, parent string, mounts []mount.Mount, ci *Image) error {
	dir, err := bindDir(mounts)
	if err != nil {
		return err
	}
	stamp, newest, err := entryStamp(dir)
	if err != nil {
		return fmt.Errorf("stamp the cache entry of checkpoint image %s: %w", ci.Name, err)
	}
	pinfo, err := sn.Stat(ctx, parent)
	if err != nil {
		return err
	}
	made := pinfo.Created
	if pinfo.Updated.After(made) {
		made = pinfo.Updated
	}
	if newest.After(made.Add(2 * time.Second)) {
		log.G(ctx).Warnf("checkpoint cache: files of snapshot %s changed after it was made (%s, made %s): checking the blob of checkpoint layer %s",
			parent, newest.UTC().Format(time.RFC3339), made.UTC().Format(time.RFC3339), ci.Layer.Digest)
		if err := r.changed(ctx, sn, snName, parent, dir, ci); err != nil {
			return err
		}
	}
	return r.setStamp(ctx, sn, view, stamp)
}

// checkStamp compares the entry of ci (view, with mounts) with its stamp.
// It returns rebuild when a pages image of the entry's own extracted copy
// changed while the blob is intact: the entry is then gone, to be
// extracted again.
func (r *Restorer) checkStamp(ctx context.Context, sn snapshots.Snapshotter, snName, view string, mounts []mount.Mount, ci *Image) (bool, error) {
	info, err := sn.Stat(ctx, view)
	if err != nil {
		return false, err
	}
	dir, err := bindDir(mounts)
	if err != nil {
		return false, err
	}
	stamp, _, err := entryStamp(dir)
	if err != nil {
		return false, fmt.Errorf("cache entry of checkpoint image %s: %w", ci.Name, err)
	}
	want := info.Labels[labelCacheStamp]
	if want == stamp {
		return false, nil
	}
	if want == "" {
		// Made before entries had stamps.
		return false, r.setStamp(ctx, sn, view, stamp)
	}
	log.G(ctx).Warnf("checkpoint cache: the pages images or blob under the entry of checkpoint layer %s changed since it was made: checking its blob", ci.Layer.Digest)
	if err := r.changed(ctx, sn, snName, info.Parent, dir, ci); err != nil {
		if errors.Is(err, errRebuild) {
			return true, nil
		}
		return false, err
	}
	return false, r.setStamp(ctx, sn, view, stamp)
}

var errRebuild = errors.New("rebuild the cache entry")

// changed decides on an entry of ci whose files in dir (of snapshot
// parent) changed: a damaged blob is refused and the entry dropped; an
// intact one that is the data itself (kept in place) is taken as is; an
// extracted copy of the entry's own is dropped and errRebuild returned; a
// changed unpacked snapshot of the image is refused.
func (r *Restorer) changed(ctx context.Context, sn snapshots.Snapshotter, snName, parent, dir string, ci *Image) error {
	start := time.Now()
	err := VerifyBlob(ctx, r.Content, ci.Layer)
	log.G(ctx).Infof("checkpoint cache: read the blob of checkpoint layer %s (%d bytes) through in %s", ci.Layer.Digest, ci.Layer.Size, time.Since(start).Round(time.Millisecond))
	var damaged *DamagedLayerError
	if errors.As(err, &damaged) {
		err = withImage(err, ci.Name)
		r.dropDamaged(ctx, sn, snName, ci, err)
		return err
	}
	if err == nil && inPlaceShaped(ci, dir) {
		return nil
	}
	if parent == cacheKey(ci.Layer.Digest)+"/data" {
		r.removeGone(ctx, sn, cacheKey(ci.Layer.Digest)+"/")
		names, werr := entryNames(ctx, sn, ci.Layer.Digest)
		if werr != nil {
			return werr
		}
		// All or nothing: data left without its view would be stamped
		// anew, damage and all, by the next restore.
		users, werr := entryUsers(ctx, sn, names)
		if werr != nil {
			return werr
		}
		if users > 0 {
			return fmt.Errorf("checkpoint image %s: a pages image of its cache entry changed since it was extracted, and %d restored container(s) still use the entry: remove them (nerdctl rm) and restore again", ci.Name, users)
		}
		dropped, kept := r.dropNames(ctx, sn, ci.Layer.Digest, names)
		if kept > 0 {
			return fmt.Errorf("checkpoint image %s: a pages image of its cache entry changed since it was extracted, and %d of the entry's snapshots could not be removed (containerd's log names them): restore again", ci.Name, kept)
		}
		log.G(ctx).Warnf("checkpoint cache: dropped %d snapshot(s) of checkpoint layer %s, whose pages images changed since they were extracted: extracting it again", dropped, ci.Layer.Digest)
		return errRebuild
	}
	if err != nil {
		return fmt.Errorf("checkpoint image %s: its unpacked checkpoint changed and its blob cannot be checked: %w", ci.Name, err)
	}
	return fmt.Errorf("checkpoint image %s: a pages image in its unpacked snapshot %s changed since the image was unpacked (the blob is intact): remove the image (nerdctl rmi %s) and pull it again", ci.Name, parent, ci.Name)
}
