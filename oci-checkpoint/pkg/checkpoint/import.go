package checkpoint

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"rekindle.local/oci-checkpoint/pkg/annotations"
	"rekindle.local/oci-checkpoint/pkg/hostinfo"
	"rekindle.local/oci-checkpoint/pkg/phase"
	"rekindle.local/oci-checkpoint/pkg/progress"
)

// ImportOptions of Import.
type ImportOptions struct {
	Archive string // the CRI checkpoint archive's path
	Image   string // a name; normalised as nerdctl does
	// BaseImage names the local image the checkpoint's container ran on,
	// when the archive's record of it does not find one.
	BaseImage string
	// Engine and Port, when given, are recorded as create records them.
	Engine        string
	Port          int
	OCIArchive    string
	Replace       bool
	WorkDir       string
	Version       string
	Compression   string
	KeepZeroPages bool
	Fallback      string
	SignKey       ed25519.PrivateKey
	Progress      io.Writer
	ProgressMode  progress.Mode
}

// Import packages a CRI checkpoint archive, as the kubelet's checkpoint API
// and crictl checkpoint --export write it, as a checkpoint image in
// create's layout: the archive's files (its config.dump and spec.dump
// rewritten as create writes them, the base image pinned by digest), this
// host's facts and the standard annotations, marked as imported and not
// quiesced. An archive it refuses leaves nothing written.
func Import(ctx context.Context, c *client.Client, o ImportOptions) (*Result, error) {
	name, err := NormalizeName(o.Image)
	if err != nil {
		return nil, err
	}
	co := Options{Image: o.Image, OCIArchive: o.OCIArchive, Replace: o.Replace, Compression: o.Compression,
		KeepZeroPages: o.KeepZeroPages, Fallback: o.Fallback, SignKey: o.SignKey, Progress: o.Progress, ProgressMode: o.ProgressMode, Version: o.Version}
	if err := checkOutput(ctx, c.ContentStore(), c.ImageService(), name, co); err != nil {
		return nil, err
	}
	f, err := os.Open(o.Archive)
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("archive %s is not a file", o.Archive)
	}
	ctx, done, err := c.WithLease(ctx, leases.WithRandomID(), leases.WithExpiration(24*time.Hour))
	if err != nil {
		return nil, err
	}
	defer done(context.WithoutCancel(ctx))
	work, err := os.MkdirTemp(o.WorkDir, "oci-checkpoint-import-")
	if err != nil {
		return nil, fmt.Errorf("work directory: %w (pass --work-dir on a filesystem with room for the checkpoint)", err)
	}
	defer os.RemoveAll(work)
	dir := filepath.Join(work, "archive")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	t := &phase.Timer{Out: o.Progress}
	var a *CRIArchive
	if err := t.Run("read", func() (err error) {
		a, err = ReadCRIArchive(f, dir)
		return err
	}); err != nil {
		return nil, fmt.Errorf("%s: %w", o.Archive, noSpace(err, work))
	}
	var base client.Image
	if err := t.Run("base", func() (err error) {
		base, err = resolveBase(ctx, c, a, o.BaseImage)
		return err
	}); err != nil {
		return nil, err
	}
	host, rt := hostinfo.Read(), hostinfo.ReadRuntime()
	gpus := archiveGPUs(a, host.GPUs)
	at := a.Config.CheckpointedAt.UTC()
	if a.Config.CheckpointedAt.IsZero() {
		at = time.Now().UTC()
	}
	cname := a.ContainerName()
	labels := a.Status.Labels
	std := Standard{
		ContainerName: cname, Pod: labels[criPodName], PodID: labels[criPodUID], PodNamespace: labels[criPodNamespace],
		BaseImage: a.Config.RootfsImageName, BaseDigest: base.Target().Digest.String(),
		// What dumped it: containerd's CRI, with this host's runc and CRIU.
		Engine: "containerd-cri", EngineVersion: "",
		RuntimeName: "runc", RuntimeVersion: rt.RuncVersion,
		CRIU: host.CRIU, Kernel: host.Kernel, Runtime: rt,
	}.Annotations()
	res := &Result{SchemaVersion: SchemaVersion, Image: name, Container: a.Config.ID, Engine: o.Engine,
		Created: at.Format(time.RFC3339), BaseImage: a.Config.RootfsImageName, BaseDigest: base.Target().Digest.String(), GPUs: gpus}
	if res.GPUs == nil {
		res.GPUs = []hostinfo.GPU{}
	}
	start := time.Now()
	err = t.Run("package", func() error {
		if err := rewriteDumps(ctx, dir, a, base, std); err != nil {
			return err
		}
		annotate := func() map[string]string {
			ann := host.Annotations(gpus)
			for k, v := range std {
				ann[k] = v
			}
			ann[annotations.Format] = annotations.FormatVersion
			if o.Engine != "" {
				ann[annotations.Engine] = o.Engine
			}
			if o.Port != 0 {
				ann[annotations.EnginePort] = strconv.Itoa(o.Port)
			}
			ann[annotations.Created] = at.Format(time.RFC3339)
			ann[annotations.SourceImage] = a.Config.RootfsImageName
			ann[annotations.Source] = annotations.SourceCRIArchive
			ann[annotations.Quiesced] = "false"
			phases, _ := json.Marshal(append(t.Phases, phase.Timing{Name: "package", Seconds: time.Since(start).Seconds()}))
			ann[annotations.Phases] = string(phases)
			ann[annotations.LegacyCheckpoint] = cname
			if o.Fallback == annotations.FallbackCold {
				ann[annotations.Fallback] = annotations.FallbackCold
			}
			res.Annotations = ann
			return ann
		}
		desc, size, err := writeImage(ctx, c, name, base, dir, annotate, co)
		if err != nil {
			return err
		}
		res.Digest, res.Size, res.OCIArchive = desc.Digest.String(), size, o.OCIArchive
		return nil
	})
	if err != nil {
		return nil, noSpace(err, work)
	}
	res.Phases = t.Phases
	return res, nil
}

// resolveBase finds the local image the archive's container ran on: the
// one given (whose content must be the recorded one), else one whose
// manifest or config digest is the one CRI recorded, that name first.
func resolveBase(ctx context.Context, c *client.Client, a *CRIArchive, given string) (client.Image, error) {
	ref := a.BaseRef()
	want := recordedDigest(ref)
	ns, _ := namespaces.Namespace(ctx)
	if given != "" {
		img, err := c.GetImage(ctx, given)
		if errdefs.IsNotFound(err) {
			if n, nerr := NormalizeName(given); nerr == nil {
				img, err = c.GetImage(ctx, n)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("--base-image %s: %w (in containerd namespace %s)", given, err, ns)
		}
		if want != "" && !imageHas(ctx, img, want) {
			return nil, fmt.Errorf("--base-image %s is %s, but the checkpoint's container ran on %s: a restore maps the base's files again and needs the same ones",
				given, img.Target().Digest, ref)
		}
		return img, nil
	}
	if want == "" {
		return nil, fmt.Errorf("config.dump records no digest of the base image %s (rootfsImageRef %q): name the local image it ran on with --base-image", a.Config.RootfsImageName, ref)
	}
	list, err := c.ImageService().List(ctx)
	if err != nil {
		return nil, err
	}
	// CRI names each image by its id too ("sha256:..."): a record of that
	// name is the base's content, but the one named as the container's
	// image, else any with a name, is picked before it.
	var found client.Image
	rank := 0
	for _, i := range list {
		img := client.NewImage(c, i)
		r := 1
		switch {
		case i.Name == a.Config.RootfsImageName:
			r = 3
		case !isDigest(i.Name):
			r = 2
		}
		if r <= rank || !imageHas(ctx, img, want) {
			continue
		}
		found, rank = img, r
	}
	if found != nil && rank == 1 {
		// Pinned by the name the container knew it by.
		found = client.NewImage(c, images.Image{Name: a.Config.RootfsImageName, Target: found.Target()})
	}
	if found == nil {
		return nil, fmt.Errorf("the base image %s (%s) is not in containerd's image store (namespace %s; a kubelet's images are in k8s.io: pass -n k8s.io): pull it there, or name a local image of the same content with --base-image",
			a.Config.RootfsImageName, ref, ns)
	}
	return found, nil
}

// recordedDigest is the digest in CRI's image ref: NAME@DIGEST or a bare
// config digest.
func recordedDigest(ref string) digest.Digest {
	if d, err := digest.Parse(ref); err == nil {
		return d
	}
	if n, err := reference.ParseNormalizedNamed(ref); err == nil {
		if dn, ok := n.(reference.Digested); ok {
			return dn.Digest()
		}
	}
	return ""
}

func isDigest(s string) bool {
	_, err := digest.Parse(s)
	return err == nil
}

// imageHas says whether img's manifest (or index) or config is d.
func imageHas(ctx context.Context, img client.Image, d digest.Digest) bool {
	if img.Target().Digest == d {
		return true
	}
	cfg, err := img.Config(ctx)
	return err == nil && cfg.Digest == d
}

// rewriteDumps writes config.dump and spec.dump as create does: the base
// pinned by manifest digest (Rekindle's containerd finds it by that),
// podman's fields, the standard annotations in the spec and no hooks.
func rewriteDumps(ctx context.Context, dir string, a *CRIArchive, base client.Image, std map[string]string) error {
	spec, err := os.ReadFile(filepath.Join(dir, crmetadata.SpecDumpFile))
	if err != nil {
		return err
	}
	if spec, err = annotateSpec(spec, std); err == nil {
		spec, err = withoutHooks(spec)
	}
	if err != nil {
		return fmt.Errorf("spec.dump: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, crmetadata.SpecDumpFile), spec, 0o600); err != nil {
		return err
	}
	pinned, err := pinnedRef(base)
	if err != nil {
		return err
	}
	baseConfig, err := base.Config(ctx)
	if err != nil {
		return fmt.Errorf("base image %s: its config: %w", base.Name(), err)
	}
	cfg := a.Config
	cfg.RootfsImageRef = pinned
	if cfg.RootfsImage == "" {
		cfg.RootfsImage = cfg.RootfsImageName
	}
	os.Remove(filepath.Join(dir, crmetadata.ConfigDumpFile))
	_, err = crmetadata.WriteJSONFile(&configDump{ContainerConfig: cfg,
		podmanConfig: newPodmanConfig(spec, cfg.RootfsImageName, baseConfig.Digest)}, dir, crmetadata.ConfigDumpFile)
	return err
}

// archiveGPUs are this host's GPUs that spec.dump gave the container
// (its /dev/nvidiaN devices).
func archiveGPUs(a *CRIArchive, host []hostinfo.GPU) []hostinfo.GPU {
	if a.Spec.Linux == nil {
		return nil
	}
	devs := map[string]uint64{}
	for _, d := range a.Spec.Linux.Devices {
		if d.Type == "c" && strings.HasPrefix(d.Path, "/dev/nvidia") {
			devs[filepath.Base(d.Path)] = unix.Mkdev(uint32(d.Major), uint32(d.Minor))
		}
	}
	return hostinfo.DeviceMinors(devs, host)
}
