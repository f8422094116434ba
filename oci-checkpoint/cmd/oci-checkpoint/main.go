// oci-checkpoint turns a running inference engine container into a
// checkpoint image that `nerdctl run` restores on Rekindle's containerd,
// and says whether a host can restore one.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/urfave/cli/v2"

	"rekindle.local/oci-checkpoint/pkg/checkpoint"
	"rekindle.local/oci-checkpoint/pkg/engine"
	"rekindle.local/oci-checkpoint/pkg/hostinfo"
)

var version = "dev"

func main() {
	app := &cli.App{
		Name:    "oci-checkpoint",
		Usage:   "checkpoint inference engine containers into OCI images that restore with nerdctl run",
		Version: version,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "address", Aliases: []string{"a"}, Value: "/run/containerd/containerd.sock", EnvVars: []string{"CONTAINERD_ADDRESS"}, Usage: "containerd socket"},
			&cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, Value: "default", EnvVars: []string{"CONTAINERD_NAMESPACE"}, Usage: "containerd namespace"},
		},
		Commands: []*cli.Command{createCmd, inspectCmd, checkCmd},
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "oci-checkpoint: error:", err)
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			os.Exit(ec.ExitCode())
		}
		os.Exit(1)
	}
}

func connect(cc *cli.Context) (*client.Client, context.Context, context.CancelFunc, error) {
	addr := cc.String("address")
	if _, err := os.Stat(addr); err != nil {
		return nil, nil, nil, fmt.Errorf("no containerd socket at %s: start containerd, or pass --address / CONTAINERD_ADDRESS", addr)
	}
	c, err := client.New(addr, client.WithTimeout(10*time.Second))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("connect to containerd at %s: %w", addr, err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx = namespaces.WithNamespace(ctx, cc.String("namespace"))
	return c, ctx, cancel, nil
}

var createCmd = &cli.Command{
	Name:      "create",
	Usage:     "quiesce a running engine container, checkpoint it and store it as an image",
	ArgsUsage: "CONTAINER IMAGE",
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "engine", Value: "sglang", Usage: "engine profile: " + strings.Join(engine.Names, ", ")},
		&cli.IntFlag{Name: "port", Usage: "engine HTTP port inside the container (default: sglang 30000, vllm 8000)"},
		&cli.StringFlag{Name: "url", Usage: "reach the engine at this URL from the host instead of inside the container's network namespace"},
		&cli.StringSliceFlag{Name: "quiesce", Usage: "quiesce call, 'POST /path [JSON]' or 'exec COMMAND'; replaces the profile's (repeatable)"},
		&cli.StringSliceFlag{Name: "resume", Usage: "resume call, same forms; replaces the profile's (repeatable)"},
		&cli.StringFlag{Name: "health", Usage: "health call, e.g. 'GET /health'"},
		&cli.DurationFlag{Name: "health-timeout", Value: 10 * time.Minute, Usage: "how long to wait for the engine to be healthy"},
		&cli.DurationFlag{Name: "quiesce-timeout", Value: 5 * time.Minute, Usage: "how long the quiesce calls may take"},
		&cli.DurationFlag{Name: "wake-deadline", Value: 10 * time.Minute, Usage: "how long the helper retries the resume calls after a restore"},
		&cli.StringFlag{Name: "wake-binary", Usage: "the static rekindle-wake to inject (default: beside oci-checkpoint)"},
		&cli.BoolFlag{Name: "leave-running", Usage: "resume the engine after the dump instead of stopping the container"},
		&cli.StringFlag{Name: "output", Usage: "oci-archive:PATH writes an OCI archive instead of storing the image"},
		&cli.StringFlag{Name: "work-dir", Usage: "where the checkpoint is assembled (needs room for it; default $TMPDIR)"},
		&cli.BoolFlag{Name: "json", Usage: "print the result as JSON on stdout"},
	},
	Action: func(cc *cli.Context) error {
		if cc.NArg() != 2 {
			return cli.Exit("usage: oci-checkpoint create [flags] CONTAINER IMAGE", 2)
		}
		p, err := profile(cc)
		if err != nil {
			return cli.Exit(err, 2)
		}
		o := checkpoint.Options{
			Container: cc.Args().Get(0), Image: cc.Args().Get(1), Engine: p, URL: cc.String("url"),
			HealthTimeout: cc.Duration("health-timeout"), QuiesceTimeout: cc.Duration("quiesce-timeout"),
			WakeDeadline: cc.Duration("wake-deadline"), WakeBinary: cc.String("wake-binary"),
			LeaveRunning: cc.Bool("leave-running"), WorkDir: cc.String("work-dir"), Progress: os.Stderr,
		}
		if out := cc.String("output"); out != "" {
			path, ok := strings.CutPrefix(out, "oci-archive:")
			if !ok || path == "" {
				return cli.Exit(fmt.Sprintf("--output %q: want oci-archive:PATH", out), 2)
			}
			o.OCIArchive = path
		}
		if o.WakeBinary == "" {
			self, _ := os.Executable()
			o.WakeBinary = filepath.Join(filepath.Dir(self), "rekindle-wake")
		}
		c, ctx, cancel, err := connect(cc)
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
		var parts []string
		for _, ph := range res.Phases {
			parts = append(parts, fmt.Sprintf("%s %.2fs", ph.Name, ph.Seconds))
		}
		where := res.Image
		if res.OCIArchive != "" {
			where = res.OCIArchive
		}
		fmt.Fprintf(os.Stderr, "==> checkpoint: %s\n==> wrote %s (%s, %.1f MiB) in %.2fs\n",
			strings.Join(parts, "  "), where, res.Digest, float64(res.Size)/(1<<20), time.Since(start).Seconds())
		if cc.Bool("json") {
			return printJSON(res)
		}
		return nil
	},
}

func profile(cc *cli.Context) (engine.Profile, error) {
	p, err := engine.Lookup(cc.String("engine"), cc.Int("port"))
	if err != nil {
		return p, err
	}
	if q := cc.StringSlice("quiesce"); len(q) > 0 {
		if p.Quiesce, err = parseCalls(q); err != nil {
			return p, err
		}
	}
	if r := cc.StringSlice("resume"); len(r) > 0 {
		if p.Resume, err = parseCalls(r); err != nil {
			return p, err
		}
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

func parseCalls(ss []string) ([]engine.Call, error) {
	var out []engine.Call
	for _, s := range ss {
		c, err := engine.ParseCall(s)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// report is what inspect and check print.
type report struct {
	Image       string             `json:"image"`
	Local       bool               `json:"local"`
	Checkpoint  bool               `json:"checkpoint"`
	LayerSize   int64              `json:"layer_size"`
	LayerDigest string             `json:"layer_digest"`
	Engine      string             `json:"engine,omitempty"`
	BaseImage   string             `json:"base_image,omitempty"`
	Created     string             `json:"created,omitempty"`
	GPUs        []string           `json:"gpus"`
	Phases      map[string]float64 `json:"phases,omitempty"`
	Annotations map[string]string  `json:"annotations"`
	Restorable  bool               `json:"restorable_here"`
	Problems    []string           `json:"problems"`
	Notes       []string           `json:"notes"`
}

func inspect(cc *cli.Context) (*report, error) {
	if cc.NArg() != 1 {
		return nil, cli.Exit("usage: oci-checkpoint "+cc.Command.Name+" IMAGE", 2)
	}
	c, ctx, cancel, err := connect(cc)
	if err != nil {
		return nil, err
	}
	defer cancel()
	defer c.Close()
	name, m, local, err := checkpoint.Manifest(ctx, c, cc.Args().First())
	if err != nil {
		return nil, err
	}
	ann := m.Annotations
	r := &report{Image: name, Local: local, Annotations: ann, GPUs: []string{}, Problems: []string{}, Notes: []string{}}
	_, r.Checkpoint = ann["org.criu.checkpoint.container.name"]
	if _, ok := ann["io.kubernetes.cri-o.annotations.checkpoint.name"]; ok {
		r.Checkpoint = true
	}
	if !r.Checkpoint {
		return r, fmt.Errorf("%s is not a checkpoint image (no checkpoint annotation on its manifest)", name)
	}
	for _, l := range m.Layers {
		r.LayerSize += l.Size
		r.LayerDigest = l.Digest.String()
	}
	r.Engine, r.BaseImage, r.Created = ann[hostinfo.AnnotEngine], ann[hostinfo.AnnotSourceImage], ann[hostinfo.AnnotCreated]
	if u := ann[hostinfo.AnnotGPUUUIDs]; u != "" {
		r.GPUs = strings.Split(u, ",")
	}
	r.Phases = checkpoint.Phases(ann, hostinfo.AnnotPhases)
	problems, notes := hostinfo.Check(ann, hostinfo.Read())
	for _, p := range problems {
		r.Problems = append(r.Problems, p.String())
	}
	r.Notes = append(r.Notes, notes...)
	r.Restorable = len(problems) == 0
	return r, nil
}

func printReport(r *report) {
	fmt.Printf("Image:       %s (%s)\n", r.Image, map[bool]string{true: "local", false: "registry, manifest only"}[r.Local])
	fmt.Printf("Engine:      %s\n", r.Engine)
	fmt.Printf("Base image:  %s\n", r.BaseImage)
	fmt.Printf("Created:     %s\n", r.Created)
	fmt.Printf("Layer:       %s (%.1f MiB)\n", r.LayerDigest, float64(r.LayerSize)/(1<<20))
	fmt.Printf("CPU:         %s (%s)\n", r.Annotations[hostinfo.AnnotCPUModel], r.Annotations[hostinfo.AnnotCPUFlags])
	fmt.Printf("Kernel:      %s   CRIU: %s\n", r.Annotations[hostinfo.AnnotKernel], r.Annotations[hostinfo.AnnotCRIU])
	if len(r.GPUs) > 0 {
		fmt.Printf("GPUs:        %d x %s, driver %s, CUDA %s\n", len(r.GPUs), r.Annotations[hostinfo.AnnotGPUModel], r.Annotations[hostinfo.AnnotDriver], r.Annotations[hostinfo.AnnotCUDA])
		for _, g := range r.GPUs {
			fmt.Printf("             %s\n", g)
		}
	} else {
		fmt.Printf("GPUs:        none\n")
	}
	if len(r.Phases) > 0 {
		var names []string
		for n := range r.Phases {
			names = append(names, n)
		}
		sort.Strings(names)
		var parts []string
		for _, n := range names {
			parts = append(parts, fmt.Sprintf("%s %.2fs", n, r.Phases[n]))
		}
		fmt.Printf("Checkpoint:  %s\n", strings.Join(parts, "  "))
	}
	if r.Restorable {
		fmt.Printf("This host:   can restore it\n")
	} else {
		fmt.Printf("This host:   CANNOT restore it\n")
	}
	for _, p := range r.Problems {
		fmt.Printf("  - %s\n", p)
	}
	for _, n := range r.Notes {
		fmt.Printf("  note: %s\n", n)
	}
}

var inspectCmd = &cli.Command{
	Name:      "inspect",
	Usage:     "show a checkpoint image's engine, host facts, GPUs, sizes and phase times, from its manifest",
	ArgsUsage: "IMAGE",
	Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
	Action: func(cc *cli.Context) error {
		r, err := inspect(cc)
		if err != nil {
			return err
		}
		if cc.Bool("json") {
			return printJSON(r)
		}
		printReport(r)
		return nil
	},
}

var checkCmd = &cli.Command{
	Name:      "check",
	Usage:     "exit non-zero, saying why, when this host cannot restore IMAGE (reads the manifest only)",
	ArgsUsage: "IMAGE",
	Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
	Action: func(cc *cli.Context) error {
		r, err := inspect(cc)
		if err != nil {
			return err
		}
		if cc.Bool("json") {
			printJSON(r)
		}
		if !r.Restorable {
			return cli.Exit(fmt.Sprintf("this host cannot restore %s:\n  %s", r.Image, strings.Join(r.Problems, "\n  ")), 1)
		}
		if !cc.Bool("json") {
			fmt.Printf("%s: this host can restore it\n", r.Image)
			for _, n := range r.Notes {
				fmt.Printf("  note: %s\n", n)
			}
		}
		return nil
	},
}
