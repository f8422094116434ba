package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"rekindle.local/oci-checkpoint/internal/cliapp"
	"rekindle.local/oci-checkpoint/pkg/weights"
)

var loadCmd = &cli.Command{
	Name:      "load",
	Usage:     "load a weight set from safetensors files (or directories of them) and wait until it is loaded",
	ArgsUsage: "NAME FILE|DIR...",
	Flags: []cli.Flag{
		&cli.StringSliceFlag{Name: "allow", Usage: "containers that may map the set, by what the runtime vouches for (repeatable; " +
			"replaces the set's list; a new set without it allows none): k8s:NAMESPACE (a pod's CRI containers), " +
			"k8s:NAMESPACE/SERVICEACCOUNT (needs serve --sa-keys), containerd:NAMESPACE[/NAME] (nerdctl or ctr, not CRI), " +
			"or * (any container); each part a glob"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print no progress"},
	},
	Action: func(cc *cli.Context) error {
		if cc.NArg() < 1 {
			return cli.Exit("usage: rekindle-weights load NAME FILE|DIR... (files may be left out for a known set)", 2)
		}
		c, ctx, cancel := client(cc)
		defer cancel()
		req := weights.LoadRequest{Name: cc.Args().First(), Paths: cc.Args().Tail(),
			Allow: cc.StringSlice("allow"), SetAllow: cc.IsSet("allow")}
		pctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if !cc.Bool("quiet") {
				weights.Progress(pctx, c, req.Name, os.Stderr, isTerminal(os.Stderr))
			}
		}()
		st, err := c.Load(ctx, req)
		stop()
		<-done
		if err != nil {
			return err
		}
		m := st.Manifest
		fmt.Printf("%s loaded: %s in %d file(s) at %s (read in %.2fs, %.2f GB/s)\n",
			st.Name, weights.HumanSize(st.Bytes), len(m.Files), st.Dir, m.LoadSeconds, m.GBps)
		switch {
		case !st.AllowKnown:
			fmt.Fprintf(os.Stderr, "note: %s's allow list is not known: every container is refused until you load it again with --allow\n", st.Name)
		case len(st.Allow) == 0:
			fmt.Fprintf(os.Stderr, "note: %s allows no container: give it --allow entries to map it through its CDI device\n", st.Name)
		}
		return nil
	},
}

var listCmd = &cli.Command{
	Name:  "list",
	Usage: "list the known weight sets",
	Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
	Action: func(cc *cli.Context) error {
		c, ctx, cancel := client(cc)
		defer cancel()
		sets, err := c.List(ctx)
		if err != nil {
			return err
		}
		if cc.Bool("json") {
			return cliapp.PrintJSON(sets)
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "NAME\tSTATE\tSIZE\tLOADS\tMAPPED BY\tSOURCES")
		for _, s := range sets {
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", s.Name, s.State, weights.HumanSize(s.Bytes), s.Loads,
				pids(s.MappedBy), strings.Join(s.Sources, " "))
		}
		return w.Flush()
	},
}

var statusCmd = &cli.Command{
	Name:      "status",
	Usage:     "show one weight set",
	ArgsUsage: "NAME",
	Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
	Action: func(cc *cli.Context) error {
		name, err := oneName(cc, "status NAME [--json]")
		if err != nil {
			return err
		}
		c, ctx, cancel := client(cc)
		defer cancel()
		s, err := c.Status(ctx, name)
		if err != nil {
			return err
		}
		if cc.Bool("json") {
			return cliapp.PrintJSON(s)
		}
		allow := strings.Join(s.Allow, " ")
		switch {
		case !s.AllowKnown:
			allow = "not known: every container is refused until the set is loaded again with --allow"
		case len(s.Allow) == 0:
			allow = "no container (load it again with --allow)"
		}
		fmt.Printf("name:      %s\nstate:     %s\ndir:       %s\nbytes:     %d (%s)\nprogress:  %d\nloads:     %d\nmapped by: %s\nallow:     %s\nsources:   %s\n",
			s.Name, s.State, s.Dir, s.Bytes, weights.HumanSize(s.Bytes), s.Progress, s.Loads, pids(s.MappedBy),
			allow, strings.Join(s.Sources, " "))
		if m := s.Manifest; m != nil {
			fmt.Printf("loaded at: %s in %.2fs (%.2f GB/s)\n", m.LoadedAt, m.LoadSeconds, m.GBps)
		}
		if s.Error != "" {
			fmt.Printf("last error: %s\n", s.Error)
		}
		return nil
	},
}

var evictCmd = &cli.Command{
	Name:      "evict",
	Usage:     "drop a set's contents from memory (it stays known and loads again on demand)",
	ArgsUsage: "NAME",
	Flags:     []cli.Flag{&cli.BoolFlag{Name: "force", Usage: "evict even while processes map it"}},
	Action: func(cc *cli.Context) error {
		name, err := oneName(cc, "evict NAME [--force]")
		if err != nil {
			return err
		}
		c, ctx, cancel := client(cc)
		defer cancel()
		if _, err := c.Evict(ctx, name, cc.Bool("force")); err != nil {
			return err
		}
		fmt.Printf("%s evicted\n", name)
		return nil
	},
}

var forgetCmd = &cli.Command{
	Name:      "forget",
	Usage:     "evict a set and forget it on this host",
	ArgsUsage: "NAME",
	Flags:     []cli.Flag{&cli.BoolFlag{Name: "force", Usage: "forget it even while processes map it"}},
	Action: func(cc *cli.Context) error {
		name, err := oneName(cc, "forget NAME [--force]")
		if err != nil {
			return err
		}
		c, ctx, cancel := client(cc)
		defer cancel()
		if err := c.Forget(ctx, name, cc.Bool("force")); err != nil {
			return err
		}
		fmt.Printf("%s forgotten\n", name)
		return nil
	},
}

var hookCmd = &cli.Command{
	Name:      "hook",
	Usage:     "OCI createRuntime hook (from the CDI spec): the container may map NAME and NAME is loaded",
	ArgsUsage: "NAME",
	Action: func(cc *cli.Context) error {
		name, err := oneName(cc, "hook NAME (runc gives the OCI state on stdin)")
		if err != nil {
			return err
		}
		c, ctx, cancel := client(cc)
		defer cancel()
		return weights.RunHook(ctx, c, name, os.Stdin, os.Stderr)
	},
}

func pids(p []int) string {
	if len(p) == 0 {
		return "-"
	}
	s := make([]string, len(p))
	for i, v := range p {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, ",")
}
