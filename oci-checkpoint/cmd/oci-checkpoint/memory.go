package main

import (
	"bufio"
	"fmt"
	"os"
	"sort"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/pkg/archive/compression"
	"github.com/urfave/cli/v2"

	"rekindle.local/oci-checkpoint/internal/cliapp"
	"rekindle.local/oci-checkpoint/pkg/checkpoint"
	"rekindle.local/oci-checkpoint/pkg/memory"
	"rekindle.local/oci-checkpoint/pkg/registry"
)

var memoryCmd = &cli.Command{
	Name:      "memory",
	Usage:     "show what a local checkpoint image's memory pages hold: each process's bytes and its biggest mappings",
	ArgsUsage: "IMAGE",
	Description: `Reads CRIU's images (pstree, mm, pagemap, files) from the checkpoint layer in containerd's
content store, streaming past the pages; nothing is extracted to disk but those small files, in a
temporary folder. Pull a registry image first (nerdctl pull IMAGE).

Examples:
  oci-checkpoint memory rekindle.local/ckpt:engine
  oci-checkpoint memory --json --top 3 rekindle.local/ckpt:engine | jq '.processes[0].mappings'`,
	Flags: []cli.Flag{
		&cli.BoolFlag{Name: "json", Usage: "print JSON (docs/json.md)"},
		&cli.IntFlag{Name: "top", Value: 8, Usage: "mappings shown per process"},
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
		name, m, local, err := checkpoint.Manifest(ctx, c, cc.Args().First(), registry.Options{})
		if err != nil {
			return err
		}
		if !local {
			return cli.Exit(fmt.Sprintf("%s is not in containerd's image store: pull it first (nerdctl pull %s)", name, name), 1)
		}
		if len(m.Layers) == 0 {
			return cli.Exit(fmt.Sprintf("%s has no layer", name), 1)
		}
		layer := m.Layers[len(m.Layers)-1]
		ra, err := c.ContentStore().ReaderAt(ctx, layer)
		if err != nil {
			return fmt.Errorf("%s: layer %s: %w", name, layer.Digest, err)
		}
		defer ra.Close()
		r, err := compression.DecompressStream(bufio.NewReaderSize(content.NewReader(ra), 1<<20))
		if err != nil {
			return fmt.Errorf("%s: layer %s: %w", name, layer.Digest, err)
		}
		defer r.Close()
		dir, err := os.MkdirTemp("", "oci-checkpoint-memory-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		l, err := memory.Extract(r, dir)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		rep, err := memory.Read(dir, l)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if cc.Bool("json") {
			rep.SchemaVersion, rep.Image = checkpoint.SchemaVersion, name
			return cliapp.PrintJSON(rep)
		}
		printMemory(name, rep, cc.Int("top"))
		return nil
	},
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func printMemory(name string, r *memory.Report, top int) {
	var sum int64
	for _, p := range r.Processes {
		sum += p.Bytes
	}
	fmt.Printf("%s: %s of pages files (%s of them pages of zeros); %s of them private pages of %d processes (the rest: shared memory)\n",
		name, mib(r.PagesFiles), mib(r.ZeroPages), mib(sum), len(r.Processes))
	names := make([]string, 0, len(r.Others))
	for n := range r.Others {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return r.Others[names[i]] > r.Others[names[j]] })
	for _, n := range names {
		fmt.Printf("  %s: %s (not pages: CRIU stores it whole)\n", n, mib(r.Others[n]))
	}
	for _, p := range r.Processes {
		fmt.Printf("  pid %d %s: %s (%s zeros)\n", p.PID, p.Comm, mib(p.Bytes), mib(p.Zero))
		for i, m := range p.Mappings {
			if i == top {
				fmt.Printf("    ... %d more mappings\n", len(p.Mappings)-top)
				break
			}
			res := m.Resource
			if res == "" {
				res = "anonymous"
			}
			fmt.Printf("    %12s  %12s zeros  %x-%x %s %s\n", mib(m.Bytes), mib(m.Zero), m.Start, m.End, m.Prot, res)
		}
	}
}
