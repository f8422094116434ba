package main

import (
	"crypto/ed25519"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"rekindle.local/oci-checkpoint/internal/cliapp"
	"rekindle.local/oci-checkpoint/pkg/annotations"
	"rekindle.local/oci-checkpoint/pkg/checkpoint"
)

// The commands that write a checkpoint image (create, import) share these
// flags, so that they read and check them alike.

// imageOutput is what those flags ask of the image written.
type imageOutput struct {
	OCIArchive    string // --output's PATH; "" stores the image
	Replace       bool
	WorkDir       string
	KeepZeroPages bool
	Compression   string
	Fallback      string
	SignKey       ed25519.PrivateKey
	Quiet, JSON   bool
}

// imageFlags lists the flags; workDir says what --work-dir holds.
func imageFlags(workDir string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "output", Usage: "oci-archive:PATH writes an OCI archive instead of storing the image (its folder must exist)"},
		&cli.BoolFlag{Name: "replace", Usage: "replace a checkpoint image of that name, or the --output file, instead of refusing it (as podman create --replace)"},
		&cli.StringFlag{Name: "work-dir", Usage: workDir + " (needs room for it; default $TMPDIR)"},
		&cli.BoolFlag{Name: "keep-zero-pages", Usage: "store the pages of zeros of the processes' private memory as CRIU dumped them (by default they are left out: a restore maps fresh memory, which reads as zeros)"},
		&cli.StringFlag{Name: "compression", Value: checkpoint.CompressionNone, Usage: "checkpoint layer compression: none (fastest to write; restores with any runtime), pages (the memory pages compressed inside a layer read in place: a fifth of the bytes to read on a first restore; restores only with Rekindle's containerd) or zstd (the whole layer: smallest to push and pull, unpacked at about 1 GB/s before a first restore)"},
		&cli.StringFlag{Name: "fallback", Value: annotations.FallbackNone, Usage: "what a host that cannot restore the image does (CPU flags, GPUs, driver): cold starts the container afresh from its base image, none fails the restore"},
		&cli.StringFlag{Name: "sign-key", Usage: "sign the image with this Ed25519 private key (PEM, PKCS#8: 'openssl genpkey -algorithm ed25519 -out FILE'), for hosts whose containerd requires a signature (checkpoint_restore_require_signature; see docs/operations.md, \"Requiring a signature\")"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print no phases or progress, only errors (and --json's result)"},
		&cli.BoolFlag{Name: "json", Usage: "print the result as JSON on stdout (docs/json.md)"},
	}
}

// readImageFlags reads and checks the flags of imageFlags. The signing
// key is read here, before anything is done: a key that cannot sign fails
// the command at once.
func readImageFlags(cc *cli.Context) (o imageOutput, err error) {
	o = imageOutput{
		Replace: cc.Bool("replace"), WorkDir: cc.String("work-dir"), KeepZeroPages: cc.Bool("keep-zero-pages"),
		Compression: cc.String("compression"), Fallback: cc.String("fallback"), Quiet: cc.Bool("quiet"), JSON: cc.Bool("json"),
	}
	if out := cc.String("output"); out != "" {
		path, ok := strings.CutPrefix(out, "oci-archive:")
		if !ok || path == "" {
			return o, cliapp.Usagef(cc, "--output %q: want oci-archive:PATH", out)
		}
		o.OCIArchive = path
	}
	if err := checkpoint.CheckCompression(o.Compression); err != nil {
		return o, cliapp.Usagef(cc, "--%w", err)
	}
	switch o.Fallback {
	case annotations.FallbackCold, annotations.FallbackNone:
	default:
		return o, cliapp.Usagef(cc, "--fallback %q: want %s or %s", o.Fallback, annotations.FallbackCold, annotations.FallbackNone)
	}
	if f := cc.String("sign-key"); f != "" {
		if o.SignKey, err = checkpoint.LoadSigningKey(f); err != nil {
			return o, cli.Exit(fmt.Sprintf("--sign-key: %v", err), 2)
		}
	}
	return o, nil
}
