// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/docker/go-units"
	"github.com/opencontainers/go-digest"

	"rekindle.local/contract/layout"
	"rekindle.local/restore/checkpointimage/bounds"
)

const (
	// PreheatImagesOption and PreheatMaxMemoryOption are the configuration
	// options a preheat comes from.
	PreheatImagesOption    = `checkpoint_preheat_images in [plugins.'io.containerd.service.v1.tasks-service']`
	PreheatMaxMemoryOption = `checkpoint_preheat_max_memory in [plugins.'io.containerd.service.v1.tasks-service']`
	// DefaultPreheatMaxMemory is the share of the host's memory a preheat
	// holds at most when the configuration names none.
	DefaultPreheatMaxMemory = "25%"
	// preheatLease keeps a preheat's holds from the garbage collector.
	preheatLease = "rekindle.preheat"
)

// Preheat keeps the pages images of named checkpoint images in memory,
// locked, for operators who know which images a host will serve: their
// restores read no page from disk, however long the host has been busy
// with other work. Each image's cache entry is extracted ahead (and a
// compressed one's decoded copy made) and held, as a restore holds it, so
// that neither cache-gc nor the collector takes it; the memory it locks is
// bounded by Max, taken in the order of Images. An image that does not fit
// is left to restore from disk, and says so.
type Preheat struct {
	Restorer *Restorer
	// Images are the names of the checkpoint images to keep resident.
	Images []string
	// Max is the most memory the preheat locks, in bytes; MaxSetting is
	// what the configuration said, for messages.
	Max        int64
	MaxSetting string
	// Snapshotter is the snapshotter of the cache entries (the one the
	// restored containers use).
	Snapshotter string
	// Namespaces lists the namespaces to look for the images in, in order.
	Namespaces func(context.Context) ([]string, error)
	// Status, when set, is the file that Reconcile writes its PreheatStatus
	// to.
	Status string

	mu    sync.Mutex
	held  map[digest.Digest]*preheld
	said  map[string]string
	swept bool
}

// PreheatStatus is what a preheat holds, and why it holds no more.
type PreheatStatus struct {
	MaxBytes  int64          `json:"max_bytes"`
	HeldBytes int64          `json:"held_bytes"`
	Images    []PreheatImage `json:"images"`
}

// PreheatImage is one image of a preheat.
type PreheatImage struct {
	Image     string        `json:"image"`
	Namespace string        `json:"namespace,omitempty"`
	Layer     digest.Digest `json:"layer,omitempty"`
	// State is "resident", "too large" (it restores from disk), "missing"
	// (not in the store), "not a checkpoint image" or "error".
	State  string `json:"state"`
	Bytes  int64  `json:"bytes,omitempty"`
	Files  int    `json:"files,omitempty"`
	Source string `json:"source,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// preheld is one entry a preheat holds.
type preheld struct {
	namespace string
	layer     digest.Digest
	// holds are the snapshots that keep the files; parent is the entry's
	// data, which a re-extracted entry no longer has.
	holds  []string
	parent string
	// decoded: the files are the decoded copy's, not the entry's own.
	decoded    bool
	compressed bool
	// inPlace: the layer's blob, kept in place, is what is locked.
	inPlace bool
	files   []lockedFile
	bytes   int64
}

// ParsePreheatMaxMemory reads checkpoint_preheat_max_memory: a size
// ("16GiB") or a share of the host's memory ("25%"); empty is the default.
func ParsePreheatMaxMemory(s string) (int64, error) {
	if s == "" {
		s = DefaultPreheatMaxMemory
	}
	if p, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(p, 64)
		total := bounds.MemTotal()
		if err != nil || f <= 0 || f > 90 || total <= 0 {
			return 0, fmt.Errorf("%s: %q is not a share of this host's memory from above 0%% to 90%%", PreheatMaxMemoryOption, s)
		}
		return int64(f / 100 * float64(total)), nil
	}
	n, err := units.RAMInBytes(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s: %q is not a size such as \"16GiB\" or a share such as \"25%%\"", PreheatMaxMemoryOption, s)
	}
	return n, nil
}

// Run reconciles every interval until ctx ends, then lets everything go.
func (p *Preheat) Run(ctx context.Context, every time.Duration) {
	for {
		p.Reconcile(ctx)
		select {
		case <-ctx.Done():
			p.mu.Lock()
			for l, h := range p.held {
				p.release(context.WithoutCancel(ctx), h)
				delete(p.held, l)
			}
			p.mu.Unlock()
			return
		case <-time.After(every):
		}
	}
}

// Reconcile brings what the preheat holds in line with its images as the
// store has them now: an image removed, or whose entry went or was
// extracted again, is let go; a new one is extracted and locked while it
// fits. It returns what it holds, as written to Status.
func (p *Preheat) Reconcile(ctx context.Context) PreheatStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held, p.said = map[digest.Digest]*preheld{}, map[string]string{}
	}
	st := PreheatStatus{MaxBytes: p.Max, Images: []PreheatImage{}}
	nss, err := p.Namespaces(ctx)
	if err != nil {
		log.G(ctx).WithError(err).Warn("checkpoint preheat: list the namespaces")
		return st
	}
	wanted := map[digest.Digest]bool{}
	for _, name := range p.Images {
		im := p.one(ctx, nss, name, wanted, &st)
		st.Images = append(st.Images, im)
		p.say(ctx, im)
	}
	for l, h := range p.held {
		if !wanted[l] {
			p.release(ctx, h)
			delete(p.held, l)
		}
	}
	if !p.swept {
		// Holds of an earlier run (containerd stopped or killed): its
		// lease keeps them until they are removed.
		p.sweep(ctx, nss)
		p.swept = true
	}
	if p.Status != "" {
		if err := writeJSON(p.Status, st); err != nil {
			log.G(ctx).WithError(err).Warn("checkpoint preheat: write its status")
		}
	}
	return st
}

// one preheats image name, found in the first of nss that has it.
func (p *Preheat) one(ctx context.Context, nss []string, name string, wanted map[digest.Digest]bool, st *PreheatStatus) PreheatImage {
	im := PreheatImage{Image: name, State: "missing", Reason: "not in the image store of namespace(s) " + strings.Join(nss, ", ")}
	var ci *Image
	for _, ns := range nss {
		nctx := namespaces.WithNamespace(ctx, ns)
		img, err := p.Restorer.Images.Get(nctx, name)
		if errdefs.IsNotFound(err) {
			continue
		} else if err != nil {
			im.State, im.Reason = "error", err.Error()
			return im
		}
		im.Namespace = ns
		if ci, err = Detect(nctx, p.Restorer.Content, img, p.Restorer.platform()); err != nil {
			im.State, im.Reason = "error", err.Error()
			return im
		} else if ci == nil {
			im.State, im.Reason = "not a checkpoint image", "it has no checkpoint layer"
			return im
		}
		break
	}
	if ci == nil {
		return im
	}
	im.Layer = ci.Layer.Digest
	if p.Restorer.Policy != nil {
		if err := p.Restorer.Policy.CheckImage(ci); err != nil {
			im.State, im.Reason = "error", err.Error()
			return im
		}
	}
	ctx = namespaces.WithNamespace(ctx, im.Namespace)
	if wanted[ci.Layer.Digest] {
		// Another name of the same checkpoint: held once.
		im.State, im.Reason = "resident", "the same checkpoint as an image above"
		return im
	}
	wanted[ci.Layer.Digest] = true
	h := p.held[ci.Layer.Digest]
	if h != nil && (!p.intact(ctx, h) || h.compressed && !h.decoded && p.decodedReady(ctx, ci)) {
		// Gone, extracted again, or a decoded copy to hold instead.
		p.release(ctx, h)
		delete(p.held, ci.Layer.Digest)
		h = nil
	}
	if h == nil {
		var err error
		if h, err = p.take(ctx, ci, p.Max-st.HeldBytes); err != nil {
			var big *tooLarge
			if errors.As(err, &big) {
				im.State, im.Bytes, im.Reason = "too large", big.need, p.tooLargeReason(big.need, big.left)
			} else {
				im.State, im.Reason = "error", err.Error()
			}
			return im
		}
		p.held[ci.Layer.Digest] = h
	} else if st.HeldBytes+h.bytes > p.Max {
		// An image above it took the room.
		p.release(ctx, h)
		delete(p.held, ci.Layer.Digest)
		im.State, im.Bytes, im.Reason = "too large", h.bytes, p.tooLargeReason(h.bytes, p.Max-st.HeldBytes)
		return im
	}
	st.HeldBytes += h.bytes
	im.State, im.Reason, im.Bytes, im.Files = "resident", "", h.bytes, len(h.files)
	im.Source = "the cache entry's pages images"
	if h.inPlace {
		im.Source = "the checkpoint layer's blob, kept in place"
	} else if h.decoded {
		im.Source = "the cache entry's decoded pages images"
	} else if h.compressed {
		im.Source = "the cache entry's compressed pages images (a decoded copy is being made)"
	}
	return im
}

// say logs what changed for an image since the last pass.
func (p *Preheat) say(ctx context.Context, im PreheatImage) {
	line := im.State + " " + im.Reason + " " + im.Source + " " + strconv.FormatInt(im.Bytes, 10)
	if p.said[im.Image] == line {
		return
	}
	p.said[im.Image] = line
	switch im.State {
	case "resident":
		if im.Bytes > 0 {
			log.G(ctx).Infof("checkpoint preheat: checkpoint image %s is resident: %s of %s in %d file(s), locked in memory",
				im.Image, units.BytesSize(float64(im.Bytes)), im.Source, im.Files)
		}
	default:
		log.G(ctx).Warnf("checkpoint preheat: checkpoint image %s is not preheated (%s): %s", im.Image, im.State, im.Reason)
	}
}

// tooLargeReason says why an image that needs need bytes, with left of the
// ceiling left, is not preheated.
func (p *Preheat) tooLargeReason(need, left int64) string {
	return fmt.Sprintf("it needs %s, more than the %s left of %s (%s): it restores from disk",
		units.BytesSize(float64(need)), units.BytesSize(float64(left)), PreheatMaxMemoryOption, p.MaxSetting)
}

type tooLarge struct{ need, left int64 }

func (e *tooLarge) Error() string { return fmt.Sprintf("needs %d bytes, %d left", e.need, e.left) }

// holdID names the preheat's holds on layer's entry, as a restored
// container's (so that dropping a changed entry takes them too).
func holdID(layer digest.Digest) string { return "preheat-" + layer.Encoded()[:16] }

// take extracts ci's entry if it is not in the cache, holds it and locks
// its pages images (the decoded copy's, when it has one) if they fit in
// left bytes.
func (p *Preheat) take(ctx context.Context, ci *Image, left int64) (*preheld, error) {
	r, snName := p.Restorer, p.Snapshotter
	sn := r.Snapshotter(snName)
	if sn == nil {
		return nil, fmt.Errorf("snapshotter %q for the checkpoint cache: %w", snName, errdefs.ErrNotFound)
	}
	// The extraction under a lease of its own, as a restore's: the
	// preheat's lease keeps only its holds.
	if _, err := r.CheckpointDir(ctx, snName, ci); err != nil {
		return nil, err
	}
	lctx, err := p.lease(ctx)
	if err != nil {
		return nil, err
	}
	id := holdID(ci.Layer.Digest)
	h := &preheld{namespace: mustNamespace(ctx), layer: ci.Layer.Digest}
	dir, err := p.hold(lctx, sn, ci, id)
	if err != nil {
		return nil, err
	}
	h.holds = append(h.holds, holdKey(id))
	if info, err := sn.Stat(ctx, holdKey(id)); err == nil {
		h.parent = info.Parent
	}
	if inPlaceShaped(ci, dir) {
		// Kept in place: restores read the blob through an EROFS mount,
		// so the blob is what stays resident.
		return p.lockInPlace(ctx, h, ci, dir, left)
	}
	images := filepath.Join(dir, crmetadata.CheckpointDirectory)
	if hasCompressedPages(images) {
		h.compressed = true
		if d, ok := p.holdDecoded(lctx, sn, ci, id); ok {
			images, h.decoded = d, true
			h.holds = append(h.holds, decodedHoldKey(id))
		} else {
			// Made now, unless a restore of it is in flight (then at its end).
			r.wantDecoded(ctx, snName, ci)
			r.inFlight.add(ci.Layer.Digest, 1)
			r.Done(ci.Layer.Digest)
		}
	}
	files, need, err := openPages(images)
	if err := p.lock(ctx, h, files, need, err, left); err != nil {
		return nil, err
	}
	return h, nil
}

// lock locks files, opened with err and taking need bytes, for h if they
// fit in left bytes; else it closes them, lets h go and says why.
func (p *Preheat) lock(ctx context.Context, h *preheld, files []lockedFile, need int64, err error, left int64) error {
	if err == nil && need > left {
		err = &tooLarge{need: need, left: max(left, 0)}
	}
	if err == nil {
		err = lockFiles(files)
	}
	if err != nil {
		closeFiles(files)
		p.release(ctx, h)
		return err
	}
	h.files, h.bytes = files, need
	return nil
}

// hold holds ci's entry for id, as HoldCheckpointDir does but mounting
// nothing, and returns the directory of the entry's data.
func (p *Preheat) hold(ctx context.Context, sn snapshots.Snapshotter, ci *Image, id string) (string, error) {
	mounts, err := viewHold(ctx, sn, ci, id)
	if err != nil {
		return "", err
	}
	dir, err := bindDir(mounts)
	if err != nil {
		_ = removeIfExists(context.WithoutCancel(ctx), sn, holdKey(id))
		return "", err
	}
	return dir, nil
}

// lockInPlace locks the blob of ci's layer kept in place (dir is its
// snapshot's) for h. The entry's mount, made when the blob was not in the
// page cache, reads it with direct I/O, past the page cache: it is made
// again, buffered, when no restore of the layer is in flight.
func (p *Preheat) lockInPlace(ctx context.Context, h *preheld, ci *Image, dir string, left int64) (*preheld, error) {
	r := p.Restorer
	if err := r.isLayerBlob(ctx, ci.Layer, filepath.Join(dir, layout.InPlaceBlob)); err != nil {
		p.release(ctx, h)
		return nil, fmt.Errorf("%w: %w", errMountInPlace, err)
	}
	files, need, err := openMatching(dir, func(n string) bool { return n == layout.InPlaceBlob })
	if err := p.lock(ctx, h, files, need, err, left); err != nil {
		return nil, err
	}
	h.inPlace = true
	r.inFlight.mu.Lock()
	idle := r.inFlight.n[ci.Layer.Digest] == 0
	r.inFlight.mu.Unlock()
	if idle {
		if err := r.unmountInPlace(ctx, cacheKey(ci.Layer.Digest)+"/data-view"); err != nil {
			log.G(ctx).WithError(err).Infof("checkpoint preheat: the mount of checkpoint layer %s stays as it was", ci.Layer.Digest)
		} else if _, err := r.CheckpointDir(ctx, p.Snapshotter, ci); err != nil {
			log.G(ctx).WithError(err).Warnf("checkpoint preheat: mount checkpoint layer %s again", ci.Layer.Digest)
		}
	}
	return h, nil
}

// holdDecoded holds the decoded copy of ci's entry for id and returns its
// CRIU images, when there is one.
func (p *Preheat) holdDecoded(ctx context.Context, sn snapshots.Snapshotter, ci *Image, id string) (string, bool) {
	key := decodedKey(ci.Layer.Digest)
	if _, err := sn.Stat(ctx, key+"-view"); err != nil {
		return "", false
	}
	hold := decodedHoldKey(id)
	if err := removeIfExists(ctx, sn, hold); err != nil {
		return "", false
	}
	mounts, err := sn.View(ctx, hold, key, snapshots.WithLabels(map[string]string{labelGCContainerBackRef: id}))
	var dir string
	if err == nil {
		dir, err = bindDir(mounts)
	}
	if err != nil {
		_ = removeIfExists(context.WithoutCancel(ctx), sn, hold)
		return "", false
	}
	return filepath.Join(dir, crmetadata.CheckpointDirectory), true
}

// decodedReady says whether ci's entry has a decoded copy now.
func (p *Preheat) decodedReady(ctx context.Context, ci *Image) bool {
	sn := p.Restorer.Snapshotter(p.Snapshotter)
	if sn == nil {
		return false
	}
	_, err := sn.Stat(ctx, decodedKey(ci.Layer.Digest)+"-view")
	return err == nil
}

// intact says whether h's holds are there and its entry is the one it
// holds (not dropped, or dropped and extracted again).
func (p *Preheat) intact(ctx context.Context, h *preheld) bool {
	sn := p.Restorer.Snapshotter(p.Snapshotter)
	if sn == nil {
		return false
	}
	for _, k := range h.holds {
		if _, err := sn.Stat(ctx, k); err != nil {
			return false
		}
	}
	info, err := sn.Stat(ctx, cacheKey(h.layer)+"/data-view")
	return err == nil && info.Parent == h.parent
}

// sweep removes the preheat's holds in namespaces nss that it does not
// hold now.
func (p *Preheat) sweep(ctx context.Context, nss []string) {
	sn := p.Restorer.Snapshotter(p.Snapshotter)
	if sn == nil {
		return
	}
	mine := map[string]bool{}
	for _, h := range p.held {
		for _, k := range h.holds {
			mine[h.namespace+"/"+k] = true
		}
	}
	for _, ns := range nss {
		nctx := namespaces.WithNamespace(ctx, ns)
		var stale []string
		if err := sn.Walk(nctx, func(_ context.Context, info snapshots.Info) error {
			if strings.HasPrefix(info.Name, restoreKeyPrefix+"preheat-") && !mine[ns+"/"+info.Name] {
				stale = append(stale, info.Name)
			}
			return nil
		}); err != nil {
			log.G(ctx).WithError(err).Warn("checkpoint preheat: list the holds of an earlier run")
			continue
		}
		for _, k := range stale {
			if err := removeIfExists(nctx, sn, k); err != nil {
				log.G(ctx).WithError(err).Warnf("checkpoint preheat: remove the hold %s of an earlier run", k)
			}
		}
		if len(stale) > 0 {
			log.G(ctx).Infof("checkpoint preheat: removed %d hold(s) of an earlier run in namespace %s", len(stale), ns)
		}
	}
}

// release unlocks h's files and removes its holds.
func (p *Preheat) release(ctx context.Context, h *preheld) {
	closeFiles(h.files)
	h.files = nil
	ctx = namespaces.WithNamespace(context.WithoutCancel(ctx), h.namespace)
	sn := p.Restorer.Snapshotter(p.Snapshotter)
	if sn == nil {
		return
	}
	for _, k := range h.holds {
		if err := removeIfExists(ctx, sn, k); err != nil {
			log.G(ctx).WithError(err).Warnf("checkpoint preheat: let go of checkpoint layer %s", h.layer)
		}
		if p.Restorer.Leases != nil {
			_ = p.Restorer.Leases.DeleteResource(ctx, leases.Lease{ID: preheatLease}, leases.Resource{ID: k, Type: "snapshots/" + p.Snapshotter})
		}
	}
	if h.bytes > 0 {
		log.G(ctx).Infof("checkpoint preheat: let go of checkpoint layer %s: %s unlocked", h.layer, units.BytesSize(float64(h.bytes)))
	}
}

// lease returns ctx with the preheat's lease of its namespace, made if
// missing: it keeps the holds, whose back reference names no container.
func (p *Preheat) lease(ctx context.Context) (context.Context, error) {
	lm := p.Restorer.Leases
	if lm == nil {
		return ctx, nil
	}
	if _, err := lm.Create(ctx, leases.WithID(preheatLease), leases.WithLabel("rekindle.preheat", "holds the cache entries of checkpoint_preheat_images")); err != nil && !errdefs.IsAlreadyExists(err) {
		return nil, fmt.Errorf("the preheat's lease: %w", err)
	}
	return leases.WithLease(ctx, preheatLease), nil
}

func mustNamespace(ctx context.Context) string {
	ns, _ := namespaces.Namespace(ctx)
	return ns
}

// writeJSON replaces file by v, as JSON.
func writeJSON(file string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}
