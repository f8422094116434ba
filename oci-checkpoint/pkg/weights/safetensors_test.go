package weights

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// safetensors builds a file: header (given as JSON text) and data bytes.
func safetensors(header string, data int) []byte {
	b := make([]byte, 8, 8+len(header)+data)
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	b = append(b, header...)
	return append(b, make([]byte, data)...)
}

func tensorHeader(t *testing.T, tensors map[string]tensorInfo) string {
	t.Helper()
	b, err := json.Marshal(tensors)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCheckSafetensors(t *testing.T) {
	two := tensorHeader(t, map[string]tensorInfo{
		"a": {Dtype: "F32", Shape: []int64{2, 3}, Offsets: []int64{0, 24}},
		"b": {Dtype: "BF16", Shape: []int64{4}, Offsets: []int64{24, 32}},
	})
	good := safetensors(two, 32)
	huge := make([]byte, 16)
	binary.LittleEndian.PutUint64(huge, MaxHeader+1)
	for _, tc := range []struct {
		name string
		data []byte
		want string // "" = valid
	}{
		{"good", good, ""},
		{"metadata only, no data", safetensors(`{"__metadata__":{"format":"pt"}}`, 0), ""},
		{"not safetensors", []byte("PK\x03\x04 a zip file, not weights"), "over the"},
		{"shorter than the length field", []byte("abc"), "shorter than the 8-byte"},
		{"truncated data", good[:len(good)-5], "run past the 27-byte data section"},
		{"truncated header", good[:20], "runs past the end"},
		{"header too large", huge, "over the 104857600-byte limit"},
		{"header not JSON", safetensors("{nope", 0), "not a JSON object"},
		{"offsets out of range", safetensors(tensorHeader(t, map[string]tensorInfo{
			"a": {Dtype: "U8", Shape: []int64{64}, Offsets: []int64{0, 64}}}), 32), "run past the 32-byte data section"},
		{"offsets reversed", safetensors(tensorHeader(t, map[string]tensorInfo{
			"a": {Dtype: "U8", Shape: []int64{0}, Offsets: []int64{8, 4}}}), 8), "bad data_offsets"},
		{"size disagrees with shape", safetensors(tensorHeader(t, map[string]tensorInfo{
			"a": {Dtype: "F16", Shape: []int64{8}, Offsets: []int64{0, 8}}}), 8), "needs 16 bytes"},
		{"trailing bytes", append(append([]byte{}, good...), 1, 2, 3), "truncated or trailing bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "m.safetensors")
			if err := os.WriteFile(p, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			size, err := CheckSafetensors(p)
			if tc.want == "" {
				if err != nil || size != int64(len(tc.data)) {
					t.Fatalf("got size %d, %v; want %d, nil", size, err, len(tc.data))
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("got %v; want an error naming %s and %q", err, p, tc.want)
			}
		})
	}
}
