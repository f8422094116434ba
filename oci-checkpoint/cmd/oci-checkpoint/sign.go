package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/containerd/containerd/v2/core/leases"
	"github.com/urfave/cli/v2"

	"rekindle.local/oci-checkpoint/internal/cliapp"
	"rekindle.local/oci-checkpoint/pkg/checkpoint"
)

var signCmd = &cli.Command{
	Name:      "sign",
	Usage:     "sign a checkpoint image in containerd's image store, for hosts whose containerd requires a signature",
	ArgsUsage: "IMAGE",
	Description: `Signs the manifest of IMAGE, a checkpoint image in containerd's image store (as
'oci-checkpoint create' stores it, or pulled), with an Ed25519 private key, and stores the
signed manifest under the same name (and CRI's record of the image by its ID, in CRI's
namespace). The signature covers the config's and layers' descriptors and every other
annotation (see docs/operations.md, "Requiring a signature"); a signature the image had is
replaced. The image's digest changes: push it again, and refer to it by the new digest (a
reference by the old one names the unsigned manifest).

Make a key pair with
  openssl genpkey -algorithm ed25519 -out ckpt.key
  openssl pkey -in ckpt.key -pubout -out ckpt.pub
and give ckpt.pub to the restoring hosts (containerd's checkpoint_restore_keys).
'oci-checkpoint create --sign-key FILE' signs as it creates.

Example:
  oci-checkpoint sign --key ckpt.key rekindle.local/ckpt:engine && nerdctl push rekindle.local/ckpt:engine`,
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "key", Usage: "the Ed25519 private key, PEM (PKCS#8), as 'openssl genpkey -algorithm ed25519' writes it"},
		&cli.BoolFlag{Name: "json", Usage: "print the result as JSON on stdout (docs/json.md)"},
	},
	Action: func(cc *cli.Context) error {
		if err := cliapp.CheckArgs(cc); err != nil {
			return err
		}
		if cc.String("key") == "" {
			return cliapp.Usagef(cc, "--key FILE is required: the Ed25519 private key to sign with")
		}
		key, err := checkpoint.LoadSigningKey(cc.String("key"))
		if err != nil {
			return cli.Exit(fmt.Sprintf("--key: %v", err), 2)
		}
		name, err := checkpoint.NormalizeName(cc.Args().First())
		if err != nil {
			return cli.Exit(err, 2)
		}
		c, ctx, cancel, err := connect(cc)
		if err != nil {
			return err
		}
		defer cancel()
		defer c.Close()
		// The signed manifest is written before the image points at it: a
		// lease keeps the garbage collector off it in between.
		ctx, done, err := c.WithLease(ctx, leases.WithRandomID(), leases.WithExpiration(time.Hour))
		if err != nil {
			return err
		}
		defer done(context.WithoutCancel(ctx))
		res, err := checkpoint.Sign(ctx, c.ContentStore(), c.ImageService(), name, key)
		if err != nil {
			return err
		}
		if cc.Bool("json") {
			return cliapp.PrintJSON(res)
		}
		if res.Replaced != "" {
			fmt.Fprintf(os.Stderr, "==> replaced its signature by key %s\n", res.Replaced)
		}
		fmt.Fprintf(os.Stderr, "==> signed %s with key %s\n==> its digest is now %s (was %s): push it again\n",
			res.Image, res.KeyID, res.Digest, res.Previous)
		for _, n := range res.Moved {
			fmt.Fprintf(os.Stderr, "==> CRI's record of the image by its ID (%s) points at the signed manifest too\n", n)
		}
		return nil
	},
}
