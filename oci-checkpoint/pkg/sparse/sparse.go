// Package sparse leaves the pages that hold only zeros out of a CRIU dump's
// private anonymous memory as the dump is packaged. A process's memory is
// restored into fresh anonymous mappings, which read as zeros wherever
// the pagemap lists no page, so such pages need not be stored, read back
// or copied. A CUDA process checkpointed by the driver holds its GPU
// memory in host memory, much of it zeros (1,856 MiB of a vLLM EngineCore's
// 3,757 MiB, measured on an 8B model).
//
// The dump on disk is not changed: Make reads it and says, for each file
// it would change, what to write instead (the pagemap anew, the pages
// file without the dropped pages).
package sparse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"

	"github.com/checkpoint-restore/go-criu/v8/crit"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pagemap"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pstree"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/vma"
	"golang.org/x/sync/errgroup"

	"rekindle.local/oci-checkpoint/pkg/criuimg"
)

// minRun: the fewest pages of zeros in a row left out. Each run left out
// splits a pagemap entry, and CRIU's restore reads each piece on its own
// (a premapped mapping's fill reads per piece, the restorer's reads stop at
// 256 pieces): single pages would cost more reads than they save.
var minRun uint64 = 16

type run struct{ start, end uint64 } // page indices in a pages file, or addresses

// Plan is what Make found: the files whose content changes and how.
type Plan struct {
	pagemaps map[string][]byte // base name -> the pagemap image to write
	keep     map[string][]run  // pages file base name -> its page runs to write, in order
	Dropped  int64             // bytes of pages left out
}

// File returns what to write for the file base (a name in the dump
// folder): a reader of its new content and its size; ok is false for a
// file the plan does not change.
func (p *Plan) File(dir, base string) (r io.ReadCloser, size int64, ok bool, err error) {
	if p == nil {
		return nil, 0, false, nil
	}
	if b, found := p.pagemaps[base]; found {
		return io.NopCloser(bytes.NewReader(b)), int64(len(b)), true, nil
	}
	runs, found := p.keep[base]
	if !found {
		return nil, 0, false, nil
	}
	f, err := os.Open(filepath.Join(dir, base))
	if err != nil {
		return nil, 0, true, err
	}
	var readers []io.Reader
	for _, k := range runs {
		n := int64((k.end - k.start) * criuimg.PageSize)
		readers = append(readers, io.NewSectionReader(f, int64(k.start*criuimg.PageSize), n))
		size += n
	}
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(readers...), f}, size, true, nil
}

var pagemapName = regexp.MustCompile(`^pagemap-([0-9]+)\.img$`)

// Make plans the dump in dir. Only runs of pages stored in this dump (not
// in a parent's) of private anonymous memory are left out, and none of a
// mapping a child process shares with its parent: CRIU fills those from the
// parent's pages and compares, and clears those the child does not list,
// which would make leaving them out correct too, but that path is left as
// CRIU dumped it (a few MiB).
func Make(dir string) (*Plan, error) {
	parents, err := parentsOf(dir)
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var pids []uint32
	for _, e := range ents {
		m := pagemapName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		pid64, err := strconv.ParseUint(m[1], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		pids = append(pids, uint32(pid64))
	}
	// One process's pages at a time each: an engine's processes are read
	// side by side (they are in the page cache, just written by the dump).
	results := make([]*planned, len(pids))
	var g errgroup.Group
	for i, pid := range pids {
		g.Go(func() error {
			r, err := process(dir, pid, parents)
			if err != nil {
				return fmt.Errorf("pid %d: %w", pid, err)
			}
			results[i] = r
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	p := &Plan{pagemaps: map[string][]byte{}, keep: map[string][]run{}}
	for i, r := range results {
		if r == nil {
			continue // left as CRIU wrote it
		}
		if _, dup := p.keep[r.pages]; dup {
			return nil, fmt.Errorf("pid %d: %s is named by two pagemaps", pids[i], r.pages)
		}
		p.pagemaps[fmt.Sprintf("pagemap-%d.img", pids[i])] = r.pagemap
		p.keep[r.pages] = r.keep
		p.Dropped += r.dropped
	}
	return p, nil
}

// planned is one process's part of a plan.
type planned struct {
	pages   string // its pages file
	pagemap []byte // its pagemap anew
	keep    []run  // the pages file's runs to write
	dropped int64
}

// process plans one process; nil when it is left as CRIU wrote it.
func process(dir string, pid uint32, parents map[uint32]uint32) (*planned, error) {
	img, pages, err := criuimg.Pagemap(dir, pid)
	if err != nil {
		return nil, err
	}
	droppable, err := droppableRanges(dir, pid, parents)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(dir, pages))
	if err != nil {
		return nil, err
	}
	defer f.Close()

	for _, ce := range img.Entries[1:] {
		pe, ok := ce.Message.(*pagemap.PagemapEntry)
		if !ok || pe.Flags == nil || (pe.GetFlags()&^criuimg.PageLazy != criuimg.PagePresent && pe.GetFlags() != criuimg.PageParent) {
			return nil, nil // an old image, flags of another CRIU: left as CRIU wrote it
		}
	}
	out := []*crit.CriuEntry{img.Entries[0]}
	var keep []run
	var dropped int64
	var index uint64 // the entry's first page in the pages file
	const chunk = 256
	buf := make([]byte, chunk*criuimg.PageSize)
	for _, ce := range img.Entries[1:] {
		pe := ce.Message.(*pagemap.PagemapEntry)
		if pe.GetFlags() == criuimg.PageParent {
			out = append(out, ce) // in the parent's pages, not this file's
			continue
		}
		n := criuimg.NrPages(pe)
		va := pe.GetVaddr()
		// The entry's runs of zeros long enough to leave out.
		var zeros []run
		for _, d := range within(droppable, va, va+n*criuimg.PageSize) {
			for c := d.start; c < d.end; c += chunk {
				m := min(chunk, d.end-c)
				if _, err := f.ReadAt(buf[:m*criuimg.PageSize], int64((index+c)*criuimg.PageSize)); err != nil {
					return nil, fmt.Errorf("%s: pages %d-%d: %w", pages, index+c, index+c+m, err)
				}
				for k := uint64(0); k < m; k++ {
					if criuimg.AllZero(buf[k*criuimg.PageSize : (k+1)*criuimg.PageSize]) {
						zeros = appendRun(zeros, run{c + k, c + k + 1})
					}
				}
			}
		}
		// Split the entry around them.
		start := uint64(0) // first page of the part being kept, within the entry
		for _, z := range append(zeros, run{n, n}) {
			if z.end-z.start < minRun && z.start != n {
				continue
			}
			if z.start > start {
				out = append(out, entry(va+start*criuimg.PageSize, z.start-start, pe.GetFlags()))
				keep = appendRun(keep, run{index + start, index + z.start})
			}
			dropped += int64((z.end - z.start) * criuimg.PageSize)
			start = z.end
		}
		index += n
	}
	if fi, err := f.Stat(); err != nil {
		return nil, err
	} else if uint64(fi.Size()) != index*criuimg.PageSize {
		return nil, fmt.Errorf("%s holds %d bytes, its pagemap lists %d", pages, fi.Size(), index*criuimg.PageSize)
	}
	enc, err := encode(&crit.CriuImage{Magic: img.Magic, Entries: out})
	if err != nil {
		return nil, fmt.Errorf("pagemap-%d.img: %w", pid, err)
	}
	return &planned{pages: pages, pagemap: enc, keep: keep, dropped: dropped}, nil
}

func entry(va, n uint64, flags uint32) *crit.CriuEntry {
	var compat uint32
	return &crit.CriuEntry{Message: &pagemap.PagemapEntry{Vaddr: &va, NrPages: &n, CompatNrPages: &compat, Flags: &flags}}
}

func appendRun(runs []run, r run) []run {
	if k := len(runs); k > 0 && runs[k-1].end == r.start {
		runs[k-1].end = r.end
		return runs
	}
	return append(runs, r)
}

// droppableRanges: the address ranges of pid's private anonymous mappings
// (heap included) that no child can inherit from its parent.
func droppableRanges(dir string, pid uint32, parents map[uint32]uint32) ([]run, error) {
	own, err := vmasOf(dir, pid)
	if err != nil {
		return nil, err
	}
	var parentVMAs []*vma.VmaEntry
	if pp, ok := parents[pid]; ok {
		if parentVMAs, err = vmasOf(dir, pp); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	var out []run
	for _, v := range own {
		if !anonPrivate(v) || sharedWithParent(v, parentVMAs) {
			continue
		}
		out = append(out, run{v.GetStart(), v.GetEnd()})
	}
	return out, nil
}

func anonPrivate(v *vma.VmaEntry) bool {
	st := v.GetStatus()
	return st&(criuimg.VMARegular|criuimg.VMAAnonPrivate) == criuimg.VMARegular|criuimg.VMAAnonPrivate && st&^(criuimg.VMARegular|criuimg.VMAAnonPrivate|criuimg.VMAHeap) == 0
}

// sharedWithParent: a child's mapping CRIU may give it from its parent's,
// pages and all (same bounds, both private anonymous; CRIU also compares
// flags and the executable, so this takes in a few more).
func sharedWithParent(v *vma.VmaEntry, parent []*vma.VmaEntry) bool {
	for _, pv := range parent {
		if pv.GetStart() == v.GetStart() && pv.GetEnd() == v.GetEnd() && anonPrivate(pv) {
			return true
		}
	}
	return false
}

// within: the parts of ranges (sorted, apart) inside [start, end), as page
// indices from start.
func within(ranges []run, start, end uint64) []run {
	var out []run
	i := sort.Search(len(ranges), func(i int) bool { return ranges[i].end > start })
	for ; i < len(ranges) && ranges[i].start < end; i++ {
		a, b := max(ranges[i].start, start), min(ranges[i].end, end)
		if a < b {
			out = append(out, run{(a - start) / criuimg.PageSize, (b - start) / criuimg.PageSize})
		}
	}
	return out
}

// vmasOf: pid's mappings, which within() needs in order.
func vmasOf(dir string, pid uint32) ([]*vma.VmaEntry, error) {
	vmas, err := criuimg.VMAs(dir, pid)
	if err != nil {
		return nil, err
	}
	if !sort.SliceIsSorted(vmas, func(i, j int) bool { return vmas[i].GetStart() < vmas[j].GetStart() }) {
		return nil, fmt.Errorf("mm-%d.img: mappings out of order", pid)
	}
	return vmas, nil
}

// parentsOf: each process's parent, from the process tree.
func parentsOf(dir string) (map[uint32]uint32, error) {
	img, err := criuimg.Decode(dir, "pstree.img", &pstree.PstreeEntry{})
	if err != nil {
		return nil, fmt.Errorf("read the process tree: %w", err)
	}
	out := map[uint32]uint32{}
	for _, e := range img.Entries {
		if p, ok := e.Message.(*pstree.PstreeEntry); ok && p.GetPpid() != 0 {
			out[p.GetPid()] = p.GetPpid()
		}
	}
	return out, nil
}

// encode writes img as CRIU does, through crit, to a temporary file (crit
// writes to files only) and returns its bytes.
func encode(img *crit.CriuImage) ([]byte, error) {
	f, err := os.CreateTemp("", "rekindle-pagemap-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := crit.New(nil, f, "", false, false).Encode(img); err != nil {
		return nil, err
	}
	return os.ReadFile(f.Name())
}
