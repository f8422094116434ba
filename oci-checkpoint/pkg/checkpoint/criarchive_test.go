package checkpoint

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// arEntry is one entry of a crafted archive: a regular file with body,
// unless typ says otherwise.
type arEntry struct {
	name, body string
	typ        byte
	link       string
}

const (
	goodConfig = `{"id":"c0ffee","name":"engine","rootfsImageName":"rekindle.local/cpu-engine:latest",` +
		`"rootfsImageRef":"sha256:6f1e8c9b2d3a4f5e6d7c8b9a0f1e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7d6","runtime":"io.containerd.runc.v2",` +
		`"createdTime":"2026-12-02T01:00:00Z","checkpointedAt":"2026-12-02T01:10:00Z"}`
	goodSpec   = `{"ociVersion":"1.2.0","process":{"terminal":false,"args":["/engine"]},"linux":{"devices":[]}}`
	goodStatus = `{"metadata":{"name":"engine"},"image":{"image":"rekindle.local/cpu-engine:latest"},` +
		`"image_ref":"sha256:6f1e8c9b2d3a4f5e6d7c8b9a0f1e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7d6",` +
		`"labels":{"io.kubernetes.pod.name":"src-1","io.kubernetes.pod.namespace":"default"}}`
)

// criEntries is an archive as containerd's CheckpointContainer writes it,
// with what replace gives in place of (or beside) its entries.
func criEntries(replace map[string]*arEntry) []arEntry {
	es := []arEntry{
		{name: "checkpoint/", typ: tar.TypeDir},
		{name: "checkpoint/inventory.img", body: "inv"},
		{name: "checkpoint/pstree.img", body: "ps"},
		{name: "checkpoint/pages-1.img", body: strings.Repeat("p", 4096)},
		{name: "config.dump", body: goodConfig},
		{name: "spec.dump", body: goodSpec},
		{name: "status.dump", body: goodStatus},
		{name: "status", body: `{}`},
		{name: "rootfs-diff.tar", body: ""},
		{name: "dump.log", body: "log"},
		{name: "stats-dump", body: "s"},
		{name: "container.log", body: "out"},
	}
	var out []arEntry
	for _, e := range es {
		r, ok := replace[e.name]
		switch {
		case !ok:
			out = append(out, e)
		case r != nil:
			out = append(out, *r)
		}
		delete(replace, e.name)
	}
	for _, r := range replace {
		if r != nil {
			out = append(out, *r)
		}
	}
	return out
}

func archiveOf(t *testing.T, es []arEntry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: 0o600, Linkname: e.link}
		if e.typ == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if h.Typeflag == tar.TypeDir {
			h.Mode = 0o700
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestReadCRIArchive(t *testing.T) {
	raw := archiveOf(t, criEntries(nil))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(raw)
	zw.Close()
	for name, in := range map[string][]byte{"tar": raw, "tar.gz": gz.Bytes()} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			a, err := ReadCRIArchive(bytes.NewReader(in), dir)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"checkpoint/inventory.img", "checkpoint/pages-1.img", "checkpoint/pstree.img", "config.dump", "container.log",
				"dump.log", "rootfs-diff.tar", "spec.dump", "stats-dump", "status", "status.dump"}
			if !reflect.DeepEqual(a.Files, want) {
				t.Errorf("files %q, want %q", a.Files, want)
			}
			if a.ContainerName() != "engine" || a.Config.ID != "c0ffee" || a.Status.Labels[criPodName] != "src-1" {
				t.Errorf("read %+v", a)
			}
			if got := recordedDigest(a.BaseRef()).Encoded(); !strings.HasPrefix(got, "6f1e8c9b") {
				t.Errorf("base digest %q", got)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "checkpoint", "pages-1.img")); len(b) != 4096 {
				t.Errorf("pages-1.img extracted as %d bytes", len(b))
			}
		})
	}
}

func TestReadCRIArchiveRefuses(t *testing.T) {
	full := archiveOf(t, criEntries(nil))
	for _, tc := range []struct {
		name   string
		in     []byte
		err    string
		notCRI bool // wraps ErrNotCRIArchive
	}{
		{name: "empty", in: nil, err: "it is empty", notCRI: true},
		{name: "not a tar", in: []byte(strings.Repeat("not a tar archive, just words. ", 40)), err: "not a tar archive", notCRI: true},
		{name: "truncated", in: full[:len(full)/2], err: "the archive is truncated"},
		{name: "absolute path", in: archiveOf(t, criEntries(map[string]*arEntry{"/etc/cron.d/x": {name: "/etc/cron.d/x", body: "x"}})), err: `entry "/etc/cron.d/x" has an absolute path`},
		{name: "dot dot", in: archiveOf(t, criEntries(map[string]*arEntry{"x": {name: "checkpoint/../../x", body: "x"}})), err: `'..' path that leads out of the archive`},
		{name: "symlink", in: archiveOf(t, criEntries(map[string]*arEntry{"checkpoint/pages-1.img": {name: "checkpoint/pages-1.img", typ: tar.TypeSymlink, link: "/etc/shadow"}})), err: `is a link (to "/etc/shadow")`},
		{name: "hard link", in: archiveOf(t, criEntries(map[string]*arEntry{"dump.log": {name: "dump.log", typ: tar.TypeLink, link: "config.dump"}})), err: "is a link"},
		{name: "device", in: archiveOf(t, criEntries(map[string]*arEntry{"n": {name: "checkpoint/null", typ: tar.TypeChar}})), err: "is a device or fifo"},
		{name: "fifo", in: archiveOf(t, criEntries(map[string]*arEntry{"n": {name: "fifo", typ: tar.TypeFifo}})), err: "is a device or fifo"},
		{name: "twice", in: archiveOf(t, append(criEntries(nil), arEntry{name: "./spec.dump", body: goodSpec})), err: "is in the archive twice"},
		{name: "unexpected file", in: archiveOf(t, criEntries(map[string]*arEntry{"e": {name: "etc/passwd", body: "root"}})), err: `holds "etc/passwd", which a CRI checkpoint archive does not`},
		{name: "folder in checkpoint", in: archiveOf(t, criEntries(map[string]*arEntry{"d": {name: "checkpoint/sub/", typ: tar.TypeDir}})), err: `holds "checkpoint/sub"`},
		{name: "oci archive", in: archiveOf(t, []arEntry{{name: "oci-layout", body: `{"imageLayoutVersion":"1.0.0"}`}, {name: "index.json", body: "{}"}, {name: "blobs/", typ: tar.TypeDir}}),
			err: "it is an OCI image archive", notCRI: true},
		{name: "podman export", in: archiveOf(t, criEntries(map[string]*arEntry{"status.dump": nil, "network.status": {name: "network.status", body: "{}"}, "bind.mounts": {name: "bind.mounts", body: "[]"}})),
			err: "a podman checkpoint export", notCRI: true},
		{name: "no status.dump", in: archiveOf(t, criEntries(map[string]*arEntry{"status.dump": nil})), err: "no status.dump (podman", notCRI: true},
		{name: "no dumps", in: archiveOf(t, []arEntry{{name: "checkpoint/", typ: tar.TypeDir}, {name: "checkpoint/inventory.img", body: "i"}}), err: "no config.dump, spec.dump or status.dump", notCRI: true},
		{name: "no spec.dump", in: archiveOf(t, criEntries(map[string]*arEntry{"spec.dump": nil})), err: "lacks spec.dump"},
		{name: "no CRIU images", in: archiveOf(t, criEntries(map[string]*arEntry{"checkpoint/inventory.img": nil})), err: "no checkpoint/inventory.img"},
		{name: "bad config.dump", in: archiveOf(t, criEntries(map[string]*arEntry{"config.dump": {name: "config.dump", body: "{"}})), err: "config.dump does not parse"},
		{name: "config.dump of no image", in: archiveOf(t, criEntries(map[string]*arEntry{"config.dump": {name: "config.dump", body: `{"id":"x"}`}})), err: "names no container id or base image"},
		{name: "terminal", in: archiveOf(t, criEntries(map[string]*arEntry{"spec.dump": {name: "spec.dump", body: `{"process":{"terminal":true}}`}})), err: "the container had a terminal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "archive")
			os.Mkdir(dir, 0o700)
			_, err := ReadCRIArchive(bytes.NewReader(tc.in), dir)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want one saying %q", err, tc.err)
			}
			if errors.Is(err, ErrNotCRIArchive) != tc.notCRI {
				t.Errorf("error %v: ErrNotCRIArchive %v, want %v", err, !tc.notCRI, tc.notCRI)
			}
			// Nothing lands outside dir, whatever the archive named.
			if es, _ := os.ReadDir(parent); len(es) != 1 {
				t.Errorf("wrote beside the archive folder: %v", es)
			}
			if _, err := os.Lstat(filepath.Join(dir, "checkpoint", "pages-1.img")); tc.name == "symlink" && err == nil {
				t.Errorf("the refused link was written")
			}
		})
	}
}

func TestRecordedDigest(t *testing.T) {
	d := "sha256:6f1e8c9b2d3a4f5e6d7c8b9a0f1e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7d6"
	for ref, want := range map[string]string{
		d: d, "rekindle.local/cpu-engine@" + d: d, "docker.io/library/busybox:1@" + d: d,
		"rekindle.local/cpu-engine:latest": "", "": "",
	} {
		if got := recordedDigest(ref).String(); got != want {
			t.Errorf("recordedDigest(%q) = %q, want %q", ref, got, want)
		}
	}
}
