package checkpoint

import (
	"archive/tar"
	"errors"
	"io"
	"path"
	"strings"
	"time"
)

// OCI layer whiteout names (image-spec, layer.md).
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// ExtraFile is a file added to the rootfs diff that the running container
// does not have (the wake trigger).
type ExtraFile struct {
	Name string // absolute path in the container
	Data []byte
	Mode int64
}

// ConvertDiff turns an OCI layer tar (what containerd's differ writes,
// deletions as whiteout entries) into the CRI-O checkpoint form: a tar of
// the added and changed files, and the list of deleted paths that goes to
// deleted.files. extra files are appended.
//
// An opaque directory (replaced as a whole) has no deleted.files form:
// restorers apply the tar before deleting, so listing the directory would
// delete its new content. Its marker stays in the tar, where containerd's
// applier honours it.
func ConvertDiff(in io.Reader, out io.Writer, extra []ExtraFile) (deleted []string, err error) {
	tr := tar.NewReader(in)
	tw := tar.NewWriter(out)
	written := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		name := path.Clean("/" + hdr.Name)
		dir, base := path.Split(name)
		switch {
		case base == whiteoutOpaque:
		case strings.HasPrefix(base, whiteoutPrefix):
			deleted = append(deleted, path.Join(dir, strings.TrimPrefix(base, whiteoutPrefix)))
			continue
		}
		written[name] = true
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return nil, err
		}
	}
	now := time.Now()
	for _, f := range extra {
		name := path.Clean("/" + f.Name)
		// Parents first, so the tar unpacks anywhere.
		var parents []string
		for d := path.Dir(name); d != "/"; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if written[d] {
				continue
			}
			written[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, ModTime: now}); err != nil {
				return nil, err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(name, "/"), Mode: f.Mode, Size: int64(len(f.Data)), ModTime: now}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	return deleted, tw.Close()
}
