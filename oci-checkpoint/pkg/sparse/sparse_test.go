package sparse

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/checkpoint-restore/go-criu/v8/crit"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/mm"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pagemap"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pstree"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/vma"

	"rekindle.local/oci-checkpoint/pkg/criuimg"
)

const (
	anonPriv    = criuimg.VMARegular | criuimg.VMAAnonPrivate
	filePriv    = criuimg.VMARegular | criuimg.VMAFilePrivate
	pagePresent = criuimg.PagePresent
	pageParent  = criuimg.PageParent
	pageLazy    = criuimg.PageLazy
)

var pageSize = criuimg.PageSize

type region struct {
	start, pages uint64
	status       uint32
}

// page content: 0 is a page of zeros, anything else a page filled with it.
type proc struct {
	pid, ppid uint32
	vmas      []region
	entries   []region // start, pages; status is the pagemap flags
	content   []byte   // one per page stored in the pages file
}

func write(t *testing.T, dir, name string, img *crit.CriuImage) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := crit.New(nil, f, "", false, false).Encode(img); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func dump(t *testing.T, procs []proc) string {
	t.Helper()
	dir := t.TempDir()
	var tree []*crit.CriuEntry
	for _, p := range procs {
		pid, ppid, z := p.pid, p.ppid, uint32(0)
		tree = append(tree, &crit.CriuEntry{Message: &pstree.PstreeEntry{Pid: &pid, Ppid: &ppid, Pgid: &pid, Sid: &z}})
		var vmas []*vma.VmaEntry
		for _, v := range p.vmas {
			start, end, st := v.start, v.start+v.pages*pageSize, v.status
			var zero64 uint64
			var zero32 uint32
			var fd int64 = -1
			vmas = append(vmas, &vma.VmaEntry{Start: &start, End: &end, Pgoff: &zero64, Shmid: &zero64,
				Prot: &zero32, Flags: &zero32, Status: &st, Fd: &fd})
		}
		var zero64 uint64
		var zero32 uint32
		write(t, dir, fmt.Sprintf("mm-%d.img", p.pid), &crit.CriuImage{Magic: "MM", Entries: []*crit.CriuEntry{{Message: &mm.MmEntry{
			MmStartCode: &zero64, MmEndCode: &zero64, MmStartData: &zero64, MmEndData: &zero64, MmStartStack: &zero64,
			MmStartBrk: &zero64, MmBrk: &zero64, MmArgStart: &zero64, MmArgEnd: &zero64, MmEnvStart: &zero64,
			MmEnvEnd: &zero64, ExeFileId: &zero32, Vmas: vmas}}}})
		id := p.pid
		ents := []*crit.CriuEntry{{Message: &pagemap.PagemapHead{PagesId: &id}}}
		for _, e := range p.entries {
			va, n, fl := e.start, e.pages, e.status
			ents = append(ents, &crit.CriuEntry{Message: &pagemap.PagemapEntry{Vaddr: &va, NrPages: &n, CompatNrPages: &zero32, Flags: &fl}})
		}
		write(t, dir, fmt.Sprintf("pagemap-%d.img", p.pid), &crit.CriuImage{Magic: "PAGEMAP", Entries: ents})
		var pages bytes.Buffer
		for _, c := range p.content {
			pages.Write(bytes.Repeat([]byte{c}, int(pageSize)))
		}
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("pages-%d.img", p.pid)), pages.Bytes(), 0o600)
	}
	write(t, dir, "pstree.img", &crit.CriuImage{Magic: "PSTREE", Entries: tree})
	return dir
}

// after: each pagemap entry of pid as the plan writes it, and the pages
// file's content as the plan writes it.
func after(t *testing.T, dir string, p *Plan, pid uint32) ([]region, []byte) {
	t.Helper()
	r, _, changed, err := p.File(dir, fmt.Sprintf("pagemap-%d.img", pid))
	if err != nil || !changed {
		t.Fatalf("pagemap-%d.img: changed %v, %v", pid, changed, err)
	}
	b, _ := io.ReadAll(r)
	tmp := filepath.Join(t.TempDir(), "pagemap.img")
	os.WriteFile(tmp, b, 0o600)
	img, err := criuimg.Decode(filepath.Dir(tmp), "pagemap.img", &pagemap.PagemapEntry{})
	if err != nil {
		t.Fatal(err)
	}
	var out []region
	for _, e := range img.Entries[1:] {
		pe := e.Message.(*pagemap.PagemapEntry)
		out = append(out, region{pe.GetVaddr(), pe.GetNrPages(), pe.GetFlags()})
	}
	r, size, changed, err := p.File(dir, fmt.Sprintf("pages-%d.img", pid))
	if err != nil || !changed {
		t.Fatalf("pages-%d.img: changed %v, %v", pid, changed, err)
	}
	defer r.Close()
	pages, _ := io.ReadAll(r)
	if int64(len(pages)) != size {
		t.Fatalf("pages-%d.img: %d bytes read, size said %d", pid, len(pages), size)
	}
	var content []byte
	for i := 0; i < len(pages); i += int(pageSize) {
		content = append(content, pages[i])
	}
	return out, content
}

// short: the small pages files below leave out runs of a single page.
func short(t *testing.T) {
	old := minRun
	minRun = 1
	t.Cleanup(func() { minRun = old })
}

func TestShortRunsOfZerosAreKept(t *testing.T) {
	const a = 0x100000
	// 15 zeros, a 1, 16 zeros, a 2.
	content := append(append(append(make([]byte, 15), 1), make([]byte, 16)...), 2)
	dir := dump(t, []proc{{pid: 1, vmas: []region{{a, 33, anonPriv}},
		entries: []region{{a, 33, pagePresent}}, content: content}})
	p, err := Make(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, pages := after(t, dir, p, 1)
	want := []region{{a, 16, pagePresent}, {a + 32*pageSize, 1, pagePresent}}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(pages) != 17 || p.Dropped != int64(16*pageSize) {
		t.Errorf("pagemap %v (%d pages, %d bytes dropped), want %v: the run of 15 kept, the 16 left out", got, len(pages), p.Dropped, want)
	}
}

func TestZerosOfPrivateAnonymousMemoryAreLeftOut(t *testing.T) {
	short(t)
	const a, f = 0x100000, 0x200000
	dir := dump(t, []proc{{
		pid:  1,
		vmas: []region{{a, 4, anonPriv}, {f, 2, filePriv}},
		// One entry over the anonymous mapping, one over the file's.
		entries: []region{{a, 4, pagePresent}, {f, 2, pagePresent}},
		content: []byte{7, 0, 0, 8, 0, 9},
	}})
	p, err := Make(dir)
	if err != nil {
		t.Fatal(err)
	}
	if p.Dropped != int64(2*pageSize) {
		t.Errorf("dropped %d bytes, want the anonymous mapping's two pages of zeros", p.Dropped)
	}
	got, content := after(t, dir, p, 1)
	want := []region{{a, 1, pagePresent}, {a + 3*pageSize, 1, pagePresent}, {f, 2, pagePresent}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("pagemap %v, want %v (a file's zeros kept: the restore would map the file there)", got, want)
	}
	if !bytes.Equal(content, []byte{7, 8, 0, 9}) {
		t.Errorf("pages %v, want [7 8 0 9]", content)
	}
}

func TestAChildsMappingSharedWithItsParentKeepsItsZeros(t *testing.T) {
	short(t)
	const shared, own = 0x100000, 0x300000
	dir := dump(t, []proc{
		{pid: 1, vmas: []region{{shared, 2, anonPriv}}, entries: []region{{shared, 2, pagePresent}}, content: []byte{5, 0}},
		{pid: 2, ppid: 1, vmas: []region{{shared, 2, anonPriv}, {own, 1, anonPriv}},
			entries: []region{{shared, 2, pagePresent}, {own, 1, pagePresent}}, content: []byte{0, 6, 0}},
	})
	p, err := Make(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := after(t, dir, p, 2)
	// The child's page of zeros over the parent's 5 must stay: CRIU gives
	// the child the parent's pages first.
	want := []region{{shared, 2, pagePresent}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("child's pagemap %v, want %v", got, want)
	}
	got, _ = after(t, dir, p, 1)
	if fmt.Sprint(got) != fmt.Sprint([]region{{shared, 1, pagePresent}}) {
		t.Errorf("parent's pagemap %v: its own page of zeros should go", got)
	}
}

func TestPagesInAParentImageAreLeftAsTheyAre(t *testing.T) {
	short(t)
	const a = 0x100000
	dir := dump(t, []proc{{
		pid: 1, vmas: []region{{a, 4, anonPriv}},
		entries: []region{{a, 2, pageParent}, {a + 2*pageSize, 2, pagePresent}},
		content: []byte{0, 3}, // only the present entry's pages are in this file
	}})
	p, err := Make(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, content := after(t, dir, p, 1)
	want := []region{{a, 2, pageParent}, {a + 3*pageSize, 1, pagePresent}}
	if fmt.Sprint(got) != fmt.Sprint(want) || !bytes.Equal(content, []byte{3}) {
		t.Errorf("pagemap %v pages %v, want %v [3]", got, content, want)
	}
}

// CRIU marks private anonymous pages lazy (they could be restored on
// demand) and stores them all the same; flags it does not know leave the
// process as it is.
func TestLazyPagesOtherFlagsAndTruncatedFiles(t *testing.T) {
	short(t)
	const a = 0x100000
	lazy := dump(t, []proc{{pid: 1, vmas: []region{{a, 3, anonPriv}},
		entries: []region{{a, 3, pagePresent | pageLazy}}, content: []byte{1, 0, 2}}})
	p, err := Make(lazy)
	if err != nil {
		t.Fatal(err)
	}
	got, content := after(t, lazy, p, 1)
	want := []region{{a, 1, pagePresent | pageLazy}, {a + 2*pageSize, 1, pagePresent | pageLazy}}
	if fmt.Sprint(got) != fmt.Sprint(want) || !bytes.Equal(content, []byte{1, 2}) {
		t.Errorf("lazy: pagemap %v pages %v, want %v [1 2]", got, content, want)
	}
	other := dump(t, []proc{{pid: 1, vmas: []region{{a, 2, anonPriv}},
		entries: []region{{a, 2, pagePresent | 1<<3}}, content: []byte{0, 0}}})
	if p, err = Make(other); err != nil {
		t.Fatal(err)
	}
	if _, _, changed, _ := p.File(other, "pagemap-1.img"); changed || p.Dropped != 0 {
		t.Error("a dump with flags this tool does not know was changed")
	}
	short := dump(t, []proc{{pid: 1, vmas: []region{{a, 2, anonPriv}},
		entries: []region{{a, 2, pagePresent}}, content: []byte{0}}})
	if _, err := Make(short); err == nil {
		t.Error("a pages file shorter than its pagemap was planned")
	}
}
