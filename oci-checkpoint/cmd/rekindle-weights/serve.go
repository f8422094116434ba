package main

import (
	"context"
	"crypto"
	"errors"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"rekindle.local/oci-checkpoint/internal/cliapp"
	"rekindle.local/oci-checkpoint/pkg/weights"
)

var serveCmd = &cli.Command{
	Name:  "serve",
	Usage: "run the service (systemd runs it as rekindle-weights.service)",
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "root", Value: "/run/rekindle-weights", Usage: "sets live in ROOT/sets/NAME (a tmpfs the service mounts and never unmounts)"},
		&cli.StringFlag{Name: "state", Value: "/var/lib/rekindle-weights/sets.json", Usage: "known sets, kept across reboots"},
		&cli.StringFlag{Name: "cdi-dir", Value: "/var/run/cdi", Usage: "where the CDI spec " + weights.CDISpecName + " goes (empty: none)"},
		&cli.StringFlag{Name: "quota", Value: "0", Usage: "memory the sets may take, bytes or with K/M/G/T (0: no limit)"},
		&cli.IntFlag{Name: "readers", Value: 8, Usage: "parallel reads per load"},
		&cli.StringFlag{Name: "chunk", Value: "8M", Usage: "size of each direct read"},
		&cli.BoolFlag{Name: "preload", Usage: "load every known set that is not loaded at start"},
		&cli.StringFlag{Name: "sa-keys", Usage: "PEM file of the Kubernetes API server's service account signing public keys " +
			"(its --service-account-key-file, e.g. /etc/kubernetes/pki/sa.pub): lets allow entries name service accounts (k8s:NAMESPACE/SERVICEACCOUNT)"},
	},
	Action: serve,
}

func serve(cc *cli.Context) error {
	logger := log.New(os.Stderr, "rekindle-weights: ", log.LstdFlags|log.Lmsgprefix)
	quota, err := weights.ParseSize(cc.String("quota"))
	if err != nil {
		return err
	}
	chunk, err := weights.ParseSize(cc.String("chunk"))
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return err
	}
	sock, err := filepath.Abs(cc.String("socket"))
	if err != nil {
		return err
	}
	var saKeys []crypto.PublicKey
	if f := cc.String("sa-keys"); f != "" {
		if saKeys, err = weights.ReadSAKeys(f); err != nil {
			return err
		}
	}
	root := cc.String("root")
	if err := weights.PrepareMount(filepath.Join(root, "sets"), quota, logger.Printf); err != nil {
		return err
	}
	svc, err := weights.Open(weights.Config{
		Root: root, StatePath: cc.String("state"), CDIDir: cc.String("cdi-dir"),
		Hook: []string{exe, "--socket", sock}, SAKeys: saKeys,
		Quota: quota, Readers: cc.Int("readers"), ChunkSize: chunk, Log: logger,
	})
	if err != nil {
		return err
	}
	l, err := weights.Listen(sock)
	if err != nil {
		return err
	}
	srv := svc.Server()
	ctx, stop := cliapp.SignalContext()
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if cc.Bool("preload") {
		for _, st := range svc.List() {
			if st.State == weights.StateKnown {
				go func(name string) {
					if _, err := svc.Load(weights.LoadRequest{Name: name}); err != nil {
						logger.Printf("preload: %v", err)
					}
				}(st.Name)
			}
		}
	}
	logger.Printf("serving on %s (root %s, quota %s, %d service account key(s))", sock, root, quotaText(quota), len(saKeys))
	err = srv.Serve(l)
	os.Remove(sock)
	if errors.Is(err, http.ErrServerClosed) {
		logger.Printf("stopped; the sets stay in %s", filepath.Join(root, "sets"))
		return nil
	}
	return err
}

func quotaText(q int64) string {
	if q <= 0 {
		return "none"
	}
	return weights.HumanSize(q)
}
