// rekindle-weights keeps named sets of safetensors weights in shared
// memory for inference engines to map, across checkpoint and restore.
// The work is in pkg/weights; this file wires flags. See docs/weights.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"rekindle.local/oci-checkpoint/pkg/weights"
)

var version = "dev"

func main() {
	app := &cli.App{
		Name:    "rekindle-weights",
		Usage:   "keep engine weight sets in shared memory, loaded once per host",
		Version: version,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "socket", Value: "/run/rekindle-weights.sock", EnvVars: []string{"REKINDLE_WEIGHTS_SOCKET"}, Usage: "the service's API socket"},
		},
		Commands: []*cli.Command{serveCmd, loadCmd, listCmd, statusCmd, evictCmd, forgetCmd, hookCmd},
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "rekindle-weights: error:", err)
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			os.Exit(ec.ExitCode())
		}
		os.Exit(1)
	}
}

func client(cc *cli.Context) (*weights.Client, context.Context, context.CancelFunc) {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	return weights.NewClient(cc.String("socket")), ctx, cancel
}

func oneName(cc *cli.Context, usage string) (string, error) {
	if cc.NArg() != 1 {
		return "", cli.Exit("usage: rekindle-weights "+usage, 2)
	}
	return cc.Args().First(), nil
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
