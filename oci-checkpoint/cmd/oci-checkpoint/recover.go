package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"rekindle.local/oci-checkpoint/internal/cliapp"
	"rekindle.local/oci-checkpoint/pkg/checkpoint"
)

var recoverCmd = &cli.Command{
	Name:      "recover",
	Usage:     "undo what a killed oci-checkpoint create left: thaw and resume the engine, remove its lease, snapshots, ingests and work directory",
	ArgsUsage: "[CONTAINER...]",
	Description: `A create that is killed outright (SIGKILL, the OOM killer, a crash of the host's session)
cannot undo what it did, as it does on a failure or on SIGINT and SIGTERM: the engine can be left
quiesced (answering 503) and frozen (Paused), and its lease, the rootfs diff's snapshot and ingest
and its work directory stay. create records what it does on the host as it goes (a lease in
containerd's store naming the container and its process, and a record in its work directory),
and the next create of the same container undoes a dead one's leftovers first. recover does the
same without checkpointing: for each CONTAINER named, or with none for every container a killed
create left something of, it unpauses the container, resumes the engine (through the wake helper
that create started, which then stays idle for the next create, or with the profile's resume
calls), stops it instead when the image had been stored and create was to stop it, and removes
the lease, what only the lease held and the work directory. A create still running is left
alone, and named. Exits 0 when nothing was left to undo or all of it was undone, 1 otherwise.

Examples:
  oci-checkpoint recover engine
  oci-checkpoint recover`,
	Flags: []cli.Flag{
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print only errors"},
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
		o := checkpoint.RecoverOptions{Containers: cc.Args().Slice(), Progress: os.Stderr}
		if cc.Bool("quiet") {
			o.Progress = nil
		}
		rs, err := checkpoint.Recover(ctx, c, o)
		if err != nil {
			return err
		}
		var errs []error
		undone := 0
		for _, r := range rs {
			if r.Err != nil {
				errs = append(errs, r.Err)
			} else {
				undone++
			}
		}
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
		if undone == 0 && !cc.Bool("quiet") {
			fmt.Fprintln(os.Stderr, "==> no killed create left anything to undo")
		}
		return nil
	},
}
