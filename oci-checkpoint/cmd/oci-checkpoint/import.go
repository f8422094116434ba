package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"rekindle.local/oci-checkpoint/internal/cliapp"
	"rekindle.local/oci-checkpoint/pkg/annotations"
	"rekindle.local/oci-checkpoint/pkg/checkpoint"
	"rekindle.local/oci-checkpoint/pkg/engine"
	"rekindle.local/oci-checkpoint/pkg/phase"
	"rekindle.local/oci-checkpoint/pkg/progress"
)

var importCmd = &cli.Command{
	Name:      "import",
	Usage:     "turn a CRI checkpoint archive (the kubelet's checkpoint API, crictl checkpoint --export) into a checkpoint image",
	ArgsUsage: "ARCHIVE IMAGE",
	Description: `Reads the checkpoint archive that containerd's CRI writes for the kubelet's checkpoint API
(POST /checkpoint/NAMESPACE/POD/CONTAINER on the kubelet port; the archive lands in the kubelet's
root dir, checkpoints/checkpoint-POD_NAMESPACE-CONTAINER-TIME.tar) or for 'crictl checkpoint
--export', checks it and stores it as IMAGE in containerd's image store, or as an OCI archive
(--output), in the layout create writes: CRI and nerdctl restore it on Rekindle's containerd.

The archive must hold CRIU's images (checkpoint/), config.dump, spec.dump and status.dump, and
nothing but containerd's logs beside them: an entry with an absolute or '..' path, a link,
a device, or a name a CRI checkpoint does not have is refused, as is a container that had a
terminal. The base image config.dump names must be in the image store (-n k8s.io for a kubelet's)
with the digest CRI recorded, or be named with --base-image; the image pins it by digest.

Such a checkpoint was not quiesced: the engine was dumped as it ran, with no release of its
devices and no wake helper to resume it (an engine that holds a GPU must be checkpointed with
create). The image records this host's facts (run import on the node that made the archive) and
says it was imported; 'oci-checkpoint inspect' shows it. A refused archive writes nothing.

Examples:
  curl --cacert ca.crt --cert admin.crt --key admin.key -X POST \
      https://NODE:10250/checkpoint/default/engine-7d4b9-x2x4z/engine
  export CONTAINERD_NAMESPACE=k8s.io
  oci-checkpoint import --port 30000 \
      /var/lib/kubelet/checkpoints/checkpoint-engine-7d4b9-x2x4z_default-engine-2026-12-02T01:30:00Z.tar \
      registry.example/engine:ckpt
  oci-checkpoint import --output oci-archive:/var/tmp/engine.tar ck.tar rekindle.local/ckpt:engine`,
	Flags: append([]cli.Flag{
		&cli.StringFlag{Name: "base-image", Usage: "the local image the checkpointed container ran on, when the archive's record of it (config.dump's rootfsImageRef) finds none; its content must be the recorded one"},
		&cli.StringFlag{Name: "engine", Usage: "record the engine's profile (" + strings.Join(engine.Names, ", ") + "), as create does; nothing is called"},
		&cli.IntFlag{Name: "port", Usage: "record the engine's HTTP port inside the container", DefaultText: "none recorded"},
	}, imageFlags("where the archive is unpacked")...),
	Action: func(cc *cli.Context) error {
		if err := cliapp.CheckArgs(cc); err != nil {
			return err
		}
		img, err := readImageFlags(cc)
		if err != nil {
			return err
		}
		o := checkpoint.ImportOptions{
			Archive: cc.Args().Get(0), Image: cc.Args().Get(1), BaseImage: cc.String("base-image"),
			Engine: cc.String("engine"), Port: cc.Int("port"), Version: version, Progress: os.Stderr,
			OCIArchive: img.OCIArchive, Replace: img.Replace, WorkDir: img.WorkDir, KeepZeroPages: img.KeepZeroPages,
			Compression: img.Compression, Fallback: img.Fallback, SignKey: img.SignKey,
		}
		if o.Engine != "" && !slices.Contains(engine.Names, o.Engine) {
			return cliapp.Usagef(cc, "--engine %q: want one of %s", o.Engine, strings.Join(engine.Names, ", "))
		}
		if o.Port < 0 || o.Port > 65535 {
			return cliapp.Usagef(cc, "--port %d: want 1 to 65535", o.Port)
		}
		quiet := img.Quiet
		if quiet {
			o.Progress, o.ProgressMode = nil, progress.Quiet
		}
		c, ctx, cancel, err := connect(cc)
		if err != nil {
			return err
		}
		defer cancel()
		defer c.Close()
		start := time.Now()
		res, err := checkpoint.Import(ctx, c, o)
		if err != nil {
			return err
		}
		where := res.Image
		if res.OCIArchive != "" {
			where = res.OCIArchive
		}
		if !quiet {
			fmt.Fprintf(os.Stderr, "==> import: %s\n==> wrote %s (%s, %.1f MiB) in %.2fs from a CRI checkpoint of %s (not quiesced)\n",
				phase.Summary(res.Phases), where, res.Digest, float64(res.Size)/(1<<20), time.Since(start).Seconds(), res.Container)
			if id := res.Annotations[annotations.SignatureKey]; id != "" {
				fmt.Fprintf(os.Stderr, "==> signed with key %s\n", id)
			}
		}
		if img.JSON {
			return cliapp.PrintJSON(res)
		}
		return nil
	},
}
