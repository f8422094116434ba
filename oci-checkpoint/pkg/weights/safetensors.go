package weights

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
)

// MaxHeader bounds a safetensors header, as the reference implementation
// does (100 MB): a larger length field means a damaged or foreign file.
const MaxHeader = 100 << 20

// dtypeSize is the element size of the dtypes whose tensor sizes are
// checked; other dtypes (packed or new ones) are checked for bounds only.
var dtypeSize = map[string]int64{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
	"I16": 2, "U16": 2, "F16": 2, "BF16": 2,
	"I32": 4, "U32": 4, "F32": 4,
	"I64": 8, "U64": 8, "F64": 8,
}

type tensorInfo struct {
	Dtype   string  `json:"dtype"`
	Shape   []int64 `json:"shape"`
	Offsets []int64 `json:"data_offsets"`
}

// CheckSafetensors reads only the header of the safetensors file at path
// and checks that it describes the file exactly: the header length fits,
// the header is JSON, every tensor lies inside the data section and the
// data section ends where the file does. It returns the file's size.
func CheckSafetensors(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if !st.Mode().IsRegular() {
		return 0, fmt.Errorf("%s is not a regular file", path)
	}
	if err := checkHeader(f, st.Size()); err != nil {
		return 0, fmt.Errorf("%s is not a valid safetensors file: %w", path, err)
	}
	return st.Size(), nil
}

func checkHeader(r io.ReaderAt, size int64) error {
	var lenb [8]byte
	if size < 8 {
		return fmt.Errorf("%d bytes, shorter than the 8-byte header length", size)
	}
	if _, err := r.ReadAt(lenb[:], 0); err != nil {
		return fmt.Errorf("read header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lenb[:])
	if n > MaxHeader {
		return fmt.Errorf("header length %d is over the %d-byte limit (not safetensors?)", n, MaxHeader)
	}
	if int64(n) > size-8 {
		return fmt.Errorf("header length %d runs past the end of the %d-byte file (truncated?)", n, size)
	}
	hdr := make([]byte, n)
	if _, err := r.ReadAt(hdr, 8); err != nil {
		return fmt.Errorf("read header: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &raw); err != nil {
		return fmt.Errorf("header is not a JSON object: %v", err)
	}
	dataLen := size - 8 - int64(n)
	var end int64
	names := make([]string, 0, len(raw))
	for k := range raw {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		if name == "__metadata__" {
			continue
		}
		var t tensorInfo
		if err := json.Unmarshal(raw[name], &t); err != nil {
			return fmt.Errorf("tensor %q: %v", name, err)
		}
		if len(t.Offsets) != 2 || t.Offsets[0] < 0 || t.Offsets[1] < t.Offsets[0] {
			return fmt.Errorf("tensor %q: bad data_offsets %v", name, t.Offsets)
		}
		if t.Offsets[1] > dataLen {
			return fmt.Errorf("tensor %q: data_offsets %v run past the %d-byte data section (truncated?)", name, t.Offsets, dataLen)
		}
		if es, ok := dtypeSize[t.Dtype]; ok {
			want := es
			for _, d := range t.Shape {
				if d < 0 {
					return fmt.Errorf("tensor %q: negative dimension in shape %v", name, t.Shape)
				}
				want *= d
			}
			if got := t.Offsets[1] - t.Offsets[0]; got != want {
				return fmt.Errorf("tensor %q: %s%v needs %d bytes, data_offsets give %d", name, t.Dtype, t.Shape, want, got)
			}
		}
		end = max(end, t.Offsets[1])
	}
	if end != dataLen {
		return fmt.Errorf("tensors end at data offset %d but the file's data section is %d bytes (truncated or trailing bytes)", end, dataLen)
	}
	return nil
}
