package checkpoint

import (
	"archive/tar"
	"context"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"rekindle.local/oci-checkpoint/pkg/annotations"
	"rekindle.local/oci-checkpoint/pkg/progress"
	"rekindle.local/oci-checkpoint/pkg/sparse"
)

// Compression names the checkpoint layer's compression.
const (
	CompressionNone = "none"
	CompressionZstd = "zstd"
)

// CheckCompression refuses a compression other than the three, with the
// words the CLI's --compression error uses.
func CheckCompression(c string) error {
	switch c {
	case CompressionNone, CompressionPages, CompressionZstd:
		return nil
	}
	return fmt.Errorf("compression %q: want %s, %s or %s", c, CompressionNone, CompressionPages, CompressionZstd)
}

// writeLayer tars dir into the content store as the checkpoint layer and
// returns its descriptor and diff ID (the digest of the uncompressed tar).
//
// The layer is written once: straight into containerd's content store
// directory when this process can reach it (it runs on the same host as
// containerd), hashed by the store's writer as it is written, and then
// registered with containerd by digest. Going through containerd's content
// API instead costs a gRPC round trip per message and a second copy,
// which held packaging to a third of the disk's speed. Reading the next
// files overlaps with hashing and writing through asyncWriter.
func writeLayer(ctx context.Context, c *client.Client, dir string, o Options) (ocispec.Descriptor, digest.Digest, error) {
	total, err := dirSize(dir)
	if err != nil {
		return ocispec.Descriptor{}, "", err
	}
	var plan *sparse.Plan
	if !o.KeepZeroPages {
		// CRIU's own images, so a failure here is a bug of ours: say so, and
		// package what CRIU wrote.
		if plan, err = sparse.Make(filepath.Join(dir, crmetadata.CheckpointDirectory)); err != nil {
			log.G(ctx).WithError(err).Warn("pages of zeros kept: the dump's images could not be planned without them")
			plan = nil
		} else {
			total -= plan.Dropped
			log.G(ctx).Debugf("pages of zeros left out: %d bytes", plan.Dropped)
		}
	}
	ref := "rekindle-layer-" + randomID()
	dst, err := openLayerWriter(ctx, c, ref)
	if err != nil {
		return ocispec.Descriptor{}, "", err
	}
	where := dst.where
	committed := false
	defer func() {
		if !committed {
			dst.abort()
		}
	}()

	var count progress.Counter
	stop := progress.Start(o.Progress, o.ProgressMode, "package", total, &count)
	aw, err := newAsyncWriter(dst.w, dst.h, 8<<20, 4)
	if err != nil {
		stop()
		return ocispec.Descriptor{}, "", err
	}
	var out io.Writer = aw
	mediaType := ocispec.MediaTypeImageLayer
	var diffID digest.Digester
	var zw *zstdFrames
	pagesDir := ""
	switch o.Compression {
	case "", CompressionNone:
	case CompressionPages:
		// Beside dir, not in it: the walk would find them.
		pagesDir = filepath.Dir(dir)
	case CompressionZstd:
		mediaType = ocispec.MediaTypeImageLayerZstd
		if zw, err = newZstdFrames(aw); err != nil {
			aw.Close()
			stop()
			return ocispec.Descriptor{}, "", err
		}
		diffID = digest.Canonical.Digester()
		out = io.MultiWriter(zw, diffID.Hash())
	default:
		aw.Close()
		stop()
		return ocispec.Descriptor{}, "", CheckCompression(o.Compression)
	}
	err = writeTar(ctxWriter{ctx, out}, dir, plan, pagesDir, &count)
	if zw != nil {
		// Its frames go on being written to aw until it is closed: close it
		// before aw, also when the tar stream failed.
		if err != nil {
			zw.Abort(err)
		}
		if cerr := zw.Close(); err == nil {
			err = cerr
		}
	}
	if cerr := aw.Close(); err == nil {
		err = cerr
	}
	stop()
	if err != nil {
		return ocispec.Descriptor{}, "", noSpace(err, where)
	}
	desc, err := dst.commit(ctx, aw.n)
	if err != nil {
		return ocispec.Descriptor{}, "", noSpace(err, where)
	}
	committed = true
	desc.MediaType = mediaType
	if zw == nil {
		desc.Annotations = map[string]string{annotations.LayerInPlace: annotations.LayerInPlaceEROFS}
	}
	if pagesDir != "" {
		desc.Annotations[annotations.LayerPages] = annotations.LayerPagesZstd
	}
	if diffID == nil {
		return desc, desc.Digest, nil
	}
	return desc, diffID.Digest(), nil
}

// writeTar writes dir as a tar stream: directories, regular files and
// symlinks, with names relative to dir and no owner names; the files of
// the CRIU dump that plan changes as it says. With pagesDir set, the pages
// images are compressed (through temporary files in pagesDir) and named
// with PagesSuffix. count counts the files' bytes read.
func writeTar(w io.Writer, dir string, plan *sparse.Plan, pagesDir string, count *progress.Counter) error {
	criuDir := filepath.Join(dir, crmetadata.CheckpointDirectory)
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&os.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		var f io.ReadCloser
		if fi.Mode().IsRegular() && filepath.Dir(p) == criuDir {
			var changed bool
			if f, hdr.Size, changed, err = plan.File(criuDir, filepath.Base(p)); err != nil {
				return err
			} else if !changed {
				hdr.Size = fi.Size()
			}
		}
		if fi.Mode().IsRegular() && f == nil {
			if f, err = os.Open(p); err != nil {
				return err
			}
		}
		if f != nil {
			defer f.Close()
		}
		src := io.Reader(f)
		if pagesDir != "" && f != nil && filepath.Dir(p) == criuDir && isPagesImage(filepath.Base(p)) {
			z, size, err := compressPages(f, pagesDir, count)
			if err != nil {
				return fmt.Errorf("compress %s: %w", p, err)
			}
			defer os.Remove(z.Name())
			defer z.Close()
			hdr.Name += PagesSuffix
			hdr.Size, src = size, z
		} else if f != nil {
			src = io.TeeReader(f, count.Writer(io.Discard))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if f == nil {
			return nil
		}
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

func dirSize(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			total += fi.Size()
		}
		return nil
	})
	return total, err
}

// layerWriter is where the layer's bytes go and how they become content.
type layerWriter struct {
	w      io.Writer
	h      hash.Hash // hashes what w gets, when w does not
	where  string    // the destination, for errors
	commit func(ctx context.Context, size int64) (ocispec.Descriptor, error)
	abort  func()
}

// openLayerWriter writes into containerd's content store directory when it
// is reachable from here, else through containerd's content API.
func openLayerWriter(ctx context.Context, c *client.Client, ref string) (*layerWriter, error) {
	cs := c.ContentStore()
	root := contentRoot(ctx, c)
	if root == "" {
		w, err := content.OpenWriter(ctx, cs, content.WithRef(ref))
		if err != nil {
			return nil, err
		}
		lw := &layerWriter{w: w, where: "containerd's content store", abort: func() { w.Close(); cs.Abort(context.WithoutCancel(ctx), ref) }}
		lw.commit = func(ctx context.Context, size int64) (ocispec.Descriptor, error) {
			if err := w.Commit(ctx, size, ""); err != nil && !errdefs.IsAlreadyExists(err) {
				return ocispec.Descriptor{}, err
			}
			return ocispec.Descriptor{Digest: w.Digest(), Size: size}, nil
		}
		return lw, nil
	}
	bf, err := createBlob(root)
	if err != nil {
		return nil, noSpace(fmt.Errorf("content store %s: %w", root, err), root)
	}
	digester := digest.Canonical.Digester()
	lw := &layerWriter{w: bf, h: digester.Hash(), where: root, abort: bf.remove}
	lw.commit = func(ctx context.Context, size int64) (ocispec.Descriptor, error) {
		desc := ocispec.Descriptor{Digest: digester.Digest(), Size: size}
		if err := bf.finish(desc.Digest); err != nil {
			return ocispec.Descriptor{}, err
		}
		store, err := local.NewStore(root)
		if err != nil {
			return ocispec.Descriptor{}, err
		}
		if err := register(ctx, cs, store, desc); err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("register layer %s with containerd: %w", desc.Digest, err)
		}
		return desc, nil
	}
	return lw, nil
}

// register makes a blob that is already in the content store's directory
// content of this namespace (and of the caller's lease): under containerd's
// default "shared" content policy, a writer opened with the blob's
// descriptor finds it there and needs no bytes. Where it does want them
// (an "isolated" policy), they are sent from the local blob.
func register(ctx context.Context, cs content.Store, local content.Provider, desc ocispec.Descriptor) error {
	w, err := content.OpenWriter(ctx, cs, content.WithRef("rekindle-register-"+randomID()), content.WithDescriptor(desc))
	if errdefs.IsAlreadyExists(err) {
		return nil
	} else if err != nil {
		return err
	}
	defer w.Close()
	st, err := w.Status()
	if err != nil {
		return err
	}
	if st.Offset != desc.Size {
		log.G(ctx).Infof("containerd does not share content store blobs; sending layer %s through its content API", desc.Digest)
		ra, err := local.ReaderAt(ctx, desc)
		if err != nil {
			return err
		}
		defer ra.Close()
		if _, err := io.CopyBuffer(w, io.NewSectionReader(ra, 0, desc.Size), make([]byte, 1<<20)); err != nil {
			return err
		}
	}
	if err := w.Commit(ctx, desc.Size, desc.Digest); err != nil && !errdefs.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// contentRoot returns the directory of containerd's local content store
// when containerd exports it and this process can write there, else "".
func contentRoot(ctx context.Context, c *client.Client) string {
	if os.Getenv("REKINDLE_CONTENT_API") == "1" { // tests: force the API path
		return ""
	}
	resp, err := c.IntrospectionService().Plugins(ctx, "id==content")
	if err != nil {
		return ""
	}
	root := ""
	for _, p := range resp.Plugins {
		if p.Type == "io.containerd.content.v1" {
			root = p.Exports["root"]
		}
	}
	if root == "" || !strings.HasPrefix(root, "/") {
		return ""
	}
	if unixAccess(filepath.Join(root, "ingest")) != nil {
		return ""
	}
	return root
}

// ctxWriter fails its writes once ctx has ended: an interrupted packaging
// stops at its next write instead of writing the whole layer first.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}
