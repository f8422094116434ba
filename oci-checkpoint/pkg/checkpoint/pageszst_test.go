package checkpoint

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"

	"rekindle.local/contract/pages"
	"rekindle.local/oci-checkpoint/pkg/progress"
)

func TestCompressPagesIsSeekableZstd(t *testing.T) {
	src := pagesLike(3*pages.FrameSize+12345, 7)
	var count progress.Counter
	f, size, err := compressPages(bytes.NewReader(src), t.TempDir(), &count)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if count.Load() != int64(len(src)) {
		t.Errorf("counted %d bytes read, want %d", count.Load(), len(src))
	}
	z, err := io.ReadAll(f)
	if err != nil || int64(len(z)) != size {
		t.Fatalf("read %d bytes of a %d-byte file: %v", len(z), size, err)
	}
	if size > int64(len(src))/2 {
		t.Errorf("compressed to %d of %d bytes: not compressed", size, len(src))
	}

	// Any zstd decoder reads it as one stream, skipping the seek table.
	dec, err := zstd.NewReader(bytes.NewReader(z))
	if err != nil {
		t.Fatal(err)
	}
	whole, err := io.ReadAll(dec)
	dec.Close()
	if err != nil || !bytes.Equal(whole, src) {
		t.Fatalf("as one stream: %d bytes, equal %v, %v", len(whole), bytes.Equal(whole, src), err)
	}

	// A restore decodes each frame on its own, at its place.
	frames, _, err := pages.ReadSeekTable(bytes.NewReader(z), size)
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != 4 {
		t.Fatalf("%d frames, want 4 (three of %d bytes and the rest)", len(frames), pages.FrameSize)
	}
	one, _ := zstd.NewReader(nil)
	defer one.Close()
	for i, fr := range frames {
		if i < 3 && fr.Content != pages.FrameSize {
			t.Errorf("frame %d holds %d bytes, want %d", i, fr.Content, pages.FrameSize)
		}
		got, err := one.DecodeAll(z[fr.Off:fr.Off+fr.Size], nil)
		if err != nil || !bytes.Equal(got, src[fr.ContentOff:fr.ContentOff+fr.Content]) {
			t.Errorf("frame %d decoded alone: equal %v, %v", i, bytes.Equal(got, src[fr.ContentOff:fr.ContentOff+fr.Content]), err)
		}
	}
}

func TestCompressPagesEmpty(t *testing.T) {
	f, size, err := compressPages(bytes.NewReader(nil), t.TempDir(), new(progress.Counter))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, _ := io.ReadAll(f)
	frames, _, err := pages.ReadSeekTable(bytes.NewReader(z), size)
	if err != nil || len(frames) != 0 {
		t.Fatalf("empty image: %d frames, %v", len(frames), err)
	}
}

func TestCompressPagesSourceErrorLeavesNoFile(t *testing.T) {
	dir := t.TempDir()
	boom := errors.New("boom")
	_, _, err := compressPages(io.MultiReader(bytes.NewReader(pagesLike(pages.FrameSize+1, 1)), errReader{boom}), dir, new(progress.Counter))
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the source's", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left %d temporary files", len(left))
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// A tar of a dump with its pages images compressed names them .img.zst,
// keeps every other file as it is, and leaves no temporary file.
func TestWriteTarCompressesOnlyPagesImages(t *testing.T) {
	work := t.TempDir()
	dir := filepath.Join(work, "archive")
	criu := filepath.Join(dir, "checkpoint")
	if err := os.MkdirAll(criu, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"checkpoint/pages-1.img":   pagesLike(pages.FrameSize+4096, 2),
		"checkpoint/pages-12.img":  pagesLike(8192, 3),
		"checkpoint/pagemap-1.img": []byte("pagemap"),
		"checkpoint/pages-1.imgx":  []byte("not a pages image"),
		"config.dump":              []byte("{}"),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	var count progress.Counter
	if err := writeTar(&out, dir, nil, work, &count); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, b := range files {
		total += int64(len(b))
	}
	if count.Load() != total {
		t.Errorf("counted %d bytes, want %d", count.Load(), total)
	}
	got := map[string][]byte{}
	tr := tar.NewReader(&out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			got[h.Name], _ = io.ReadAll(tr)
		}
	}
	for name, want := range files {
		if isPagesImage(filepath.Base(name)) {
			z, ok := got[name+PagesSuffix]
			if !ok {
				t.Errorf("%s: not in the tar as %s%s", name, name, PagesSuffix)
				continue
			}
			dec, _ := zstd.NewReader(nil)
			b, err := dec.DecodeAll(z, nil)
			dec.Close()
			if err != nil || !bytes.Equal(b, want) {
				t.Errorf("%s%s does not decode to the image: %v", name, PagesSuffix, err)
			}
			continue
		}
		if !bytes.Equal(got[name], want) {
			t.Errorf("%s changed in the tar", name)
		}
	}
	if len(got) != len(files) {
		t.Errorf("tar holds %d files, want %d", len(got), len(files))
	}
	left, _ := os.ReadDir(work)
	if len(left) != 1 {
		t.Errorf("work dir holds %d entries after the tar, want only the archive: %v", len(left), left)
	}
}
