// Package criuimg reads what oci-checkpoint's memory report and its
// packaging (pkg/sparse) both take from a CRIU dump: images decoded by
// go-criu's crit, a process's pagemap and mappings, a pagemap entry's length, and
// CRIU's bits for mappings and pages.
package criuimg

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"

	"github.com/checkpoint-restore/go-criu/v8/crit"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/mm"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/pagemap"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/vma"
	"google.golang.org/protobuf/proto"
)

// PageSize is the size of a page in CRIU's pages files: the host's.
var PageSize = uint64(os.Getpagesize())

// CRIU's vma status bits (criu/include/image.h).
const (
	VMARegular     = 1 << 0
	VMAStack       = 1 << 1
	VMAVsyscall    = 1 << 2
	VMAVdso        = 1 << 3
	VMAHeap        = 1 << 5
	VMAFilePrivate = 1 << 6
	VMAFileShared  = 1 << 7
	VMAAnonShared  = 1 << 8
	VMAAnonPrivate = 1 << 9
	VMASysvIPC     = 1 << 10
	VMASocket      = 1 << 11
	VMAVvar        = 1 << 12
	VMAMemfd       = 1 << 14
)

// CRIU's pagemap flags (criu/include/pagemap.h).
const (
	PageParent  = 1 << 0
	PageLazy    = 1 << 1 // may be restored on demand; in the pages file all the same
	PagePresent = 1 << 2
)

// Decode reads the image name in dir, whose entries are of entry's type.
func Decode(dir, name string, entry proto.Message) (*crit.CriuImage, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	img, err := crit.New(f, nil, "", false, true).Decode(entry)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return img, nil
}

// Pagemap decodes process pid's pagemap-PID.img: its head (entry 0) names
// the pages file, returned too; entries 1.. are its pagemap entries.
func Pagemap(dir string, pid uint32) (*crit.CriuImage, string, error) {
	img, err := Decode(dir, fmt.Sprintf("pagemap-%d.img", pid), &pagemap.PagemapEntry{})
	if err != nil {
		return nil, "", err
	}
	if len(img.Entries) == 0 {
		return nil, "", fmt.Errorf("pagemap-%d.img holds no head", pid)
	}
	head, ok := img.Entries[0].Message.(*pagemap.PagemapHead)
	if !ok {
		return nil, "", fmt.Errorf("pagemap-%d.img has no head", pid)
	}
	return img, fmt.Sprintf("pages-%d.img", head.GetPagesId()), nil
}

// VMAs returns the mappings of process pid, from its mm-PID.img.
func VMAs(dir string, pid uint32) ([]*vma.VmaEntry, error) {
	img, err := Decode(dir, fmt.Sprintf("mm-%d.img", pid), &mm.MmEntry{})
	if err != nil {
		return nil, err
	}
	if len(img.Entries) == 0 {
		return nil, fmt.Errorf("mm-%d.img holds no entry", pid)
	}
	m, ok := img.Entries[0].Message.(*mm.MmEntry)
	if !ok {
		return nil, fmt.Errorf("mm-%d.img holds no mm entry", pid)
	}
	return m.GetVmas(), nil
}

// NrPages is the pages a pagemap entry covers (images of CRIU before 3.x
// give it in compat_nr_pages).
func NrPages(pe *pagemap.PagemapEntry) uint64 {
	if n := pe.GetNrPages(); n != 0 {
		return n
	}
	return uint64(pe.GetCompatNrPages())
}

// AllZero says whether b holds only zeros.
func AllZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.NativeEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
