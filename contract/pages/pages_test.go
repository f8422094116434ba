package pages

import (
	"bytes"
	"strings"
	"testing"
)

// file is a seekable file whose frames hold the given compressed bytes
// (stand-ins: the table does not look inside them) and content sizes.
func file(frames [][]byte, content []uint32) []byte {
	var b []byte
	var sizes [][2]uint32
	for i, f := range frames {
		b = append(b, f...)
		sizes = append(sizes, [2]uint32{uint32(len(f)), content[i]})
	}
	return append(b, SeekTable(sizes)...)
}

func TestTheWritersTableReads(t *testing.T) {
	b := file([][]byte{bytes.Repeat([]byte("a"), 100), bytes.Repeat([]byte("b"), 30)}, []uint32{FrameSize, 1000})
	frames, content, err := ReadSeekTable(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	want := []Frame{{0, 100, 0, FrameSize}, {100, 30, FrameSize, 1000}}
	if len(frames) != 2 || frames[0] != want[0] || frames[1] != want[1] || content != FrameSize+1000 {
		t.Errorf("frames %v, content %d; want %v, %d", frames, content, want, FrameSize+1000)
	}
}

func TestAnEmptyImage(t *testing.T) {
	b := file(nil, nil)
	frames, content, err := ReadSeekTable(bytes.NewReader(b), int64(len(b)))
	if err != nil || len(frames) != 0 || content != 0 {
		t.Errorf("%v %d %v", frames, content, err)
	}
}

func TestBadTablesAreRefused(t *testing.T) {
	good := file([][]byte{[]byte("xxxx")}, []uint32{10})
	for _, tc := range []struct {
		name, want string
		b          []byte
	}{
		{"too short", "too short", good[:10]},
		{"no footer", "not in the zstd seekable format", append(append([]byte{}, good...), 0)},
		{"a frame too large", "more than", file([][]byte{[]byte("x")}, []uint32{FrameMax + 1})},
		{"frames short of the table", "seek table is at", append([]byte("y"), good...)},
		{"too many frames", "does not fit", func() []byte {
			b := append([]byte{}, good...)
			b[len(b)-9] = 200
			return b
		}()},
	} {
		_, _, err := ReadSeekTable(bytes.NewReader(tc.b), int64(len(tc.b)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestTheVectorsTableReads: the table of the vector's file, as
// oci-checkpoint wrote it, is the vector's frames.
func TestTheVectorsTableReads(t *testing.T) {
	v, err := Vector()
	if err != nil {
		t.Fatal(err)
	}
	frames, total, err := ReadSeekTable(bytes.NewReader(v.File), int64(len(v.File)))
	if err != nil {
		t.Fatal(err)
	}
	want := v.VectorFrames()
	if total != v.ContentSize || len(frames) != len(want) || len(want) < 2 {
		t.Fatalf("%d frames of %d bytes, want the vector's %d of %d", len(frames), total, len(want), v.ContentSize)
	}
	for i := range frames {
		if frames[i] != want[i] {
			t.Errorf("frame %d: %+v, want %+v", i, frames[i], want[i])
		}
	}
}
