package pages

import (
	_ "embed"
	"encoding/json"
	"fmt"
)

var (
	//go:embed testdata/pages-1.img.zst
	vectorFile []byte
	//go:embed testdata/vector.json
	vectorJSON []byte
)

// TestVector is a pages image compressed as oci-checkpoint writes it, the
// frames its table holds and the content they decode to. oci-checkpoint's
// writer and the restore engine's decoder (restore/shim) both run it.
type TestVector struct {
	Comment     string     `json:"comment"`
	File        []byte     `json:"-"` // testdata/pages-1.img.zst
	Content     []byte     `json:"-"` // VectorContent(ContentSize)
	ContentSize int64      `json:"content_size"`
	Frames      [][4]int64 `json:"frames"` // Off, Size, ContentOff, Content
}

// VectorContent is the vector's content of n bytes: byte i is
// (7i + i/4096) mod 251, a pattern that compresses and differs from page
// to page.
func VectorContent(n int64) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte((7*i + i>>12) % 251)
	}
	return b
}

// Vector returns the test vector.
func Vector() (TestVector, error) {
	var v TestVector
	if err := json.Unmarshal(vectorJSON, &v); err != nil {
		return v, fmt.Errorf("testdata/vector.json: %w", err)
	}
	v.File, v.Content = vectorFile, VectorContent(v.ContentSize)
	return v, nil
}

// VectorFrames is v's frames as ReadSeekTable gives them.
func (v TestVector) VectorFrames() []Frame {
	out := make([]Frame, len(v.Frames))
	for i, f := range v.Frames {
		out[i] = Frame{Off: f[0], Size: f[1], ContentOff: f[2], Content: f[3]}
	}
	return out
}
