package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"rekindle.local/oci-checkpoint/internal/cliapp"
	"rekindle.local/oci-checkpoint/pkg/checkpoint"
)

var lsCmd = &cli.Command{
	Name:    "ls",
	Aliases: []string{"list"},
	Usage:   "list the checkpoint images of the image store: engine, size, created, host facts",
	Description: `Lists the images of containerd's image store (in --namespace) whose manifest carries a
checkpoint annotation, made by oci-checkpoint or by another checkpointing tool: name, engine, size
(manifest, config and layers), when it was checkpointed, and the GPUs, driver and CPU it was made on.

Examples:
  oci-checkpoint ls
  oci-checkpoint ls --json | jq -r '.images[] | select(.engine == "vllm") | .image'`,
	Flags: []cli.Flag{
		&cli.BoolFlag{Name: "json", Usage: "print JSON (docs/json.md): the images in .images, empty when there are none"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print the names only"},
	},
	Action: func(cc *cli.Context) error {
		if err := cliapp.CheckArgs(cc); err != nil {
			return err
		}
		c, ctx, cancel, err := connect(cc)
		if err != nil {
			return err
		}
		defer cancel()
		defer c.Close()
		entries, err := checkpoint.List(ctx, c)
		if err != nil {
			return err
		}
		switch {
		case cc.Bool("json"):
			return cliapp.PrintJSON(checkpoint.NewListing(entries))
		case cc.Bool("quiet"):
			for _, e := range entries {
				fmt.Println(e.Name)
			}
			return nil
		}
		return checkpoint.WriteTable(os.Stdout, entries)
	},
}

var rmCmd = &cli.Command{
	Name:      "rm",
	Aliases:   []string{"rmi"},
	Usage:     "remove checkpoint images from the image store (refuses any other image)",
	ArgsUsage: "IMAGE...",
	Description: `Removes the checkpoint images named from containerd's image store, and their content once
no other image holds it, before it returns. Every name is checked first, and if one is refused
nothing is removed: a name that is not in the store, an image that is no checkpoint image (remove
those with nerdctl rmi), and one a container was created from (unless --force).

Examples:
  oci-checkpoint rm rekindle.local/ckpt:engine
  oci-checkpoint ls -q | xargs oci-checkpoint rm`,
	Flags: []cli.Flag{
		&cli.BoolFlag{Name: "force", Aliases: []string{"f"}, Usage: "remove images that containers were created from"},
	},
	Action: func(cc *cli.Context) error {
		if err := cliapp.CheckArgs(cc); err != nil {
			return err
		}
		c, ctx, cancel, err := connect(cc)
		if err != nil {
			return err
		}
		defer cancel()
		defer c.Close()
		removed, err := checkpoint.Remove(ctx, c, cc.Args().Slice(), cc.Bool("force"))
		for _, n := range removed {
			fmt.Printf("removed %s\n", n)
		}
		return err
	},
}
