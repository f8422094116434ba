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
	Flags: []cli.Flag{
		&cli.BoolFlag{Name: "json", Usage: "print JSON (an array, empty when there are none)"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print the names only"},
	},
	Action: func(cc *cli.Context) error {
		if cc.NArg() != 0 {
			return cli.Exit("usage: oci-checkpoint ls [--json | --quiet]", 2)
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
			return cliapp.PrintJSON(entries)
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
	Flags: []cli.Flag{
		&cli.BoolFlag{Name: "force", Aliases: []string{"f"}, Usage: "remove images that containers were created from"},
	},
	Action: func(cc *cli.Context) error {
		if cc.NArg() == 0 {
			return cli.Exit("usage: oci-checkpoint rm [--force] IMAGE...", 2)
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
