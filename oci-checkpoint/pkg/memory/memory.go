// Package memory says what a checkpoint's memory pages hold: for each
// process, the bytes CRIU stored and the mappings that hold them, biggest
// first, and how many of those bytes are pages of zeros. It reads CRIU's
// own images with go-criu's crit, from the checkpoint layer's tar, without
// writing the pages anywhere.
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
	"github.com/checkpoint-restore/go-criu/v8/crit/images/fdinfo"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pagemap"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/regfile"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/vma"
	"github.com/klauspost/compress/zstd"

	"rekindle.local/oci-checkpoint/pkg/criuimg"
	"rekindle.local/oci-checkpoint/pkg/progress"
)

// Mapping is one memory mapping of a process and the bytes of it that the
// checkpoint stores.
type Mapping struct {
	Start    uint64 `json:"start"`
	End      uint64 `json:"end"`
	Prot     string `json:"prot"`
	Resource string `json:"resource"` // a file (+ offset), or [stack], [heap], [shared memory N]...; empty: anonymous private
	Bytes    int64  `json:"bytes"`
	Zero     int64  `json:"zero_bytes"` // of Bytes, those in pages that hold only zeros
}

// Process is one process of the checkpoint.
type Process struct {
	PID      uint32    `json:"pid"`
	Comm     string    `json:"comm"`
	Bytes    int64     `json:"bytes"`
	Zero     int64     `json:"zero_bytes"`
	Mappings []Mapping `json:"mappings"` // those that hold pages, biggest first
}

// Report is the whole checkpoint's.
type Report struct {
	// SchemaVersion and Image are set by the caller: the JSON's version
	// (checkpoint.SchemaVersion) and the image read.
	SchemaVersion int              `json:"schema_version"`
	Image         string           `json:"image"`
	PagesFiles    int64            `json:"pages_files_bytes"` // pages-*.img in the layer, shared memory included
	ZeroPages     int64            `json:"pages_files_zero_bytes"`
	Others        map[string]int64 `json:"other_images"` // the layer's other CRIU images of 1 MiB or more (e.g. a tmpfs's contents)
	Processes     []Process        `json:"processes"`    // biggest first
}

// Layer is what Extract learns of the images it does not copy.
type Layer struct {
	PagesFiles int64             // the pages files' total
	ZeroPages  int64             // of it, pages of zeros
	Others     map[string]int64  // other images of 1 MiB or more
	zero       map[string][]span // per pages file: runs of zero pages, as page indices
}

// What Read needs of CRIU's images; the rest of the layer is only sized.
var wanted = regexp.MustCompile(`^(pstree|files|reg-files|(core|mm|pagemap)-[0-9]+)\.img$`)

// maxImage caps one image Extract writes: the layer is not trusted, and
// these are metadata (kilobytes to a few MiB).
const maxImage = 256 << 20

// Extract copies the CRIU images Read needs from a checkpoint layer's tar
// (regular files directly under checkpoint/) into dir, by base name only,
// reads the pages files through, noting their pages of zeros, and sizes
// the other images.
func Extract(r io.Reader, dir string) (*Layer, error) {
	l := &Layer{Others: map[string]int64{}, zero: map[string][]span{}}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return l, nil
		}
		if err != nil {
			return l, fmt.Errorf("read the checkpoint layer: %w", err)
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		base := path.Base(name)
		if h.Typeflag != tar.TypeReg || path.Dir(name) != "checkpoint" {
			continue
		}
		switch {
		case strings.HasPrefix(base, "pages-") && strings.HasSuffix(base, ".img"):
			zero, n, err := zeroRuns(tr)
			if err != nil {
				return l, fmt.Errorf("read checkpoint/%s: %w", base, err)
			}
			l.PagesFiles += h.Size
			l.ZeroPages += n
			l.zero[base] = zero
			continue
		case strings.HasPrefix(base, "pages-") && strings.HasSuffix(base, ".img.zst"):
			// Compressed by --compression pages: sized and read as the
			// image it holds.
			dec, err := zstd.NewReader(tr, zstd.WithDecoderConcurrency(1))
			if err != nil {
				return l, err
			}
			var size progress.Counter
			zero, n, err := zeroRuns(io.TeeReader(dec, size.Writer(io.Discard)))
			dec.Close()
			if err != nil {
				return l, fmt.Errorf("read checkpoint/%s: %w", base, err)
			}
			l.PagesFiles += size.Load()
			l.ZeroPages += n
			l.zero[strings.TrimSuffix(base, ".zst")] = zero
			continue
		case !wanted.MatchString(base):
			if strings.HasSuffix(base, ".img") && h.Size >= 1<<20 {
				l.Others[base] = h.Size
			}
			continue
		case h.Size > maxImage:
			return l, fmt.Errorf("checkpoint/%s is %d bytes, more than a CRIU image of its kind holds: not a checkpoint this tool reads", base, h.Size)
		}
		f, err := os.OpenFile(filepath.Join(dir, base), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return l, err
		}
		_, err = io.Copy(f, io.LimitReader(tr, maxImage))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return l, err
		}
	}
}

// zeroRuns reads a pages file through and returns its runs of pages that
// hold only zeros (page indices) and their bytes.
func zeroRuns(r io.Reader) ([]span, int64, error) {
	var runs []span
	var n int64
	buf := make([]byte, 256*criuimg.PageSize)
	var page uint64
	for {
		got, err := io.ReadFull(r, buf)
		for off := 0; off+int(criuimg.PageSize) <= got; off += int(criuimg.PageSize) {
			if criuimg.AllZero(buf[off : off+int(criuimg.PageSize)]) {
				if k := len(runs); k > 0 && runs[k-1].end == page {
					runs[k-1].end++
				} else {
					runs = append(runs, span{page, page + 1})
				}
				n += int64(criuimg.PageSize)
			}
			page++
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return runs, n, nil
		}
		if err != nil {
			return nil, 0, err
		}
	}
}

// Read reads the CRIU images in dir; l, from Extract, adds the pages of
// zeros (nil: none counted). Images that crit cannot read, or that
// contradict each other, give an error, never a crash.
func Read(dir string, l *Layer) (r *Report, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("the checkpoint's CRIU images cannot be read: %v", p)
		}
	}()
	ps, err := crit.New(nil, nil, dir, false, true).ExplorePs()
	if err != nil {
		return nil, fmt.Errorf("read the process tree: %w", err)
	}
	comm := map[uint32]string{}
	walk(ps, comm)
	files, err := fileNames(dir)
	if err != nil {
		return nil, err
	}
	r = &Report{}
	if l != nil {
		r.PagesFiles, r.ZeroPages, r.Others = l.PagesFiles, l.ZeroPages, l.Others
	}
	for _, pid := range sortedPIDs(comm) {
		vmas, err := criuimg.VMAs(dir, pid)
		if errors.Is(err, os.ErrNotExist) {
			continue // a zombie or a thread: no memory of its own
		}
		if err != nil {
			return nil, err
		}
		stored, zero, err := storedPages(dir, pid, l)
		if err != nil {
			return nil, err
		}
		p := Process{PID: pid, Comm: comm[pid]}
		for _, v := range vmas {
			b := overlap(stored, v.GetStart(), v.GetEnd())
			if b == 0 {
				continue
			}
			z := overlap(zero, v.GetStart(), v.GetEnd())
			p.Bytes += b
			p.Zero += z
			p.Mappings = append(p.Mappings, Mapping{Start: v.GetStart(), End: v.GetEnd(),
				Prot: prot(v.GetProt()), Resource: label(v, files), Bytes: b, Zero: z})
		}
		sort.SliceStable(p.Mappings, func(i, j int) bool { return p.Mappings[i].Bytes > p.Mappings[j].Bytes })
		r.Processes = append(r.Processes, p)
	}
	sort.SliceStable(r.Processes, func(i, j int) bool { return r.Processes[i].Bytes > r.Processes[j].Bytes })
	return r, nil
}

func sortedPIDs(m map[uint32]string) []uint32 {
	out := make([]uint32, 0, len(m))
	for pid := range m {
		out = append(out, pid)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// label names what a mapping maps: a file (and its offset), a kind of
// memory in brackets, or "" for anonymous private memory.
func label(v *vma.VmaEntry, files map[uint32]string) string {
	st := v.GetStatus()
	switch {
	case st&(criuimg.VMAFilePrivate|criuimg.VMAFileShared) != 0:
		name := files[uint32(v.GetShmid())]
		if name == "" {
			name = fmt.Sprintf("file %d", v.GetShmid())
		}
		if v.GetPgoff() != 0 {
			name += fmt.Sprintf(" + 0x%x", v.GetPgoff())
		}
		if st&criuimg.VMAFileShared != 0 {
			name += " (shared)"
		}
		return name
	case st&criuimg.VMAMemfd != 0:
		return fmt.Sprintf("[memfd %d]", v.GetShmid())
	case st&criuimg.VMAAnonShared != 0:
		return fmt.Sprintf("[shared memory %d]", v.GetShmid())
	case st&criuimg.VMASysvIPC != 0:
		return fmt.Sprintf("[sysv ipc %d]", v.GetShmid())
	case st&criuimg.VMASocket != 0:
		return "[packet socket]"
	case st&criuimg.VMAStack != 0:
		return "[stack]"
	case st&criuimg.VMAHeap != 0:
		return "[heap]"
	case st&criuimg.VMAVdso != 0:
		return "[vdso]"
	case st&criuimg.VMAVvar != 0:
		return "[vvar]"
	case st&criuimg.VMAVsyscall != 0:
		return "[vsyscall]"
	}
	return ""
}

func prot(p uint32) string {
	out := []byte("---")
	for i, c := range []byte("rwx") {
		if p&(1<<i) != 0 {
			out[i] = c
		}
	}
	return string(out)
}

// fileNames: regular files' names by CRIU file id, from files.img (and the
// older reg-files.img).
func fileNames(dir string) (map[uint32]string, error) {
	out := map[uint32]string{}
	img, err := criuimg.Decode(dir, "files.img", &fdinfo.FileEntry{})
	if err == nil {
		for _, e := range img.Entries {
			if f, ok := e.Message.(*fdinfo.FileEntry); ok && f.GetReg() != nil {
				out[f.GetId()] = f.GetReg().GetName()
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	img, err = criuimg.Decode(dir, "reg-files.img", &regfile.RegFileEntry{})
	if err == nil {
		for _, e := range img.Entries {
			if f, ok := e.Message.(*regfile.RegFileEntry); ok {
				out[f.GetId()] = f.GetName()
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return out, nil
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

type span struct{ start, end uint64 }

// storedPages: the address ranges whose pages this checkpoint's pages files
// hold (not those left to a parent checkpoint), and of them those that are
// pages of zeros by l's count. CRIU writes a process's stored pages to its
// pages file in the pagemap's order.
func storedPages(dir string, pid uint32, l *Layer) (stored, zero []span, err error) {
	img, pages, err := criuimg.Pagemap(dir, pid)
	if err != nil {
		return nil, nil, err
	}
	var runs []span
	if l != nil {
		runs = l.zero[pages]
	}
	var index uint64 // of the entry's first page in the pages file
	for _, e := range img.Entries[1:] {
		pe, ok := e.Message.(*pagemap.PagemapEntry)
		if !ok {
			continue
		}
		n := criuimg.NrPages(pe)
		present := pe.GetFlags()&criuimg.PagePresent != 0
		if pe.Flags == nil {
			present = !pe.GetInParent()
		}
		if !present || pe.GetFlags()&criuimg.PageParent != 0 {
			continue
		}
		va := pe.GetVaddr()
		stored = append(stored, span{va, va + n*criuimg.PageSize})
		for ; len(runs) > 0 && runs[0].start < index+n; runs = runs[1:] {
			a, b := max(runs[0].start, index), min(runs[0].end, index+n)
			if a < b {
				zero = append(zero, span{va + (a-index)*criuimg.PageSize, va + (b-index)*criuimg.PageSize})
			}
			if runs[0].end > index+n {
				break // goes on into the next entry's pages
			}
		}
		index += n
	}
	return stored, zero, nil
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
