package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"rekindle.local/oci-checkpoint/internal/cliapp"
	"rekindle.local/oci-checkpoint/pkg/annotations"
	"rekindle.local/oci-checkpoint/pkg/checkpoint"
	"rekindle.local/oci-checkpoint/pkg/phase"
	"rekindle.local/oci-checkpoint/pkg/registry"
)

// inspect reads the report on cc's IMAGE.
func inspect(cc *cli.Context) (*checkpoint.Report, error) {
	c, ctx, cancel, err := connect(cc)
	if err != nil {
		return nil, err
	}
	defer cancel()
	defer c.Close()
	return checkpoint.Inspect(ctx, c, cc.Args().First(), registry.Options{HostsDirs: cc.StringSlice("hosts-dir")})
}

// registryFlags are the flags of the commands that may read a manifest from
// a registry; they mean what nerdctl's do.
func registryFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{
			Name:  "hosts-dir",
			Value: cli.NewStringSlice(registry.DefaultHostsDirs...),
			Usage: "a folder of HOST[:PORT]/hosts.toml (containerd style: mirrors, CA, plain HTTP) or HOST[:PORT]/{ca.crt,client.cert,client.key} " +
				"(docker style), as nerdctl's --hosts-dir; repeat it (or separate with commas) to search several, in order; given, it replaces the defaults",
		},
	}
}

// registryHelp is the part of inspect's and check's help that says how a
// registry is reached.
const registryHelp = `An image that is not in containerd's image store is looked up in its registry, manifest only,
the way nerdctl pulls: HOST[:PORT]/hosts.toml under the --hosts-dir folders (mirrors, TLS,
plain HTTP), credentials from the docker config ($DOCKER_CONFIG/config.json, default
~/.docker/config.json, or the credential helper it names; 'nerdctl login' writes it), and plain
HTTP for a registry on loopback (localhost, 127.0.0.0/8, ::1).`

func printReport(r *checkpoint.Report) {
	fmt.Printf("Image:       %s (%s)\n", r.Image, map[bool]string{true: "local", false: "registry, manifest only"}[r.Local])
	if r.Engine == "" {
		fmt.Printf("Engine:      not recorded (import records it with --engine)\n")
	} else if v := r.Annotations[annotations.EngineVersion]; v != "" {
		fmt.Printf("Engine:      %s (%s)\n", r.Engine, v)
	} else {
		fmt.Printf("Engine:      %s\n", r.Engine)
	}
	if r.BaseDigest != "" {
		fmt.Printf("Base image:  %s (digest %s)\n", r.BaseImage, r.BaseDigest)
	} else {
		fmt.Printf("Base image:  %s (no digest recorded)\n", r.BaseImage)
	}
	fmt.Printf("Created:     %s\n", r.Created)
	if r.Annotations[annotations.Source] == annotations.SourceCRIArchive {
		fmt.Printf("Made by:     import of a CRI checkpoint archive (kubelet checkpoint API, crictl checkpoint): not quiesced, no wake helper\n")
	}
	fmt.Printf("Layer:       %s (%.1f MiB, compression %s)\n", r.LayerDigest, float64(r.LayerSize)/(1<<20), r.Compression)
	fmt.Printf("CPU:         %s (%s)\n", r.Annotations[annotations.CPUModel], r.Annotations[annotations.CPUFlags])
	fmt.Printf("Kernel:      %s   CRIU: %s\n", r.Annotations[annotations.Kernel], r.Annotations[annotations.CRIU])
	if len(r.GPUs) > 0 {
		fmt.Printf("GPUs:        %d x %s, driver %s, CUDA %s\n", len(r.GPUs), r.Annotations[annotations.GPUModel], r.Annotations[annotations.Driver], r.Annotations[annotations.CUDA])
		for _, g := range r.GPUs {
			fmt.Printf("             %s\n", g.UUID)
		}
	} else {
		fmt.Printf("GPUs:        none\n")
	}
	if len(r.Phases) > 0 {
		fmt.Printf("Checkpoint:  %s\n", phase.Summary(r.Phases))
	}
	fallback := r.Annotations[annotations.Fallback]
	if fallback == "" {
		fallback = annotations.FallbackNone
	}
	fmt.Printf("Fallback:    %s\n", fallback)
	if id := r.Annotations[annotations.SignatureKey]; id != "" {
		fmt.Printf("Signed by:   key %s (checked by a host that requires a signature, not here)\n", id)
	} else {
		fmt.Printf("Signed by:   nobody (oci-checkpoint sign --key FILE signs it)\n")
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
	Description: `Prints what a checkpoint image's manifest records: the engine and its version, the base
image, the checkpoint layer and its compression, the host facts (CPU, kernel, CRIU, GPUs, driver),
the phase times of its checkpoint, its fallback and signature, and whether this host can restore it
(as check says).

` + registryHelp + `

Examples:
  oci-checkpoint inspect rekindle.local/ckpt:engine
  oci-checkpoint inspect --json registry.example/engine:ckpt | jq .phases`,
	Flags: append([]cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON (docs/json.md)"}}, registryFlags()...),
	Action: func(cc *cli.Context) error {
		if err := cliapp.CheckArgs(cc); err != nil {
			return err
		}
		r, err := inspect(cc)
		if err != nil {
			return err
		}
		if cc.Bool("json") {
			return cliapp.PrintJSON(r)
		}
		printReport(r)
		return nil
	},
}
