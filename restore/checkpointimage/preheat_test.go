//go:build linux

// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/plugins/snapshots/native"
	zpages "rekindle.local/contract/pages"
)

// lockedKiB is this process's locked memory (VmLck), in KiB.
func lockedKiB(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		var n int64
		if _, err := fmt.Sscanf(l, "VmLck: %d kB", &n); err == nil {
			return n
		}
	}
	t.Fatal("no VmLck in /proc/self/status")
	return 0
}

// preheatFixture: a store holding checkpoint image ckpt:1 (two pages
// images, 192 KiB, unless entries say otherwise) and the plain image
// plain:1, in namespace default.
func preheatFixture(t *testing.T, entries []tarEntry) (*Preheat, memImages, snapshots.Snapshotter, *Image) {
	t.Helper()
	if entries == nil {
		entries = []tarEntry{
			{"checkpoint", tar.TypeDir, ""},
			{"checkpoint/core-1.img", tar.TypeReg, "core"},
			{"checkpoint/pages-1.img", tar.TypeReg, strings.Repeat("p", 128<<10)},
			{"checkpoint/pages-2.img", tar.TypeReg, strings.Repeat("q", 64<<10-100)},
		}
	}
	cs := newStore(t)
	cfg := putJSON(t, cs, ocispec.MediaTypeImageConfig, ocispec.Image{Platform: platforms.DefaultSpec(), RootFS: ocispec.RootFS{Type: "layers"}})
	layer := putBlob(t, cs, ocispec.MediaTypeImageLayer, makeTar(t, entries))
	manifest := func(ann map[string]string) ocispec.Descriptor {
		return putJSON(t, cs, ocispec.MediaTypeImageManifest, ocispec.Manifest{
			MediaType: ocispec.MediaTypeImageManifest, Config: cfg, Layers: []ocispec.Descriptor{layer}, Annotations: ann,
		})
	}
	imgs := memImages{
		"ckpt:1":  {Name: "ckpt:1", Target: manifest(map[string]string{"org.criu.checkpoint.container.name": "engine"})},
		"plain:1": {Name: "plain:1", Target: manifest(nil)},
	}
	sn, err := native.NewSnapshotter(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sn.Close() })
	r := &Restorer{Images: imgs, Content: cs, Platform: platforms.Default(), Snapshotter: func(name string) snapshots.Snapshotter {
		if name == "native" {
			return sn
		}
		return nil
	}}
	p := &Preheat{
		Restorer: r, Images: []string{"ckpt:1", "missing:1", "plain:1"}, Max: 1 << 20, MaxSetting: "1MiB",
		Snapshotter: "native", Status: filepath.Join(t.TempDir(), "preheat.json"),
		Namespaces: func(context.Context) ([]string, error) { return []string{"default"}, nil },
	}
	t.Cleanup(func() {
		p.Images = nil
		p.Reconcile(context.Background())
	})
	return p, imgs, sn, &Image{Name: "ckpt:1", Layer: layer}
}

func stateOf(st PreheatStatus, image string) PreheatImage {
	for _, im := range st.Images {
		if im.Image == image {
			return im
		}
	}
	return PreheatImage{}
}

// TestPreheatHoldsAndLetsGo: a named checkpoint image's pages images are
// locked in memory and its entry held; other names say why they are not;
// the status file says the same; a removed image is let go, and an entry
// that went is taken again.
func TestPreheatHoldsAndLetsGo(t *testing.T) {
	ctx := context.Background()
	p, imgs, sn, ci := preheatFixture(t, nil)
	before := lockedKiB(t)

	st := p.Reconcile(ctx)
	got := stateOf(st, "ckpt:1")
	if got.State != "resident" || got.Bytes != 192<<10 || got.Files != 2 || got.Layer != ci.Layer.Digest {
		t.Fatalf("ckpt:1 = %+v, want resident, 192 KiB in 2 files", got)
	}
	if st.HeldBytes != 192<<10 {
		t.Errorf("held %d bytes, want %d", st.HeldBytes, 192<<10)
	}
	if n := lockedKiB(t) - before; n != 192 {
		t.Errorf("locked memory grew by %d KiB, want 192", n)
	}
	hold := holdKey(holdID(ci.Layer.Digest))
	if _, err := sn.Stat(ctx, hold); err != nil {
		t.Errorf("the preheat's hold on the entry: %v", err)
	}
	if s := stateOf(st, "missing:1"); s.State != "missing" {
		t.Errorf("missing:1 = %+v", s)
	}
	if s := stateOf(st, "plain:1"); s.State != "not a checkpoint image" {
		t.Errorf("plain:1 = %+v", s)
	}
	b, err := os.ReadFile(p.Status)
	if err != nil {
		t.Fatal(err)
	}
	var written PreheatStatus
	if err := json.Unmarshal(b, &written); err != nil || stateOf(written, "ckpt:1").State != "resident" || written.MaxBytes != 1<<20 {
		t.Errorf("status file %s: %s (%v)", p.Status, b, err)
	}

	// A second pass changes nothing.
	if st := p.Reconcile(ctx); stateOf(st, "ckpt:1").State != "resident" || lockedKiB(t)-before != 192 {
		t.Errorf("a second pass: %+v, %d KiB locked", stateOf(st, "ckpt:1"), lockedKiB(t)-before)
	}

	// The entry's hold went (a changed entry dropped with it): taken again.
	if err := sn.Remove(ctx, hold); err != nil {
		t.Fatal(err)
	}
	if st := p.Reconcile(ctx); stateOf(st, "ckpt:1").State != "resident" || lockedKiB(t)-before != 192 {
		t.Errorf("after the hold went: %+v, %d KiB locked", stateOf(st, "ckpt:1"), lockedKiB(t)-before)
	}
	if _, err := sn.Stat(ctx, hold); err != nil {
		t.Errorf("the hold was not taken again: %v", err)
	}

	// The image is removed: everything goes.
	delete(imgs, "ckpt:1")
	if st := p.Reconcile(ctx); stateOf(st, "ckpt:1").State != "missing" || st.HeldBytes != 0 {
		t.Errorf("after the image went: %+v", st)
	}
	if n := lockedKiB(t) - before; n != 0 {
		t.Errorf("%d KiB still locked after the image went", n)
	}
	if _, err := sn.Stat(ctx, hold); !errdefs.IsNotFound(err) {
		t.Errorf("the hold after the image went: %v, want not found", err)
	}
}

// TestPreheatTooLarge: an image over the ceiling is left to restore from
// disk, saying by how much, and holds nothing.
func TestPreheatTooLarge(t *testing.T) {
	ctx := context.Background()
	p, _, sn, ci := preheatFixture(t, nil)
	p.Max, p.MaxSetting = 100<<10, "100KiB"
	before := lockedKiB(t)
	got := stateOf(p.Reconcile(ctx), "ckpt:1")
	if got.State != "too large" || got.Bytes != 192<<10 {
		t.Fatalf("ckpt:1 = %+v, want too large, 192 KiB", got)
	}
	for _, want := range []string{"192KiB", "100KiB left", "checkpoint_preheat_max_memory", "restores from disk"} {
		if !strings.Contains(got.Reason, want) {
			t.Errorf("reason %q does not say %q", got.Reason, want)
		}
	}
	if n := lockedKiB(t) - before; n != 0 {
		t.Errorf("%d KiB locked for an image that does not fit", n)
	}
	if _, err := sn.Stat(ctx, holdKey(holdID(ci.Layer.Digest))); !errdefs.IsNotFound(err) {
		t.Errorf("a hold on an image that does not fit: %v", err)
	}
}

// TestPreheatRefusesWhatIsNoRegularFile: a pages image that is a symbolic
// link (to a host file) or a FIFO is refused, naming it; nothing is locked.
func TestPreheatRefusesWhatIsNoRegularFile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		entry tarEntry
	}{
		{"symbolic link", tarEntry{"checkpoint/pages-3.img", tar.TypeSymlink, "/etc/passwd"}},
		{"FIFO", tarEntry{"checkpoint/pages-3.img", tar.TypeFifo, ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "pages-1.img"), bytes.Repeat([]byte("p"), 4096), 0o600); err != nil {
				t.Fatal(err)
			}
			var err error
			if tc.entry.typ == tar.TypeSymlink {
				err = os.Symlink(tc.entry.body, filepath.Join(dir, "pages-3.img"))
			} else {
				err = syscall.Mkfifo(filepath.Join(dir, "pages-3.img"), 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
			before := lockedKiB(t)
			files, _, err := openPages(dir)
			if err == nil {
				closeFiles(files)
				t.Fatal("openPages accepted it")
			}
			if !strings.Contains(err.Error(), "pages-3.img") {
				t.Errorf("the error does not name the file: %v", err)
			}
			if n := lockedKiB(t) - before; n != 0 {
				t.Errorf("%d KiB locked", n)
			}
		})
	}
}

// TestPreheatHoldsTheDecodedCopy: a compressed image's pages are held
// compressed until its decoded copy is made, then the decoded ones, which
// its cached restores read.
func TestPreheatHoldsTheDecodedCopy(t *testing.T) {
	delay := decodeDelay
	decodeDelay = 0
	t.Cleanup(func() { decodeDelay = delay })
	ctx := context.Background()
	pages := bytes.Repeat([]byte("a page of memory "), 20000)
	p, _, sn, ci := preheatFixture(t, []tarEntry{
		{"checkpoint", tar.TypeDir, ""},
		{"checkpoint/core-1.img", tar.TypeReg, "core"},
		{"checkpoint/pages-1.img" + zpages.Suffix, tar.TypeReg, compressedPages(t, pages)},
	})
	p.Images = []string{"ckpt:1"}
	first := stateOf(p.Reconcile(ctx), "ckpt:1")
	if first.State != "resident" || !strings.Contains(first.Source, "compressed") {
		t.Fatalf("first pass: %+v, want the compressed pages resident", first)
	}
	waitDecoded(t, sn, ci)
	second := stateOf(p.Reconcile(ctx), "ckpt:1")
	page := int64(os.Getpagesize())
	want := (int64(len(pages)) + page - 1) / page * page
	if second.State != "resident" || !strings.Contains(second.Source, "decoded") || second.Bytes != want {
		t.Fatalf("after the decoded copy: %+v, want %d bytes of decoded pages", second, want)
	}
	if _, err := sn.Stat(ctx, decodedHoldKey(holdID(ci.Layer.Digest))); err != nil {
		t.Errorf("the preheat's hold on the decoded copy: %v", err)
	}
	// Held, it stays held: a third pass locks nothing again.
	locked := lockedKiB(t)
	h := p.held[ci.Layer.Digest]
	if third := stateOf(p.Reconcile(ctx), "ckpt:1"); third != second || p.held[ci.Layer.Digest] != h || lockedKiB(t) != locked {
		t.Errorf("a third pass took the decoded pages again: %+v", third)
	}
}

func TestParsePreheatMaxMemory(t *testing.T) {
	for in, want := range map[string]int64{"16GiB": 16 << 30, "512m": 512 << 20} {
		if got, err := ParsePreheatMaxMemory(in); err != nil || got != want {
			t.Errorf("ParsePreheatMaxMemory(%q) = %d, %v, want %d", in, got, err, want)
		}
	}
	if got, err := ParsePreheatMaxMemory(""); err != nil || got <= 0 {
		t.Errorf("the default: %d, %v", got, err)
	}
	for _, bad := range []string{"lots", "0", "-1GiB", "0%", "95%", "x%"} {
		if _, err := ParsePreheatMaxMemory(bad); err == nil || !strings.Contains(err.Error(), "checkpoint_preheat_max_memory") {
			t.Errorf("ParsePreheatMaxMemory(%q): %v, want an error naming the option", bad, err)
		}
	}
}

// TestPreheatSweepsAnEarlierRunsHolds: holds that a preheat of an earlier
// containerd left (killed before it let go) are removed by the first pass,
// the ones it takes itself kept.
func TestPreheatSweepsAnEarlierRunsHolds(t *testing.T) {
	ctx := context.Background()
	p, _, sn, ci := preheatFixture(t, nil)
	if _, err := p.Restorer.CheckpointDir(ctx, "native", ci); err != nil {
		t.Fatal(err)
	}
	info, err := sn.Stat(ctx, cacheKey(ci.Layer.Digest)+"/data-view")
	if err != nil {
		t.Fatal(err)
	}
	stale := holdKey("preheat-0123456789abcdef")
	if _, err := sn.View(ctx, stale, info.Parent); err != nil {
		t.Fatal(err)
	}
	if st := p.Reconcile(ctx); stateOf(st, "ckpt:1").State != "resident" {
		t.Fatalf("ckpt:1 = %+v", stateOf(st, "ckpt:1"))
	}
	if _, err := sn.Stat(ctx, stale); !errdefs.IsNotFound(err) {
		t.Errorf("an earlier run's hold after the first pass: %v, want not found", err)
	}
	if _, err := sn.Stat(ctx, holdKey(holdID(ci.Layer.Digest))); err != nil {
		t.Errorf("the pass's own hold: %v", err)
	}
}
