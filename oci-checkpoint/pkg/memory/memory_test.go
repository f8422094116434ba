package memory

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/checkpoint-restore/go-criu/v8/crit"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pagemap"
	"github.com/klauspost/compress/zstd"

	"rekindle.local/oci-checkpoint/pkg/criuimg"
)

type entry struct {
	name string
	kind byte
	size int64
}

func layer(t *testing.T, es []entry) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Typeflag: e.kind, Mode: 0o644, Size: e.size}
		if e.kind != tar.TypeReg {
			h.Size, h.Linkname = 0, "/etc/passwd"
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.kind == tar.TypeReg {
			tw.Write(bytes.Repeat([]byte{1}, int(e.size)))
		}
	}
	tw.Close()
	return &b
}

// fileLayer is a layer of one regular file, name, holding data.
func fileLayer(t *testing.T, name string, data []byte) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))}); err != nil {
		t.Fatal(err)
	}
	tw.Write(data)
	tw.Close()
	return &b
}

func TestExtractTakesCRIUImagesByBaseNameOnly(t *testing.T) {
	dir := t.TempDir()
	l, err := Extract(layer(t, []entry{
		{"checkpoint/pstree.img", tar.TypeReg, 10},
		{"./checkpoint/mm-1.img", tar.TypeReg, 20},
		{"checkpoint/pages-1.img", tar.TypeReg, 4096},
		{"checkpoint/pages-2.img", tar.TypeReg, 8192},
		{"checkpoint/tmpfs-dev-71.tar.gz.img", tar.TypeReg, 2 << 20}, // sized, not taken
		{"checkpoint/inventory.img", tar.TypeReg, 30},                // not read, under 1 MiB
		{"checkpoint/../evil.img", tar.TypeReg, 5},                   // outside checkpoint/
		{"checkpoint/sub/core-1.img", tar.TypeReg, 5},                // not directly under it
		{"checkpoint/files.img", tar.TypeSymlink, 0},                 // not a regular file
		{"checkpoint/spec.dump", tar.TypeReg, 5},                     // not a CRIU image
		{"rootfs-diff.tar", tar.TypeReg, 5},
	}), dir)
	if err != nil {
		t.Fatal(err)
	}
	if l.PagesFiles != 4096+8192 {
		t.Errorf("pages files: %d bytes, want %d", l.PagesFiles, 4096+8192)
	}
	if len(l.Others) != 1 || l.Others["tmpfs-dev-71.tar.gz.img"] != 2<<20 {
		t.Errorf("other images: %v, want the 2 MiB tmpfs image alone", l.Others)
	}
	var got []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, _ error) error {
		if !fi.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			got = append(got, rel)
		}
		return nil
	})
	sort.Strings(got)
	if strings.Join(got, " ") != "mm-1.img pstree.img" {
		t.Errorf("extracted %v, want mm-1.img and pstree.img", got)
	}
}

func TestExtractRefusesAnOversizedImageAndADuplicate(t *testing.T) {
	_, err := Extract(layer(t, []entry{{"checkpoint/mm-1.img", tar.TypeReg, maxImage + 1}}), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "more than a CRIU image of its kind holds") {
		t.Errorf("oversized image: %v", err)
	}
	_, err = Extract(layer(t, []entry{{"checkpoint/mm-1.img", tar.TypeReg, 1}, {"checkpoint/mm-1.img", tar.TypeReg, 1}}), t.TempDir())
	if err == nil {
		t.Error("a second copy of one image was accepted")
	}
}

func TestReadRefusesBrokenImagesWithoutACrash(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string][]byte{
		"pstree.img":    {0x54, 0x19, 0x20, 0x40, 0x01, 0x00, 0x00, 0x00}, // a magic, then nothing sane
		"mm-1.img":      bytes.Repeat([]byte{0xff}, 64),
		"pagemap-1.img": {},
	} {
		os.WriteFile(filepath.Join(dir, name), body, 0o600)
	}
	if _, err := Read(dir, nil); err == nil {
		t.Error("broken images were read as a checkpoint")
	}
}

func TestOverlapCountsOnlyTheMapping(t *testing.T) {
	spans := []span{{0x1000, 0x5000}, {0x8000, 0x9000}}
	if got := overlap(spans, 0x3000, 0x8800); got != 0x2000+0x800 {
		t.Errorf("overlap: %#x, want %#x", got, 0x2800)
	}
	if got := overlap(spans, 0x5000, 0x8000); got != 0 {
		t.Errorf("a gap: %#x", got)
	}
}

// A pages file of five pages, [nonzero zero zero | zero nonzero], behind
// two pagemap entries with a parent's entry between them: the zeros are
// found at the addresses the pagemap gives those pages, across the entry
// boundary.
func TestZeroPagesAreFoundAtTheirAddresses(t *testing.T) {
	ps := int(criuimg.PageSize)
	pages := make([]byte, 5*ps)
	pages[7] = 1
	pages[4*ps+ps-1] = 1
	l, err := Extract(fileLayer(t, "checkpoint/pages-7.img", pages), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if l.ZeroPages != int64(3*ps) {
		t.Fatalf("zero pages: %d bytes, want %d", l.ZeroPages, 3*ps)
	}

	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "pagemap-1.img"))
	if err != nil {
		t.Fatal(err)
	}
	pid, two, three, one := uint32(7), uint64(2), uint64(3), uint64(1)
	present, parent := uint32(criuimg.PagePresent), uint32(criuimg.PagePresent|criuimg.PageParent)
	va := func(p uint64) *uint64 { return &p }
	var compat uint32 // required by the proto, unused by CRIU since 3.x
	img := &crit.CriuImage{Magic: "PAGEMAP", Entries: []*crit.CriuEntry{
		{Message: &pagemap.PagemapHead{PagesId: &pid}},
		{Message: &pagemap.PagemapEntry{Vaddr: va(0x10000), NrPages: &three, CompatNrPages: &compat, Flags: &present}},
		{Message: &pagemap.PagemapEntry{Vaddr: va(0x20000), NrPages: &one, CompatNrPages: &compat, Flags: &parent}},
		{Message: &pagemap.PagemapEntry{Vaddr: va(0x30000), NrPages: &two, CompatNrPages: &compat, Flags: &present}},
	}}
	if err := crit.New(nil, f, "", false, false).Encode(img); err != nil {
		t.Fatal(err)
	}
	f.Close()
	stored, zero, err := storedPages(dir, 1, l)
	if err != nil {
		t.Fatal(err)
	}
	p := uint64(ps)
	want := []span{{0x10000 + p, 0x10000 + 3*p}, {0x30000, 0x30000 + p}}
	if len(zero) != len(want) || zero[0] != want[0] || zero[1] != want[1] {
		t.Errorf("zero pages at %#v, want %#v", zero, want)
	}
	if overlap(stored, 0, 1<<40) != int64(5*ps) {
		t.Errorf("stored %#v, want five pages (the parent's left out)", stored)
	}
}

// A pages image compressed by --compression pages is read as the image it
// holds: its size and pages of zeros, under the image's own name.
func TestCompressedPagesImageIsReadAsItsImage(t *testing.T) {
	ps := int(criuimg.PageSize)
	pages := make([]byte, 4*ps)
	pages[ps+3] = 1
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	z := enc.EncodeAll(pages, nil)
	enc.Close()
	l, err := Extract(fileLayer(t, "checkpoint/pages-3.img.zst", z), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if l.PagesFiles != int64(len(pages)) || l.ZeroPages != int64(3*ps) {
		t.Errorf("pages files %d bytes, %d of zeros; want %d and %d", l.PagesFiles, l.ZeroPages, len(pages), 3*ps)
	}
	if _, ok := l.zero["pages-3.img"]; !ok {
		t.Errorf("zero runs not under pages-3.img: %v", l.zero)
	}
}
