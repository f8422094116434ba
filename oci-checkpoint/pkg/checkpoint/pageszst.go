package checkpoint

import (
	"encoding/binary"
	"io"
	"os"
	"regexp"

	"rekindle.local/oci-checkpoint/pkg/progress"
)

// CompressionPages keeps the layer uncompressed, so that containerd reads
// it in place, and compresses CRIU's pages images inside it: the disk then
// reads a fifth of the bytes on a first restore, and no layer-wide digest
// of the uncompressed bytes bounds the unpack (a zstd layer's diff ID is
// hashed on one core, about 1 GB/s).
const CompressionPages = "pages"

// PagesSuffix is added to the name of a compressed pages image:
// checkpoint/pages-N.img.zst. A CRIU that cannot read it finds no
// pages-N.img and fails, rather than reading compressed bytes as pages.
const PagesSuffix = ".zst"

// pagesFrameSize is how much of a pages image each frame holds: small
// enough that a restore decodes an image on every core, large enough to
// compress as well as one stream (within 2% on vLLM's heaps).
const pagesFrameSize = 4 << 20

// The zstd seekable format (zstd's contrib/seekable_format): after the
// frames, a skippable frame holding each frame's compressed and content
// size, then a footer. Any zstd decoder reads the file as one stream and
// skips the table.
const (
	seekTableMagic = 0x184D2A5E
	seekableMagic  = 0x8F92EAB1
	seekFooterSize = 9
)

var pagesImage = regexp.MustCompile(`^pages-[0-9]+\.img$`)

// isPagesImage says whether name, a base name under checkpoint/, is a
// pages image (memory contents; the other images are metadata).
func isPagesImage(name string) bool { return pagesImage.MatchString(name) }

// compressPages compresses r, a pages image, in the seekable format into a
// new temporary file in dir, counting what it reads in count. It returns
// the file, at offset 0, and its size; the caller closes and removes it.
func compressPages(r io.Reader, dir string, count *progress.Counter) (_ *os.File, size int64, err error) {
	f, err := os.CreateTemp(dir, "pages-*.zst")
	if err != nil {
		return nil, 0, err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	var table []byte
	zw, err := newZstdFramesOf(f, pagesFrameSize, func(c, d int) {
		table = binary.LittleEndian.AppendUint32(table, uint32(c))
		table = binary.LittleEndian.AppendUint32(table, uint32(d))
	})
	if err != nil {
		return nil, 0, err
	}
	_, err = io.Copy(count.Writer(zw), r)
	if err != nil {
		zw.Abort(err)
	}
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, 0, err
	}
	if _, err = f.Write(seekTable(table)); err != nil {
		return nil, 0, err
	}
	if size, err = f.Seek(0, io.SeekCurrent); err != nil {
		return nil, 0, err
	}
	_, err = f.Seek(0, io.SeekStart)
	return f, size, err
}

// seekTable frames entries (8 bytes a frame: compressed, content size) as
// the seekable format's skippable frame, without checksums (each frame
// carries its own).
func seekTable(entries []byte) []byte {
	n := len(entries) / 8
	b := binary.LittleEndian.AppendUint32(nil, seekTableMagic)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(entries)+seekFooterSize))
	b = append(b, entries...)
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	b = append(b, 0) // descriptor: no checksums
	return binary.LittleEndian.AppendUint32(b, seekableMagic)
}
