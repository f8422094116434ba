package checkpoint

import (
	"context"
	"fmt"
	"io"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/distribution/reference"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"rekindle.local/oci-checkpoint/pkg/registry"
)

// Manifest finds a checkpoint image's manifest: in the local image store,
// else from its registry (the manifest only, no layer is pulled), resolved
// as nerdctl does: hosts.toml under reg's hosts dirs, credentials from the
// docker config, plain HTTP for registries on loopback.
func Manifest(ctx context.Context, c *client.Client, ref string, reg registry.Options) (name string, m ocispec.Manifest, local bool, err error) {
	f, err := findManifest(ctx, c, ref, reg)
	return f.name, f.m, f.local, err
}

// found is what findManifest found of an image.
type found struct {
	name  string
	m     ocispec.Manifest
	desc  ocispec.Descriptor // m's, the platform's manifest of an index
	local bool
	// labels are the image store's record's (local only): metadata of
	// this host that does not travel with the image.
	labels map[string]string
}

// findManifest is Manifest with the manifest's descriptor and the local
// image's labels.
func findManifest(ctx context.Context, c *client.Client, ref string, reg registry.Options) (f found, err error) {
	f.name, err = NormalizeName(ref)
	if err != nil {
		return f, err
	}
	name := f.name
	img, err := c.ImageService().Get(ctx, name)
	switch {
	case err == nil:
		f.local, f.labels = true, img.Labels
		p := &manifestRecorder{Provider: c.ContentStore(), desc: img.Target}
		f.m, err = images.Manifest(ctx, p, img.Target, platforms.Default())
		f.desc = p.desc
		return f, err
	case !errdefs.IsNotFound(err):
		return f, err
	}
	m, desc, err := remoteManifest(ctx, name, reg)
	f.m, f.desc = m, desc
	return f, err
}

// remoteManifest reads name's manifest (the platform's, from an index)
// from its registry.
func remoteManifest(ctx context.Context, name string, reg registry.Options) (ocispec.Manifest, ocispec.Descriptor, error) {
	ctx = registry.Quiet(ctx)
	named, err := reference.ParseNormalizedNamed(name)
	if err != nil {
		return ocispec.Manifest{}, ocispec.Descriptor{}, err
	}
	host := reference.Domain(named)
	resolver, err := registry.New(ctx, host, reg)
	if err != nil {
		return ocispec.Manifest{}, ocispec.Descriptor{}, err
	}
	_, desc, err := resolver.Resolve(ctx, name)
	if err != nil {
		return ocispec.Manifest{}, ocispec.Descriptor{}, fmt.Errorf("image %s is not in the local store, and its registry did not give its manifest: %w", name, resolver.Explain(err))
	}
	fetcher, err := resolver.Fetcher(ctx, name)
	if err != nil {
		return ocispec.Manifest{}, ocispec.Descriptor{}, err
	}
	p := &manifestRecorder{Provider: fetchProvider{fetcher, host}, desc: desc}
	m, err := images.Manifest(ctx, p, desc, platforms.Default())
	if err != nil {
		return m, desc, fmt.Errorf("fetch the manifest of %s: %w", name, resolver.Explain(err))
	}
	return m, p.desc, nil
}

// manifestRecorder keeps the descriptor of the last image manifest read
// through it: the one images.Manifest picked from an index.
type manifestRecorder struct {
	content.Provider
	desc ocispec.Descriptor
}

func (r *manifestRecorder) ReaderAt(ctx context.Context, desc ocispec.Descriptor) (content.ReaderAt, error) {
	if images.IsManifestType(desc.MediaType) {
		r.desc = desc
	}
	return r.Provider.ReaderAt(ctx, desc)
}

// fetchProvider reads blobs of the registry host (or the mirror its
// hosts.toml names) through f.
type fetchProvider struct {
	f    remotes.Fetcher
	host string
}

// ReaderAt reads desc whole. A read the registry cuts short names the
// registry and the blob: the bare "unexpected EOF" named neither.
func (p fetchProvider) ReaderAt(ctx context.Context, desc ocispec.Descriptor) (content.ReaderAt, error) {
	rc, err := p.f.Fetch(ctx, desc)
	if err != nil {
		return nil, fmt.Errorf("registry %s, blob %s: %w", p.host, desc.Digest, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 4<<20))
	if err == nil && desc.Size > 0 && int64(len(b)) != desc.Size {
		err = fmt.Errorf("short read: expected %d bytes but got %d: %w", desc.Size, len(b), io.ErrUnexpectedEOF)
	}
	if err != nil {
		return nil, fmt.Errorf("registry %s cut the read of blob %s (%s, %d bytes) short: %w (is the registry up? try again)",
			p.host, desc.Digest, desc.MediaType, desc.Size, err)
	}
	return bytesReaderAt(b), nil
}

type bytesReaderAt []byte

func (b bytesReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
func (b bytesReaderAt) Close() error { return nil }
func (b bytesReaderAt) Size() int64  { return int64(len(b)) }
