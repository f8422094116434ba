package checkpoint

import (
	"io"
	"os"
	"regexp"

	"rekindle.local/contract/pages"
	"rekindle.local/oci-checkpoint/pkg/progress"
)

// CompressionPages keeps the layer uncompressed, so that containerd reads
// it in place, and compresses CRIU's pages images inside it: the disk then
// reads a fifth of the bytes on a first restore, and no layer-wide digest
// of the uncompressed bytes bounds the unpack (a zstd layer's diff ID is
// hashed on one core, about 1 GB/s).
const CompressionPages = "pages"

// PagesSuffix is added to the name of a compressed pages image:
// checkpoint/pages-N.img.zst, in the zstd seekable format that the
// contract module's package pages describes, and containerd's runc shim
// reads by it.
const PagesSuffix = pages.Suffix

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
	var sizes [][2]uint32
	zw, err := newZstdFramesOf(f, pages.FrameSize, func(c, d int) {
		sizes = append(sizes, [2]uint32{uint32(c), uint32(d)})
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
	if _, err = f.Write(pages.SeekTable(sizes)); err != nil {
		return nil, 0, err
	}
	if size, err = f.Seek(0, io.SeekCurrent); err != nil {
		return nil, 0, err
	}
	_, err = f.Seek(0, io.SeekStart)
	return f, size, err
}
