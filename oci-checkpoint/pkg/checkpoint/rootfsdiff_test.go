package checkpoint

import (
	"archive/tar"
	"bytes"
	"io"
	"reflect"
	"testing"
)

func layer(t *testing.T, entries ...tar.Header) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range entries {
		h := h
		body := []byte(nil)
		if h.Typeflag == tar.TypeReg {
			body = []byte("data of " + h.Name)
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Write(body)
	}
	tw.Close()
	return &b
}

func names(t *testing.T, r io.Reader) map[string]string {
	t.Helper()
	out := map[string]string{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out[h.Name] = string(b)
	}
}

func TestConvertDiff(t *testing.T) {
	in := layer(t,
		tar.Header{Typeflag: tar.TypeDir, Name: "etc/", Mode: 0o755},
		tar.Header{Typeflag: tar.TypeReg, Name: "etc/new.conf", Mode: 0o644},
		tar.Header{Typeflag: tar.TypeReg, Name: "etc/.wh.old.conf", Mode: 0o644},
		tar.Header{Typeflag: tar.TypeDir, Name: "var/cache/", Mode: 0o755},
		tar.Header{Typeflag: tar.TypeReg, Name: "var/cache/.wh..wh..opq", Mode: 0o644},
		tar.Header{Typeflag: tar.TypeReg, Name: "var/cache/fresh", Mode: 0o644},
	)
	var out bytes.Buffer
	deleted, err := ConvertDiff(in, &out, []ExtraFile{{Name: "/.rekindle/wake", Data: []byte(`{"x":1}`), Mode: 0o644}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/etc/old.conf"}; !reflect.DeepEqual(deleted, want) {
		t.Errorf("deleted %q, want %q", deleted, want)
	}
	got := names(t, &out)
	want := map[string]string{
		"etc/": "", "etc/new.conf": "data of etc/new.conf", "var/cache/": "", "var/cache/.wh..wh..opq": "data of var/cache/.wh..wh..opq",
		"var/cache/fresh": "data of var/cache/fresh", ".rekindle/": "", ".rekindle/wake": `{"x":1}`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("entries %v\nwant %v", got, want)
	}
}

// A diff that already has /.rekindle (the helper binary lives there) gets
// no second directory entry.
func TestConvertDiffExistingParent(t *testing.T) {
	in := layer(t,
		tar.Header{Typeflag: tar.TypeDir, Name: ".rekindle/", Mode: 0o755},
		tar.Header{Typeflag: tar.TypeReg, Name: ".rekindle/rekindle-wake", Mode: 0o755},
	)
	var out bytes.Buffer
	if _, err := ConvertDiff(in, &out, []ExtraFile{{Name: "/.rekindle/wake", Mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	n := 0
	tr := tar.NewReader(&out)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		if h.Name == ".rekindle/" {
			n++
		}
	}
	if n != 1 {
		t.Errorf(".rekindle/ appears %d times", n)
	}
}
