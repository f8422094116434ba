// oci-checkpoint turns a running inference engine container into a
// checkpoint image that `nerdctl run` restores on Rekindle's containerd,
// and says whether a host can restore one.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/urfave/cli/v2"

	"rekindle.local/oci-checkpoint/internal/cliapp"
)

var version = "dev"

func main() {
	cliapp.Run(newApp())
}

// newApp is oci-checkpoint's command line; every usage error exits 2 with
// the command's usage line (cliapp.Strict).
func newApp() *cli.App {
	app := &cli.App{
		Name:    "oci-checkpoint",
		Usage:   "checkpoint inference engine containers into OCI images that restore with nerdctl run",
		Version: version,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "address", Aliases: []string{"a"}, Value: "/run/containerd/containerd.sock", EnvVars: []string{"CONTAINERD_ADDRESS"}, Usage: "containerd socket"},
			&cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, Value: "default", EnvVars: []string{"CONTAINERD_NAMESPACE"}, Usage: "containerd namespace"},
		},
		Commands: []*cli.Command{createCmd, recoverCmd, importCmd, signCmd, inspectCmd, checkCmd, memoryCmd, lsCmd, rmCmd},
	}
	cliapp.Strict(app)
	return app
}

func connect(cc *cli.Context) (*client.Client, context.Context, context.CancelFunc, error) {
	ctx, cancel := cliapp.SignalContext()
	return dial(cc, ctx, cancel)
}

// dial connects to containerd for a command that runs under ctx (cancel
// ends it); on failure it calls cancel.
func dial(cc *cli.Context, ctx context.Context, cancel func()) (*client.Client, context.Context, context.CancelFunc, error) {
	addr := cc.String("address")
	if _, err := os.Stat(addr); err != nil {
		cancel()
		return nil, nil, nil, fmt.Errorf("no containerd socket at %s: start containerd, or pass --address / CONTAINERD_ADDRESS", addr)
	}
	c, err := client.New(addr, client.WithTimeout(10*time.Second))
	if err != nil {
		cancel()
		return nil, nil, nil, fmt.Errorf("connect to containerd at %s: %w", addr, err)
	}
	ctx = namespaces.WithNamespace(ctx, cc.String("namespace"))
	return c, ctx, cancel, nil
}
