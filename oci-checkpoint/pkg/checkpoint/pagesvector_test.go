package checkpoint

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"

	"rekindle.local/contract/pages"
	"rekindle.local/oci-checkpoint/pkg/progress"
)

var updatePagesVector = flag.Bool("update-pages-vector", false,
	"write the contract module's pages vector (contract/pages/testdata) with this writer")

// TestPagesVector: the writer writes the contract's vector file, byte for
// byte, from its content, and that file decodes to the content; the restore engine
// decodes the vector's file (restore/shim), so what one writes the other reads.
func TestPagesVector(t *testing.T) {
	v, err := pages.Vector()
	if err != nil {
		t.Fatal(err)
	}
	content := v.Content
	if *updatePagesVector {
		content = pages.VectorContent(2*pages.FrameSize + 12345)
	}
	f, size, err := compressPages(bytes.NewReader(content), t.TempDir(), &progress.Counter{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	frames, total, err := pages.ReadSeekTable(bytes.NewReader(z), size)
	if err != nil {
		t.Fatal(err)
	}
	if *updatePagesVector {
		dir := filepath.Join("..", "..", "..", "contract", "pages", "testdata")
		v.Comment = "pages-1.img.zst is VectorContent(content_size) as oci-checkpoint's compressPages writes it " +
			"(go test -run TestPagesVector ./pkg/checkpoint/ -update-pages-vector, in oci-checkpoint/); " +
			"frames are its table's: file offset, compressed size, content offset, content size"
		v.ContentSize, v.Frames = total, nil
		for _, fr := range frames {
			v.Frames = append(v.Frames, [4]int64{fr.Off, fr.Size, fr.ContentOff, fr.Content})
		}
		j, _ := json.MarshalIndent(v, "", " ")
		if err := os.WriteFile(filepath.Join(dir, "pages-1.img.zst"), z, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "vector.json"), append(j, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Skipf("wrote the vector into %s: %d bytes, %d frames", dir, len(z), len(frames))
	}
	want := v.VectorFrames()
	if total != v.ContentSize || len(frames) != len(want) {
		t.Fatalf("%d frames of %d bytes, want the vector's %d of %d", len(frames), total, len(want), v.ContentSize)
	}
	for i := range frames {
		if frames[i] != want[i] {
			t.Errorf("frame %d: %+v, the vector's %+v (a change of the writer's output: review it, then -update-pages-vector)", i, frames[i], want[i])
		}
	}
	if !bytes.Equal(z, v.File) {
		t.Errorf("the writer's %d bytes differ from the vector's %d (a change of the writer's output: review it, then -update-pages-vector)", len(z), len(v.File))
	}
	dec, _ := zstd.NewReader(bytes.NewReader(z))
	defer dec.Close()
	if got, err := io.ReadAll(dec); err != nil || !bytes.Equal(got, content) {
		t.Fatalf("decoded: %d bytes, equal %v, %v", len(got), bytes.Equal(got, content), err)
	}
}
