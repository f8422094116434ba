package checkpoint

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/images/archive"
	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"rekindle.local/oci-checkpoint/pkg/annotations"
	"rekindle.local/oci-checkpoint/pkg/progress"
)

// NormalizeName turns an image name into the form nerdctl looks images up
// by (docker.io/library/ added to short names, :latest to untagged ones).
func NormalizeName(name string) (string, error) {
	ref, err := reference.ParseDockerRef(name)
	if err != nil {
		return "", fmt.Errorf("image name %q: %w", name, err)
	}
	if _, ok := ref.(reference.Digested); ok {
		return "", fmt.Errorf("image name %q has a digest: give a name and tag", name)
	}
	return ref.String(), nil
}

// writeImage packs dir into the checkpoint layer and writes the image: to
// the image store as name, or as an OCI archive. annotate gives the
// manifest's annotations once the layer is written, so that the phase
// times they record count the layer's.
func writeImage(ctx context.Context, c *client.Client, name string, baseImg client.Image, dir string, annotate func() map[string]string, o Options) (ocispec.Descriptor, int64, error) {
	layer, diffID, err := writeLayer(ctx, c, dir, o)
	if err != nil {
		return ocispec.Descriptor{}, 0, fmt.Errorf("checkpoint layer: %w", err)
	}
	cfg, err := writeConfig(ctx, c.ContentStore(), baseImg, diffID)
	if err != nil {
		return ocispec.Descriptor{}, 0, err
	}
	mdesc, err := writeManifest(ctx, c.ContentStore(), cfg, layer, annotate(), o.SignKey)
	if err != nil {
		return ocispec.Descriptor{}, 0, err
	}
	size := layer.Size + cfg.Size + mdesc.Size

	if o.OCIArchive != "" {
		return mdesc, size, exportArchive(ctx, c, mdesc, name, o, size)
	}
	if err := storeImage(ctx, c, name, mdesc, o.Replace); err != nil {
		return ocispec.Descriptor{}, 0, err
	}
	return mdesc, size, nil
}

// writeConfig writes the image config of the checkpoint layer diffID.
func writeConfig(ctx context.Context, cs content.Store, baseImg client.Image, diffID digest.Digest) (ocispec.Descriptor, error) {
	var baseCfg ocispec.Image
	cfgDesc, err := baseImg.Config(ctx)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	b, err := content.ReadBlob(ctx, cs, cfgDesc)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if err := json.Unmarshal(b, &baseCfg); err != nil {
		return ocispec.Descriptor{}, err
	}
	now := time.Now().UTC()
	// The restored container runs the checkpointed process, not this
	// config; it keeps the base's so that `nerdctl run` builds the same
	// spec (environment, working directory, ports) as for the original.
	cfg := ocispec.Image{
		Created:  &now,
		Platform: baseCfg.Platform,
		Config: ocispec.ImageConfig{
			Env: baseCfg.Config.Env, Entrypoint: baseCfg.Config.Entrypoint, Cmd: baseCfg.Config.Cmd,
			WorkingDir: baseCfg.Config.WorkingDir, ExposedPorts: baseCfg.Config.ExposedPorts,
			User: baseCfg.Config.User, Labels: baseCfg.Config.Labels, StopSignal: baseCfg.Config.StopSignal,
		},
		RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{diffID}},
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromBytes(cfgJSON), Size: int64(len(cfgJSON))}
	return desc, content.WriteBlob(ctx, cs, "rekindle-config-"+randomID(), bytes.NewReader(cfgJSON), desc)
}

// writeManifest writes the manifest, with gc labels that keep its config
// and layer as long as it is kept, signed with key when one is given (the
// signature annotations are added to ann).
func writeManifest(ctx context.Context, cs content.Store, cfg, layer ocispec.Descriptor, ann map[string]string, key ed25519.PrivateKey) (ocispec.Descriptor, error) {
	m := ocispec.Manifest{
		Versioned:   specs.Versioned{SchemaVersion: 2},
		MediaType:   ocispec.MediaTypeImageManifest,
		Config:      cfg,
		Layers:      []ocispec.Descriptor{layer},
		Annotations: ann,
	}
	if key != nil {
		SignManifest(&m, key)
	}
	mJSON, err := json.Marshal(m)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	desc := ocispec.Descriptor{MediaType: m.MediaType, Digest: digest.FromBytes(mJSON), Size: int64(len(mJSON))}
	labels := map[string]string{
		"containerd.io/gc.ref.content.config": cfg.Digest.String(),
		"containerd.io/gc.ref.content.l.0":    layer.Digest.String(),
	}
	return desc, content.WriteBlob(ctx, cs, "rekindle-manifest-"+randomID(), bytes.NewReader(mJSON), desc, content.WithLabels(labels))
}

// storeImage names the manifest in the image store, replacing an image
// of that name if replace (checkOutput checked that it is a checkpoint
// image), else failing on one made while the checkpoint ran.
func storeImage(ctx context.Context, c *client.Client, name string, mdesc ocispec.Descriptor, replace bool) error {
	img := images.Image{Name: name, Target: mdesc, Labels: map[string]string{annotations.ImageLabel: "true"}}
	is := c.ImageService()
	// The last look at an interruption: past it the image is stored, and
	// the store's answer must not be lost to one.
	if err := ctx.Err(); err != nil {
		return err
	}
	ctx = context.WithoutCancel(ctx)
	_, err := is.Create(ctx, img)
	switch {
	case errdefs.IsAlreadyExists(err) && replace:
		_, err = is.Update(ctx, img)
		return err
	case errdefs.IsAlreadyExists(err):
		return fmt.Errorf("image %s: %w (stored while this checkpoint ran): remove it ('oci-checkpoint rm %s') or pass --replace, and checkpoint again", name, err, name)
	}
	return err
}

// exportArchive writes the image as an OCI archive at o.OCIArchive, through
// a temporary file that is renamed into place only when complete.
func exportArchive(ctx context.Context, c *client.Client, desc ocispec.Descriptor, name string, o Options, size int64) error {
	path := o.OCIArchive
	tmp := path + ".partial"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	var count progress.Counter
	stop := progress.Start(o.Progress, o.ProgressMode, "export", size, &count)
	err = c.Export(ctx, count.Writer(f), archive.WithManifest(desc, name))
	stop()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return noSpace(fmt.Errorf("export to %s: %w", path, err), filepath.Dir(path))
	}
	if err := ctx.Err(); err != nil {
		return err // interrupted: the partial file goes
	}
	return os.Rename(tmp, path)
}
