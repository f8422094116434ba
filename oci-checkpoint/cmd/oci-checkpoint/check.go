package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"rekindle.local/oci-checkpoint/internal/cliapp"
	"rekindle.local/oci-checkpoint/pkg/checkpoint"
	"rekindle.local/oci-checkpoint/pkg/registry"
	"rekindle.local/oci-checkpoint/pkg/restorepolicy"
)

// check's exit statuses: a script (an init container, a scheduler) tells
// "this host cannot restore it" from "the check could not be made".
const (
	checkRestorable  = 0
	checkCannot      = 1
	checkCouldNotRun = 2
)

var checkCmd = &cli.Command{
	Name: "check",
	Usage: "say whether a restore of IMAGE on this host would go ahead, deciding as the restore does: exit 0 it would, " +
		"1 it would be refused (the reasons and their fixes are printed), 2 the check could not be made (no such image, registry unreachable, bad input)",
	ArgsUsage: "IMAGE",
	Description: `Makes, without pulling IMAGE, the decisions Rekindle's containerd makes before it restores it,
so that exit 0 means the restore will not refuse it:

  policy     the host's restore policy: IMAGE's name must match a pattern of checkpoint_restore_images
             and, where checkpoint_restore_require_signature is true, its manifest be signed by a key of
             checkpoint_restore_keys (read from the configuration of the containerd serving --address,
             or --containerd-config, and the files it imports; decided by the restore engine's own code)
  base       the base image the checkpoint pins by digest: in the local image store, or given by its
             registry (the restore pulls it)
  host       what the manifest records against this host (architecture, CPU vendor and flags, CRIU,
             GPUs and their model, NVIDIA driver); a recorded value not of its form (a CRIU version
             "banana", a GPU count -3) is refused, naming the annotation and the form

A script (an init container, a scheduler) tells "this host cannot restore it" (exit 1, one reason a
line: policy:, signature:, base:, arch:, cpu:, criu:, gpu:, driver:, format:) from "the check could
not be made" (exit 2). The policy is the configuration file's: containerd reads it at start, so a file
changed since containerd started may differ from what it enforces until it restarts.

` + registryHelp + `

Examples:
  oci-checkpoint check registry.example/engine:ckpt && nerdctl run -d registry.example/engine:ckpt
  oci-checkpoint check --json --hosts-dir /etc/containerd/certs.d registry.example/engine:ckpt
  oci-checkpoint check --containerd-config /run/k3s/containerd/config.toml registry.example/engine:ckpt`,
	Flags: append([]cli.Flag{
		&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		&cli.StringFlag{Name: "containerd-config", EnvVars: []string{"CONTAINERD_CONFIG"},
			Usage:       "the configuration file the restoring containerd runs with (containerd --config), where the restore policy is read",
			DefaultText: "that of the containerd process serving --address, else " + restorepolicy.DefaultConfig},
	}, registryFlags()...),
	Action: func(cc *cli.Context) error {
		if err := cliapp.CheckArgs(cc); err != nil {
			return err
		}
		couldNot := func(err error) error {
			var ec cli.ExitCoder
			if errors.As(err, &ec) {
				return cli.Exit(err.Error(), checkCouldNotRun)
			}
			return cli.Exit(fmt.Sprintf("could not check: %v", err), checkCouldNotRun)
		}
		file := cc.String("containerd-config")
		if file == "" {
			file = restorepolicy.DefaultConfig
			if f, ok := restorepolicy.Running(cc.String("address")); ok {
				file = f
			}
		}
		cfg, err := restorepolicy.Load(file)
		if err != nil {
			return couldNot(fmt.Errorf("%w (--containerd-config names the file containerd runs with)", err))
		}
		r, err := inspect(cc)
		if err != nil {
			return couldNot(err)
		}
		c, ctx, cancel, err := connect(cc)
		if err != nil {
			return couldNot(err)
		}
		defer cancel()
		defer c.Close()
		if err := checkpoint.CheckRestore(ctx, c, r, cfg, registry.Options{HostsDirs: cc.StringSlice("hosts-dir")}); err != nil {
			return couldNot(err)
		}
		if cc.Bool("json") {
			if err := cliapp.PrintJSON(r); err != nil {
				return err
			}
		}
		if !r.Restorable {
			msg := fmt.Sprintf("this host cannot restore %s:\n  %s", r.Image, strings.Join(r.Problems, "\n  "))
			for _, n := range r.Notes {
				msg += "\n  note: " + n
			}
			return cli.Exit(msg, checkCannot)
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
