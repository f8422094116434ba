// Package pages is how a checkpoint image carries CRIU's pages images
// compressed (oci-checkpoint create --compression pages): each as
// pages-N.img.zst in the zstd seekable format (zstd's
// contrib/seekable_format: independent frames, then a skippable frame
// holding each frame's compressed and content size, then a footer). Any
// zstd decoder reads such a file as one stream and skips the table; a
// restorer reads the table to decode every frame on its own, on every
// core. oci-checkpoint writes the table and containerd's runc shim reads
// it (containerd-patches/runc-shim-decode-compressed-CRIU-pages-images-into-m).
package pages

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

const (
	// Suffix is added to the name of a compressed pages image. A CRIU that
	// cannot read it finds no pages-N.img and fails, rather than reading
	// compressed bytes as pages.
	Suffix = ".zst"
	// FrameSize is how much of a pages image each frame holds as
	// oci-checkpoint writes it: small enough that a restore decodes an
	// image on every core, large enough to compress as well as one stream
	// (within 2% on vLLM's heaps).
	FrameSize = 4 << 20
	// FrameMax bounds a frame's content as a reader takes it: a table is
	// not trusted.
	FrameMax = 64 << 20

	seekTableMagic = 0x184D2A5E
	seekableMagic  = 0x8F92EAB1
	footerSize     = 9
)

// Frame is one frame of a seekable file: where its compressed bytes are
// in the file, and where its content goes in the image.
type Frame struct {
	Off, Size           int64
	ContentOff, Content int64
}

// SeekTable is the skippable frame that ends a seekable file whose frames
// have the compressed and content sizes of sizes (pairs, in order),
// without checksums: each frame carries its own.
func SeekTable(sizes [][2]uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, seekTableMagic)
	b = binary.LittleEndian.AppendUint32(b, uint32(8*len(sizes)+footerSize))
	for _, s := range sizes {
		b = binary.LittleEndian.AppendUint32(b, s[0])
		b = binary.LittleEndian.AppendUint32(b, s[1])
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(sizes)))
	b = append(b, 0) // descriptor: no checksums
	return binary.LittleEndian.AppendUint32(b, seekableMagic)
}

// ReadSeekTable reads the frames of the seekable file r of size bytes, and
// the size of the content they hold. A table with checksums is read too.
// It refuses a file without a table, a frame of more than FrameMax bytes
// of content and frames that do not end where the table begins.
func ReadSeekTable(r io.ReaderAt, size int64) ([]Frame, int64, error) {
	var foot [footerSize]byte
	if size < 8+footerSize {
		return nil, 0, errors.New("too short for a seek table")
	}
	if _, err := r.ReadAt(foot[:], size-footerSize); err != nil {
		return nil, 0, err
	}
	if binary.LittleEndian.Uint32(foot[5:]) != seekableMagic {
		return nil, 0, errors.New("no seek table footer: not in the zstd seekable format")
	}
	entry := int64(8)
	if foot[4]&0x80 != 0 {
		entry = 12 // with checksums, which the frames' own make redundant
	}
	n := int64(binary.LittleEndian.Uint32(foot[:4]))
	tableSize := 8 + entry*n + footerSize
	if tableSize > size {
		return nil, 0, fmt.Errorf("a seek table of %d frames does not fit in %d bytes", n, size)
	}
	table := make([]byte, tableSize-footerSize)
	if _, err := r.ReadAt(table, size-tableSize); err != nil {
		return nil, 0, err
	}
	if binary.LittleEndian.Uint32(table) != seekTableMagic || int64(binary.LittleEndian.Uint32(table[4:])) != tableSize-8 {
		return nil, 0, errors.New("bad seek table header")
	}
	frames := make([]Frame, n)
	var off, content int64
	for i := range frames {
		e := table[8+entry*int64(i):]
		f := Frame{off, int64(binary.LittleEndian.Uint32(e)), content, int64(binary.LittleEndian.Uint32(e[4:]))}
		if f.Content > FrameMax {
			return nil, 0, fmt.Errorf("frame %d holds %d bytes, more than %d", i, f.Content, FrameMax)
		}
		frames[i] = f
		off += f.Size
		content += f.Content
	}
	if off != size-tableSize {
		return nil, 0, fmt.Errorf("frames of %d bytes, but the seek table is at %d", off, size-tableSize)
	}
	return frames, content, nil
}
