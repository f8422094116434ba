package checkpoint

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// nerdctlNameLabel is where nerdctl keeps a container's name.
const nerdctlNameLabel = "nerdctl/name"

// FindContainer resolves ref as a container ID, a nerdctl name or a unique
// ID prefix, as nerdctl does, or as NAMESPACE/POD/CONTAINER, a Kubernetes
// pod's container.
func FindContainer(ctx context.Context, c *client.Client, ref string) (client.Container, error) {
	if ctr, ok, err := findPodContainer(ctx, c, ref); ok {
		return ctr, err
	}
	if ctr, err := c.LoadContainer(ctx, ref); err == nil {
		return ctr, nil
	} else if !errdefs.IsNotFound(err) {
		return nil, err
	}
	byName, err := c.Containers(ctx, fmt.Sprintf("labels.%q==%s", nerdctlNameLabel, ref))
	if err != nil {
		return nil, err
	}
	if len(byName) == 1 {
		return byName[0], nil
	}
	all, err := c.Containers(ctx)
	if err != nil {
		return nil, err
	}
	var match []client.Container
	for _, ctr := range all {
		if strings.HasPrefix(ctr.ID(), ref) {
			match = append(match, ctr)
		}
	}
	switch len(match) {
	case 1:
		return match[0], nil
	case 0:
		return nil, fmt.Errorf("no container %q (by ID, name or ID prefix): see 'nerdctl ps': %w", ref, errdefs.ErrNotFound)
	}
	return nil, fmt.Errorf("%q matches %d containers: give more of the ID: %w", ref, len(match), errdefs.ErrInvalidArgument)
}

// NetnsHTTP is an HTTP client whose connections are opened inside the
// network namespace of pid, so the engine is reached on its own loopback
// whatever network the container has.
func NetnsHTTP(pid uint32) *http.Client {
	path := fmt.Sprintf("/proc/%d/ns/net", pid)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		err := ns.WithNetNSPath(path, func(ns.NetNS) error {
			var err error
			conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}
	// No keep-alive: an idle connection left open would be an established
	// TCP connection in the dump, which CRIU refuses.
	return &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true, Proxy: nil}}
}

// execIn runs args in the task's container as its own process runs (the
// spec's user, capabilities and seccomp profile), waits for it and returns
// its combined output. Nothing run this way gets more than the container
// has: it may be in the dump, and the restore refuses a process with more
// than the new container's spec grants (guard/check/privileges.go).
func execIn(ctx context.Context, task client.Task, spec *specs.Spec, id string, args []string, timeout time.Duration) (string, error) {
	p := *spec.Process
	p.Args = args
	p.Terminal = false
	var out bytes.Buffer
	proc, err := task.Exec(ctx, id, &p, cio.NewCreator(cio.WithStreams(nil, &out, &out)))
	if err != nil {
		return "", fmt.Errorf("exec %s in the container: %w", args[0], err)
	}
	defer proc.Delete(context.WithoutCancel(ctx), client.WithProcessKill)
	statusC, err := proc.Wait(ctx)
	if err != nil {
		return "", err
	}
	if err := proc.Start(ctx); err != nil {
		return "", fmt.Errorf("start %s in the container: %w", args[0], err)
	}
	select {
	case st := <-statusC:
		proc.IO().Wait()
		if code := st.ExitCode(); code != 0 {
			return out.String(), fmt.Errorf("%s exited with status %d: %s", strings.Join(args, " "), code, strings.TrimSpace(out.String()))
		}
		return out.String(), nil
	case <-time.After(timeout):
		return out.String(), fmt.Errorf("%s did not finish within %s", strings.Join(args, " "), timeout)
	}
}

func containerName(id string, labels map[string]string) string {
	if n := labels[nerdctlNameLabel]; n != "" {
		return n
	}
	return id
}

func randomID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}
