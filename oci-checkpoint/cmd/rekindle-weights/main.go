// rekindle-weights keeps named sets of safetensors weights in shared
// memory for inference engines to map, across checkpoint and restore.
// The work is in pkg/weights; this file wires flags. See docs/weights.md.
package main

import (
	"context"
	"os"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"rekindle.local/oci-checkpoint/internal/cliapp"
	"rekindle.local/oci-checkpoint/pkg/weights"
)

var version = "dev"

func main() {
	cliapp.Run(&cli.App{
		Name:    "rekindle-weights",
		Usage:   "keep engine weight sets in shared memory, loaded once per host",
		Version: version,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "socket", Value: "/run/rekindle-weights.sock", EnvVars: []string{"REKINDLE_WEIGHTS_SOCKET"}, Usage: "the service's API socket"},
		},
		Commands: []*cli.Command{serveCmd, loadCmd, listCmd, statusCmd, evictCmd, forgetCmd, hookCmd},
	})
}

func client(cc *cli.Context) (*weights.Client, context.Context, context.CancelFunc) {
	ctx, cancel := cliapp.SignalContext()
	return weights.NewClient(cc.String("socket")), ctx, cancel
}

func oneName(cc *cli.Context, usage string) (string, error) {
	if cc.NArg() != 1 {
		return "", cli.Exit("usage: rekindle-weights "+usage, 2)
	}
	return cc.Args().First(), nil
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
