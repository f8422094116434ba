// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/moby/sys/mountinfo"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/diff/apply"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/mount/manager"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/testutil"
	erofsmount "github.com/containerd/containerd/v2/plugins/mount/erofs"
	"github.com/containerd/containerd/v2/plugins/snapshots/native"
	keys "rekindle.local/contract/annotations"
	"rekindle.local/contract/layout"
)

// TestCheckpointDataInPlace restores from a checkpoint layer that the
// applier kept in place: the restore reads it through one EROFS mount, held
// for the layer's snapshot, and never extracts it. Without a mount manager
// the layer is extracted instead.
func TestCheckpointDataInPlace(t *testing.T) {
	testutil.RequiresRoot(t)
	if out, err := exec.Command("mkfs.erofs", "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "--tar=") {
		t.Skip("no mkfs.erofs with --tar in PATH (erofs-utils 1.7 or later)")
	}
	pages := strings.Repeat("p", 3<<20)
	entries := []tarEntry{
		{"checkpoint", tar.TypeDir, ""},
		{"checkpoint/core-1.img", tar.TypeReg, "core"},
		{"checkpoint/pages-1.img", tar.TypeReg, pages},
		{"spec.dump", tar.TypeReg, "{}"},
	}
	for _, tc := range []struct {
		name       string
		withMounts bool
		extra      []tarEntry
	}{
		{"mounted", true, nil},
		{"no mount manager", false, nil},
		{"a symlink in the layer", true, []tarEntry{{"checkpoint/core-2.img", tar.TypeSymlink, "/etc/shadow"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withMounts := tc.withMounts
			ctx := namespaces.WithNamespace(context.Background(), "test")
			cs := newStore(t)
			layer := putBlob(t, cs, ocispec.MediaTypeImageLayer, makeTar(t, append(append([]tarEntry{}, entries...), tc.extra...)))
			layer.Annotations = map[string]string{keys.LayerInPlace: keys.LayerInPlaceEROFS}
			config := putJSON(t, cs, ocispec.MediaTypeImageConfig, ocispec.Image{
				RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{layer.Digest}},
			})
			sn, err := native.NewSnapshotter(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer sn.Close()
			chainID := layer.Digest.String()
			unpackWith(ctx, t, sn, cs, chainID, layer)

			r := &Restorer{Content: cs}
			if withMounts {
				r.Mounts = newMountManager(t)
			}
			var runs atomic.Int32
			extractLayer = func(ctx context.Context, p content.Provider, l ocispec.Descriptor, dir string) error {
				runs.Add(1)
				return ExtractLayer(ctx, p, l, dir)
			}
			defer func() { extractLayer = ExtractLayer }()

			ci := &Image{Name: "ckpt", Layer: layer, Manifest: ocispec.Manifest{Config: config, Layers: []ocispec.Descriptor{layer}}}
			var dirs []string
			for i := 0; i < 2; i++ {
				dir, err := r.checkpointData(ctx, sn, "native", ci)
				if err != nil {
					t.Fatal(err)
				}
				if b, err := os.ReadFile(filepath.Join(dir, "checkpoint", "pages-1.img")); err != nil || string(b) != pages {
					t.Fatalf("restore %d: checkpoint/pages-1.img: %d bytes, %v", i, len(b), err)
				}
				if _, err := os.Lstat(filepath.Join(dir, "checkpoint", "core-2.img")); err == nil {
					t.Errorf("restore %d: the layer's symlink reached the checkpoint directory", i)
				}
				dirs = append(dirs, dir)
			}
			if dirs[0] != dirs[1] {
				t.Errorf("restores used different directories: %v", dirs)
			}
			wantRuns := int32(1)
			if withMounts && tc.extra == nil {
				wantRuns = 0
				if ok, err := mountinfo.Mounted(dirs[0]); err != nil || !ok {
					t.Errorf("%s is not a mount point (%v)", dirs[0], err)
				}
				view := cacheKey(layer.Digest) + "/data-view"
				infos, err := r.Mounts.List(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(infos) != 1 || infos[0].Labels[labelGCSnapshotBackRef+"native"] != view {
					t.Errorf("mounts %+v: want one, which the collector unmounts with snapshot %s", infos, view)
				}
			}
			if got := runs.Load(); got != wantRuns {
				t.Errorf("checkpoint layer extracted %d times, want %d", got, wantRuns)
			}
		})
	}
}

// stockContainerd is why an in-place test skips when this module is built
// against the pinned containerd release alone (a plain checkout's go test):
// keeping a layer in place is the applier's and the content store's side,
// which containerd-patches/ adds. make test-patches runs these tests in the
// patched tree.
const stockContainerd = "containerd's layer applier here is the pinned release's, which extracts the layer: the in-place tests run in the patched tree (make test-patches)"

// patched says the tests run in containerd's patched tree (make
// test-patches passes it), where a stock answer is the series' failure.
var patched = flag.Bool("rekindle.patched", false, "containerd here is the patched tree: its applier must keep a layer in place")

// stock skips a test that needs the series' applier or content store, or
// fails it where they should be there.
func stock(t *testing.T) {
	t.Helper()
	if *patched {
		t.Fatal("containerd's applier or content store here is the pinned release's, not the series': the hooks into restore/inplace (core/diff/apply) or the blob's file (plugins/content/local) are missing")
	}
	t.Skip(stockContainerd)
}

// inPlaceApplier: whether containerd's applier keeps a layer that asks for
// it in place, tried once on a small checkpoint layer.
func inPlaceApplier(t *testing.T) bool {
	inPlaceOnce.Do(func() {
		ctx := namespaces.WithNamespace(context.Background(), "test")
		cs := newStore(t)
		layer := putBlob(t, cs, ocispec.MediaTypeImageLayer, makeTar(t, []tarEntry{
			{"checkpoint", tar.TypeDir, ""}, {"checkpoint/core-1.img", tar.TypeReg, "core"}, {"spec.dump", tar.TypeReg, "{}"},
		}))
		layer.Annotations = map[string]string{keys.LayerInPlace: keys.LayerInPlaceEROFS}
		dir := t.TempDir()
		if _, err := apply.NewFileSystemApplier(cs).Apply(ctx, layer, []mount.Mount{{Type: "bind", Source: dir, Options: []string{"rbind", "rw"}}}); err != nil {
			t.Fatal(err)
		}
		_, err := os.Lstat(filepath.Join(dir, layout.InPlaceIndex))
		inPlaceKept = err == nil
	})
	return inPlaceKept
}

var (
	inPlaceOnce sync.Once
	inPlaceKept bool
)

// unpackWith applies layer into a new snapshot committed as name, with the
// file-system applier, as the unpacker does.
func unpackWith(ctx context.Context, t *testing.T, sn snapshots.Snapshotter, cs content.Store, name string, layer ocispec.Descriptor) {
	t.Helper()
	mounts, err := sn.Prepare(ctx, "unpack-"+name, "")
	if err != nil {
		t.Fatal(err)
	}
	if layer.Annotations[keys.LayerInPlace] == keys.LayerInPlaceEROFS && !inPlaceApplier(t) {
		stock(t)
	}
	if _, err := apply.NewFileSystemApplier(cs).Apply(ctx, layer, mounts); err != nil {
		t.Fatal(err)
	}
	if err := sn.Commit(ctx, name, "unpack-"+name); err != nil {
		t.Fatal(err)
	}
}

func newMountManager(t *testing.T) mount.Manager {
	t.Helper()
	dir := t.TempDir()
	db, err := bolt.Open(filepath.Join(dir, "mounts.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	targets := filepath.Join(dir, "t")
	if err := os.Mkdir(targets, 0o700); err != nil {
		t.Fatal(err)
	}
	mm, err := manager.NewManager(db, targets, manager.WithMountHandler("erofs", erofsmount.NewErofsMountHandler()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := namespaces.WithNamespace(context.Background(), "test")
		infos, _ := mm.List(ctx)
		for _, info := range infos {
			mm.Deactivate(ctx, info.Name)
		}
		db.Close()
	})
	return mm
}

// inPlaceImage unpacks a checkpoint layer with the applier, kept in place,
// and returns the image, a restorer with a mount manager and the native
// snapshotter holding it.
func inPlaceImage(ctx context.Context, t *testing.T) (*Image, *Restorer, snapshots.Snapshotter) {
	t.Helper()
	if out, err := exec.Command("mkfs.erofs", "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "--tar=") {
		t.Skip("no mkfs.erofs with --tar in PATH (erofs-utils 1.7 or later)")
	}
	cs := newStore(t)
	layer := putBlob(t, cs, ocispec.MediaTypeImageLayer, makeTar(t, []tarEntry{
		{"checkpoint", tar.TypeDir, ""},
		{"checkpoint/core-1.img", tar.TypeReg, "core"},
	}))
	layer.Annotations = map[string]string{keys.LayerInPlace: keys.LayerInPlaceEROFS}
	config := putJSON(t, cs, ocispec.MediaTypeImageConfig, ocispec.Image{
		RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{layer.Digest}},
	})
	sn, err := native.NewSnapshotter(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sn.Close() })
	unpackWith(ctx, t, sn, cs, layer.Digest.String(), layer)
	ci := &Image{Name: "a", Layer: layer, Manifest: ocispec.Manifest{Config: config, Layers: []ocispec.Descriptor{layer}}}
	return ci, &Restorer{Content: cs, Mounts: newMountManager(t)}, sn
}

func readCore(t *testing.T, dir string) {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(dir, "checkpoint", "core-1.img")); err != nil || string(b) != "core" {
		t.Fatalf("checkpoint/core-1.img in %s: %q, %v", dir, b, err)
	}
}

// TestInPlaceDecidedByTheSnapshot: an image of the same layer without the
// annotation (copied by a tool that drops it) reads the mount too.
func TestInPlaceDecidedByTheSnapshot(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := namespaces.WithNamespace(context.Background(), "test")
	ci, r, sn := inPlaceImage(ctx, t)
	a, err := r.checkpointData(ctx, sn, "native", ci)
	if err != nil {
		t.Fatal(err)
	}
	plain := *ci
	plain.Name, plain.Layer.Annotations = "b", nil
	b, err := r.checkpointData(ctx, sn, "native", &plain)
	if err != nil {
		t.Fatal(err)
	}
	readCore(t, b)
	if a != b {
		t.Errorf("the two images read %s and %s", a, b)
	}
}

// mountOptions returns the super options of the mount at mp.
func mountOptions(t *testing.T, mp string) string {
	t.Helper()
	infos, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(mp))
	if err != nil || len(infos) != 1 {
		t.Fatalf("mount at %s: %v, %v", mp, infos, err)
	}
	return infos[0].VFSOptions
}

// dropCached writes back and evicts the pages of the layer's blob.
func dropCached(ctx context.Context, t *testing.T, r *Restorer, ci *Image) {
	t.Helper()
	ra, err := r.Content.ReaderAt(ctx, ci.Layer)
	if err != nil {
		t.Fatal(err)
	}
	defer ra.Close()
	fr, ok := ra.(interface{ File() *os.File })
	if !ok {
		stock(t)
	}
	f := fr.File()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	if pct, err := cachedPercent(f.Name()); err != nil || pct >= inPlaceDirectBelow {
		t.Skipf("cannot evict the blob from the page cache (%d%% cached, %v): a memory file system?", pct, err)
	}
}

// needDirectIO skips a test that needs root and EROFS's directio.
func needDirectIO(t *testing.T) {
	t.Helper()
	testutil.RequiresRoot(t)
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	var major, minor int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(uts.Release[:]), "%d.%d", &major, &minor); err != nil || major*100+minor < 613 {
		t.Skipf("EROFS's directio needs Linux 6.13, this is %s", unix.ByteSliceToString(uts.Release[:]))
	}
}

// TestInPlaceDirectIOUnlessCached: a blob out of the page cache is mounted
// with directio, one mostly in it is mounted buffered, and both read the
// same files.
func TestInPlaceDirectIOUnlessCached(t *testing.T) {
	needDirectIO(t)
	ctx := namespaces.WithNamespace(context.Background(), "test")
	ci, r, sn := inPlaceImage(ctx, t)
	inPlaceDirectRefused.Store(false)
	dropCached(ctx, t, r, ci)
	dir, err := r.checkpointData(ctx, sn, "native", ci)
	if err != nil {
		t.Fatal(err)
	}
	readCore(t, dir)
	if o := mountOptions(t, dir); !strings.Contains(o, "directio") {
		t.Errorf("blob not cached: mounted %q, want directio", o)
	}

	if err := r.unmountInPlace(ctx, cacheKey(ci.Layer.Digest)+"/data-view"); err != nil {
		t.Fatal(err)
	}
	ra, err := r.Content.ReaderAt(ctx, ci.Layer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, content.NewReader(ra)); err != nil {
		t.Fatal(err)
	}
	ra.Close()
	if dir, err = r.checkpointData(ctx, sn, "native", ci); err != nil {
		t.Fatal(err)
	}
	readCore(t, dir)
	if o := mountOptions(t, dir); strings.Contains(o, "directio") {
		t.Errorf("blob cached: mounted %q, want it buffered", o)
	}
}

// noDirectIOMounts refuses directio, as Linux 6.12 does, and counts it.
type noDirectIOMounts struct {
	mount.Manager
	refused *atomic.Int32
}

func (m noDirectIOMounts) Activate(ctx context.Context, name string, ms []mount.Mount, opts ...mount.ActivateOpt) (mount.ActivationInfo, error) {
	for _, o := range ms[0].Options {
		if o == "directio" {
			m.refused.Add(1)
			return mount.ActivationInfo{}, fmt.Errorf("mount %s: %w", name, unix.EINVAL)
		}
	}
	return m.Manager.Activate(ctx, name, ms, opts...)
}

// TestInPlaceWithoutDirectIO: a kernel that refuses directio gets the
// layer mounted buffered, not extracted.
func TestInPlaceWithoutDirectIO(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := namespaces.WithNamespace(context.Background(), "test")
	ci, r, sn := inPlaceImage(ctx, t)
	var refused atomic.Int32
	r.Mounts = noDirectIOMounts{r.Mounts, &refused}
	inPlaceDirectRefused.Store(false)
	defer inPlaceDirectRefused.Store(false)
	var runs atomic.Int32
	extractLayer = func(ctx context.Context, p content.Provider, l ocispec.Descriptor, dir string) error {
		runs.Add(1)
		return ExtractLayer(ctx, p, l, dir)
	}
	defer func() { extractLayer = ExtractLayer }()
	dropCached(ctx, t, r, ci)
	dir, err := r.checkpointData(ctx, sn, "native", ci)
	if err != nil {
		t.Fatal(err)
	}
	readCore(t, dir)
	if ok, err := mountinfo.Mounted(dir); err != nil || !ok {
		t.Errorf("%s is not a mount point (%v)", dir, err)
	}
	if o := mountOptions(t, dir); strings.Contains(o, "directio") {
		t.Errorf("mounted %q", o)
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("checkpoint layer extracted %d times, want 0", n)
	}
	if n := refused.Load(); n != 1 {
		t.Errorf("directio asked for %d times, want once (then remembered as refused)", n)
	}
	// The next mount does not ask again.
	if err := r.unmountInPlace(ctx, cacheKey(ci.Layer.Digest)+"/data-view"); err != nil {
		t.Fatal(err)
	}
	dropCached(ctx, t, r, ci)
	if dir, err = r.checkpointData(ctx, sn, "native", ci); err != nil {
		t.Fatal(err)
	}
	readCore(t, dir)
	if n := refused.Load(); n != 1 {
		t.Errorf("directio asked for %d times after a refusal, want once", n)
	}
}

// failingMounts is a mount manager that mounts nothing.
type failingMounts struct{ mount.Manager }

func (failingMounts) Info(context.Context, string) (mount.ActivationInfo, error) {
	return mount.ActivationInfo{}, errdefs.ErrNotFound
}

func (failingMounts) Activate(context.Context, string, []mount.Mount, ...mount.ActivateOpt) (mount.ActivationInfo, error) {
	return mount.ActivationInfo{}, errors.New("no loop device left")
}

func (failingMounts) Deactivate(context.Context, string) error { return errdefs.ErrNotFound }

// TestInPlaceFallsBackWhenNoLongerMountable: a cached entry read in place
// whose layer can no longer be mounted is set up again, extracted.
func TestInPlaceFallsBackWhenNoLongerMountable(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := namespaces.WithNamespace(context.Background(), "test")
	ci, r, sn := inPlaceImage(ctx, t)
	if _, err := r.checkpointData(ctx, sn, "native", ci); err != nil {
		t.Fatal(err)
	}
	r.Mounts = failingMounts{}
	var runs atomic.Int32
	extractLayer = func(ctx context.Context, p content.Provider, l ocispec.Descriptor, dir string) error {
		runs.Add(1)
		return ExtractLayer(ctx, p, l, dir)
	}
	defer func() { extractLayer = ExtractLayer }()
	dir, err := r.checkpointData(ctx, sn, "native", ci)
	if err != nil {
		t.Fatal(err)
	}
	readCore(t, dir)
	if runs.Load() != 1 {
		t.Errorf("checkpoint layer extracted %d times, want 1", runs.Load())
	}
}

// TestInPlaceFormNotForged: an extracted layer that holds files named as
// the form's is read as a tree, and its "index" is never mounted.
func TestInPlaceFormNotForged(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := namespaces.WithNamespace(context.Background(), "test")
	cs := newStore(t)
	p := makeTar(t, []tarEntry{
		{"checkpoint", tar.TypeDir, ""},
		{layout.InPlaceIndex, tar.TypeReg, "not an erofs image"},
		{layout.InPlaceBlob, tar.TypeReg, "not the blob"},
	})
	layer := putBlob(t, cs, ocispec.MediaTypeImageLayer, p)
	layer.Annotations = map[string]string{keys.LayerInPlace: keys.LayerInPlaceEROFS}
	dir := t.TempDir()
	if err := ExtractLayer(ctx, cs, layer, dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "checkpoint")); err != nil {
		t.Fatal(err)
	}
	if (&Restorer{Content: cs}).inPlace(ctx, &Image{Layer: layer}, dir) {
		t.Fatal("an extracted layer planting the form's files was taken for it")
	}
}

// TestInPlaceFormNotForgedBySparseFile: a layer whose tar holds an "index"
// and a PAX sparse layer.tar whose stated size is the blob's own extracts,
// in a few bytes, to a directory shaped as the form, whose layer.tar has
// the blob's size. It is not the blob: the restore neither takes it for the
// form nor mounts the "index", from the unpacked snapshot or the cache.
func TestInPlaceFormNotForgedBySparseFile(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := namespaces.WithNamespace(context.Background(), "test")
	cs := newStore(t)
	layer := putBlob(t, cs, ocispec.MediaTypeImageLayer, sparseForgery(t))
	layer.Annotations = map[string]string{keys.LayerInPlace: keys.LayerInPlaceEROFS}
	config := putJSON(t, cs, ocispec.MediaTypeImageConfig, ocispec.Image{
		RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{layer.Digest}},
	})
	sn, err := native.NewSnapshotter(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close()
	// The unpacker extracts it (it is not checkpoint-shaped).
	unpackWith(ctx, t, sn, cs, layer.Digest.String(), layer)
	mounts, err := sn.View(ctx, "look", layer.Digest.String())
	if err != nil {
		t.Fatal(err)
	}
	dir, err := bindDir(mounts)
	if err != nil {
		t.Fatal(err)
	}
	ci := &Image{Name: "forged", Layer: layer, Manifest: ocispec.Manifest{Config: config, Layers: []ocispec.Descriptor{layer}}}
	fi, err := os.Stat(filepath.Join(dir, layout.InPlaceBlob))
	if err != nil || fi.Size() != layer.Size || !inPlaceShaped(ci, dir) {
		t.Fatalf("the forgery extracts to %v (%v), shaped as the form: %v; want the form with a layer.tar of %d bytes, or the test proves nothing",
			fi, err, inPlaceShaped(ci, dir), layer.Size)
	}
	r := &Restorer{Content: cs, Mounts: &countingMounts{}}
	if r.inPlace(ctx, ci, dir) {
		t.Fatal("an extracted layer with a sparse layer.tar of the blob's size was taken for the form")
	}
	if err := sn.Remove(ctx, "look"); err != nil {
		t.Fatal(err)
	}

	// Through the restore: the unpacked snapshot is not used, and the
	// layer, extracted again, is no checkpoint. Nothing is mounted.
	if dir, err := r.checkpointData(ctx, sn, "native", ci); err == nil {
		t.Errorf("checkpointData of the forgery = %s; want it refused", dir)
	}
	if n := r.Mounts.(*countingMounts).activated.Load(); n != 0 {
		t.Errorf("the forgery's index was mounted %d times", n)
	}
}

// countingMounts is a mount manager that counts what it is asked to mount
// and mounts nothing.
type countingMounts struct {
	failingMounts
	activated atomic.Int32
}

func (m *countingMounts) Activate(ctx context.Context, name string, mounts []mount.Mount, opts ...mount.ActivateOpt) (mount.ActivationInfo, error) {
	m.activated.Add(1)
	return m.failingMounts.Activate(ctx, name, mounts, opts...)
}

// sparseForgery returns a tar holding layer.erofs and, as a PAX (GNU 0.1)
// sparse file of one stored byte, layer.tar, whose real size is the size of
// the tar itself.
func sparseForgery(t *testing.T) []byte {
	t.Helper()
	block := func(n int) int { return (n + 511) &^ 511 }
	header := func(name string, typ byte, size int) []byte {
		h := make([]byte, 512)
		copy(h[0:], name)
		copy(h[100:], "0000644\x00")
		copy(h[108:], "0000000\x00")
		copy(h[116:], "0000000\x00")
		copy(h[124:], fmt.Sprintf("%011o\x00", size))
		copy(h[136:], "00000000000\x00")
		h[156] = typ
		copy(h[257:], "ustar\x0000")
		copy(h[148:], "        ")
		sum := 0
		for _, b := range h {
			sum += int(b)
		}
		copy(h[148:], fmt.Sprintf("%06o\x00 ", sum))
		return h
	}
	record := func(kv string) string {
		// A PAX record's length counts its own digits.
		n := len(kv) + 3
		for len(fmt.Sprintf("%d %s\n", n, kv)) != n {
			n++
		}
		return fmt.Sprintf("%d %s\n", n, kv)
	}
	index := "not an erofs image"
	build := func(realSize int) []byte {
		pax := record("GNU.sparse.size="+strconv.Itoa(realSize)) + record("GNU.sparse.numblocks=1") + record("GNU.sparse.map=0,1")
		var b bytes.Buffer
		b.Write(header(layout.InPlaceIndex, tar.TypeReg, len(index)))
		b.Write([]byte(index))
		b.Write(make([]byte, block(len(index))-len(index)))
		b.Write(header("PaxHeaders/"+layout.InPlaceBlob, tar.TypeXHeader, len(pax)))
		b.Write([]byte(pax))
		b.Write(make([]byte, block(len(pax))-len(pax)))
		b.Write(header(layout.InPlaceBlob, tar.TypeReg, 1))
		b.Write(append([]byte("x"), make([]byte, 511)...))
		b.Write(make([]byte, 1024))
		return b.Bytes()
	}
	size := 0
	for {
		p := build(size)
		if len(p) == size {
			return p
		}
		size = len(p)
	}
}
