package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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

var createCmd = &cli.Command{
	Name:      "create",
	Usage:     "quiesce a running engine container, checkpoint it and store it as an image",
	ArgsUsage: "CONTAINER IMAGE",
	Description: `Waits for the engine in CONTAINER to be healthy, checks that its profile (--engine) can
quiesce it, quiesces it, injects the rekindle-wake helper, dumps it with CRIU through containerd and
stores the checkpoint as IMAGE in containerd's image store, or as an OCI archive (--output). An image
or archive of that name is refused unless --replace, before anything is done to the engine. If a
step after the quiesce fails, the engine is resumed and left running and no image is written; once
the image is written the container is stopped (--leave-running keeps it serving). SIGINT or
SIGTERM before the image is stored is undone the same way (a quiesce call or dump in progress ends
first, more signals do not cut the undo short) and exits 130 or 143. A plain
'nerdctl run IMAGE' restores it, and the helper resumes the engine.

Examples:
  oci-checkpoint create --engine sglang engine registry.example/engine:ckpt
  oci-checkpoint create --engine vllm --compression pages vllm0 rekindle.local/ckpt:vllm
  oci-checkpoint create --engine generic --port 9000 --quiesce 'POST /pause {"drain": true, "timeout": 30}' \
      --resume 'POST /resume' myengine rekindle.local/ckpt:mine
  oci-checkpoint create --output oci-archive:/var/tmp/engine.tar engine rekindle.local/ckpt:engine`,
	Flags: append([]cli.Flag{
		&cli.StringFlag{Name: "engine", Value: "sglang", Usage: "engine profile: " + strings.Join(engine.Names, ", ")},
		&cli.IntFlag{Name: "port", Usage: "engine HTTP port inside the container", DefaultText: "the profile's: sglang 30000, vllm 8000"},
		&cli.IntFlag{Name: "sleep-level", Usage: "vllm: sleep level before the dump, 1 (weights offloaded to host memory, in the checkpoint) or 2 (weights dropped, reloaded from the model's files on wake)", DefaultText: strconv.Itoa(engine.DefaultVLLMSleepLevel)},
		&cli.StringFlag{Name: "url", Usage: "reach the engine at this URL from the host instead of inside the container's network namespace"},
		newCallsFlag("quiesce", "a quiesce call, 'POST /path [JSON]' (PUT, DELETE alike), 'GET /path' or 'exec COMMAND'; repeat the flag for each call, in order; the calls replace the profile's"),
		newCallsFlag("resume", "a resume call, in the same forms; repeat the flag for each call, in order; the calls replace the profile's"),
		&cli.StringFlag{Name: "health", Usage: "health call, e.g. 'GET /health'"},
		&cli.DurationFlag{Name: "health-timeout", Value: 10 * time.Minute, Usage: "how long to wait for the engine to be healthy"},
		&cli.DurationFlag{Name: "refused-timeout", Value: checkpoint.DefaultRefusedTimeout, Usage: "how long the engine's port may refuse connections in a row before the wait ends (nothing listens there: wrong --port or --engine?)"},
		&cli.DurationFlag{Name: "quiesce-timeout", Value: 5 * time.Minute, Usage: "how long the quiesce calls may take"},
		&cli.DurationFlag{Name: "wake-deadline", Value: 10 * time.Minute, Usage: "how long the helper retries the resume calls after a restore"},
		&cli.StringFlag{Name: "wake-binary", Usage: "the static rekindle-wake to inject (default: beside oci-checkpoint)"},
		&cli.BoolFlag{Name: "leave-running", Usage: "resume the engine after the dump instead of stopping the container"},
		&cli.BoolFlag{Name: "stop-at-dump", Usage: "stop the container with the dump, not once the image is written: faster for an engine that keeps its weights on the GPU, but a failed packaging loses the engine"},
	}, imageFlags("where the checkpoint is assembled")...),
	Action: func(cc *cli.Context) error {
		if err := cliapp.CheckArgs(cc); err != nil {
			return err
		}
		p, err := profile(cc)
		if err != nil {
			return cliapp.Usagef(cc, "%w", err)
		}
		img, err := readImageFlags(cc)
		if err != nil {
			return err
		}
		o := checkpoint.Options{
			Container: cc.Args().Get(0), Image: cc.Args().Get(1), Engine: p, URL: cc.String("url"),
			HealthTimeout: cc.Duration("health-timeout"), RefusedTimeout: cc.Duration("refused-timeout"), QuiesceTimeout: cc.Duration("quiesce-timeout"),
			WakeDeadline: cc.Duration("wake-deadline"), WakeBinary: cc.String("wake-binary"),
			LeaveRunning: cc.Bool("leave-running"), StopAtDump: cc.Bool("stop-at-dump"), Version: version, Progress: os.Stderr,
			OCIArchive: img.OCIArchive, Replace: img.Replace, WorkDir: img.WorkDir, KeepZeroPages: img.KeepZeroPages,
			Compression: img.Compression, Fallback: img.Fallback, SignKey: img.SignKey,
		}
		if o.StopAtDump && o.LeaveRunning {
			return cliapp.Usagef(cc, "--stop-at-dump and --leave-running contradict each other: give one")
		}
		quiet := img.Quiet
		if quiet {
			o.Progress, o.ProgressMode = nil, progress.Quiet
		}
		if o.WakeBinary == "" {
			self, _ := os.Executable()
			o.WakeBinary = filepath.Join(filepath.Dir(self), "rekindle-wake")
		}
		// A signal interrupts the checkpoint, which undoes what it did
		// first; more signals do not cut that short (SIGKILL would).
		sctx, stop := cliapp.InterruptContext(os.Stderr,
			"interrupting the checkpoint: the engine is resumed and nothing half made is kept before oci-checkpoint exits",
			"still undoing (the engine is resumed first; a dump in progress ends first)")
		c, ctx, cancel, err := dial(cc, sctx, stop)
		if err != nil {
			return err
		}
		defer cancel()
		defer c.Close()
		start := time.Now()
		res, err := checkpoint.Create(ctx, c, o)
		if err != nil {
			return err
		}
		if cause := context.Cause(ctx); ctx.Err() != nil && !quiet {
			fmt.Fprintf(os.Stderr, "==> %v after the image was stored: it is kept, and the container left as asked\n", cause)
		}
		where := res.Image
		if res.OCIArchive != "" {
			where = res.OCIArchive
		}
		if !quiet {
			fmt.Fprintf(os.Stderr, "==> checkpoint: %s\n==> wrote %s (%s, %.1f MiB) in %.2fs\n",
				phase.Summary(res.Phases), where, res.Digest, float64(res.Size)/(1<<20), time.Since(start).Seconds())
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

func profile(cc *cli.Context) (engine.Profile, error) {
	p, err := engine.Lookup(cc.String("engine"), cc.Int("port"))
	if err != nil {
		return p, err
	}
	if cc.IsSet("sleep-level") {
		if p, err = engine.WithSleepLevel(p, cc.Int("sleep-level")); err != nil {
			return p, err
		}
	}
	if q := calls(cc, "quiesce"); len(q) > 0 {
		p.Quiesce = q
	}
	if r := calls(cc, "resume"); len(r) > 0 {
		p.Resume, p.ResumeGiven = r, true
	}
	if h := cc.String("health"); h != "" {
		if p.Health, err = engine.ParseCall(h); err != nil {
			return p, err
		}
	}
	if len(p.Quiesce) == 0 || len(p.Resume) == 0 {
		return p, fmt.Errorf("engine %s needs --quiesce and --resume calls", p.Name)
	}
	return p, nil
}
