// Package memory says what a checkpoint's memory pages hold: for each
// process, the bytes CRIU stored and the mappings that hold them, biggest
// first. It reads CRIU's own images with go-criu's crit, from the
// checkpoint layer's tar, without writing the pages anywhere.
package memory

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/checkpoint-restore/go-criu/v8/crit"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/mm"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pagemap"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/vma"
)

// Mapping is one memory mapping of a process and the bytes of it that the
// checkpoint stores.
type Mapping struct {
	Start    uint64 `json:"start"`
	End      uint64 `json:"end"`
	Prot     string `json:"prot"`
	Resource string `json:"resource"` // crit's words: a file, [stack], shmem[N]; empty: anonymous
	Bytes    int64  `json:"bytes"`
}

// Process is one process of the checkpoint.
type Process struct {
	PID      uint32    `json:"pid"`
	Comm     string    `json:"comm"`
	Bytes    int64     `json:"bytes"`
	Mappings []Mapping `json:"mappings"` // those that hold pages, biggest first
}

// Report is the whole checkpoint's.
type Report struct {
	PagesFiles int64     `json:"pages_files_bytes"` // pages-*.img in the layer, shared memory included
	Processes  []Process `json:"processes"`         // biggest first
}

// CRIU's image names: letters, digits and - _ . only, ending .img.
var imageName = regexp.MustCompile(`^[A-Za-z0-9_.-]+\.img$`)

// maxImage caps one CRIU image other than the pages: the layer is not
// trusted, and these are metadata (kilobytes to a few MiB).
const maxImage = 256 << 20

// Extract copies the CRIU images of a checkpoint layer's tar (the files
// under checkpoint/), all but the pages, into dir, by base name only; it
// returns the size of the pages files it skipped.
func Extract(r io.Reader, dir string) (int64, error) {
	var pages int64
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return pages, nil
		}
		if err != nil {
			return pages, fmt.Errorf("read the checkpoint layer: %w", err)
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		base := path.Base(name)
		if h.Typeflag != tar.TypeReg || path.Dir(name) != "checkpoint" || !imageName.MatchString(base) {
			continue
		}
		if strings.HasPrefix(base, "pages-") {
			pages += h.Size
			continue
		}
		if h.Size > maxImage {
			return pages, fmt.Errorf("checkpoint/%s is %d bytes, more than a CRIU image of its kind holds: not a checkpoint this tool reads", base, h.Size)
		}
		f, err := os.OpenFile(filepath.Join(dir, base), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return pages, err
		}
		_, err = io.Copy(f, io.LimitReader(tr, maxImage))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return pages, err
		}
	}
}

// Read reads the CRIU images in dir.
func Read(dir string) (*Report, error) {
	c := crit.New(nil, nil, dir, false, true)
	ps, err := c.ExplorePs()
	if err != nil {
		return nil, fmt.Errorf("read the process tree: %w", err)
	}
	mems, err := c.ExploreMems()
	if err != nil {
		return nil, fmt.Errorf("read the memory maps: %w", err)
	}
	comm := map[uint32]string{}
	walk(ps, comm)
	r := &Report{}
	for _, mmap := range mems {
		p := Process{PID: mmap.PId, Comm: comm[mmap.PId]}
		vmas, err := vmasOf(dir, mmap.PId)
		if err != nil {
			return nil, err
		}
		if len(vmas) != len(mmap.Mems) {
			return nil, fmt.Errorf("mm-%d.img: %d mappings, crit read %d", mmap.PId, len(vmas), len(mmap.Mems))
		}
		stored, err := storedPages(dir, mmap.PId)
		if err != nil {
			return nil, err
		}
		for i, v := range vmas {
			b := overlap(stored, v.GetStart(), v.GetEnd())
			if b == 0 {
				continue
			}
			p.Bytes += b
			p.Mappings = append(p.Mappings, Mapping{Start: v.GetStart(), End: v.GetEnd(),
				Prot: mmap.Mems[i].Protection, Resource: strings.TrimSpace(mmap.Mems[i].Resource), Bytes: b})
		}
		sort.SliceStable(p.Mappings, func(i, j int) bool { return p.Mappings[i].Bytes > p.Mappings[j].Bytes })
		r.Processes = append(r.Processes, p)
	}
	sort.SliceStable(r.Processes, func(i, j int) bool { return r.Processes[i].Bytes > r.Processes[j].Bytes })
	return r, nil
}

func walk(t *crit.PsTree, comm map[uint32]string) {
	if t == nil {
		return
	}
	comm[t.PID] = t.Comm
	for _, c := range t.Children {
		walk(c, comm)
	}
}

func vmasOf(dir string, pid uint32) ([]*vma.VmaEntry, error) {
	f, err := os.Open(filepath.Join(dir, fmt.Sprintf("mm-%d.img", pid)))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	img, err := crit.New(f, nil, "", false, true).Decode(&mm.MmEntry{})
	if err != nil {
		return nil, fmt.Errorf("mm-%d.img: %w", pid, err)
	}
	if len(img.Entries) == 0 {
		return nil, fmt.Errorf("mm-%d.img holds no entry", pid)
	}
	return img.Entries[0].Message.(*mm.MmEntry).GetVmas(), nil
}

// CRIU's pagemap flags (criu/include/pagemap.h).
const (
	pageParent  = 1 << 0
	pagePresent = 1 << 2
)

type span struct{ start, end uint64 }

// storedPages: the address ranges whose pages this checkpoint's pages files
// hold (not those left to a parent checkpoint).
func storedPages(dir string, pid uint32) ([]span, error) {
	f, err := os.Open(filepath.Join(dir, fmt.Sprintf("pagemap-%d.img", pid)))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	img, err := crit.New(f, nil, "", false, true).Decode(&pagemap.PagemapEntry{})
	if err != nil {
		return nil, fmt.Errorf("pagemap-%d.img: %w", pid, err)
	}
	var out []span
	for _, e := range img.Entries[1:] { // the first is the head
		pe, ok := e.Message.(*pagemap.PagemapEntry)
		if !ok {
			continue
		}
		n := pe.GetNrPages()
		if n == 0 {
			n = uint64(pe.GetCompatNrPages())
		}
		present := pe.GetFlags()&pagePresent != 0
		if pe.Flags == nil {
			present = !pe.GetInParent()
		}
		if !present || pe.GetFlags()&pageParent != 0 {
			continue
		}
		out = append(out, span{pe.GetVaddr(), pe.GetVaddr() + n*uint64(os.Getpagesize())})
	}
	return out, nil
}

func overlap(spans []span, start, end uint64) int64 {
	var n int64
	for _, s := range spans {
		a, b := max(s.start, start), min(s.end, end)
		if a < b {
			n += int64(b - a)
		}
	}
	return n
}
