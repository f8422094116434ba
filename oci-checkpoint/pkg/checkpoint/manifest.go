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
	name, err = NormalizeName(ref)
	if err != nil {
		return "", m, false, err
	}
	img, err := c.ImageService().Get(ctx, name)
	switch {
	case err == nil:
		m, err = images.Manifest(ctx, c.ContentStore(), img.Target, platforms.Default())
		return name, m, true, err
	case !errdefs.IsNotFound(err):
		return name, m, false, err
	}
	ctx = registry.Quiet(ctx)
	named, err := reference.ParseNormalizedNamed(name)
	if err != nil {
		return name, m, false, err
	}
	resolver, err := registry.New(ctx, reference.Domain(named), reg)
	if err != nil {
		return name, m, false, err
	}
	_, desc, err := resolver.Resolve(ctx, name)
	if err != nil {
		return name, m, false, fmt.Errorf("image %s is not in the local store, and its registry did not give its manifest: %w", name, resolver.Explain(err))
	}
	f, err := resolver.Fetcher(ctx, name)
	if err != nil {
		return name, m, false, err
	}
	m, err = images.Manifest(ctx, fetchProvider{f}, desc, platforms.Default())
	if err != nil {
		return name, m, false, fmt.Errorf("fetch the manifest of %s: %w", name, resolver.Explain(err))
	}
	return name, m, false, nil
}

type fetchProvider struct{ f remotes.Fetcher }

func (p fetchProvider) ReaderAt(ctx context.Context, desc ocispec.Descriptor) (content.ReaderAt, error) {
	rc, err := p.f.Fetch(ctx, desc)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 4<<20))
	if err != nil {
		return nil, err
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
