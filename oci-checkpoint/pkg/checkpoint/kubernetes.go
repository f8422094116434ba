package checkpoint

import (
	"context"
	"fmt"
	"strings"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
)

// The labels containerd's CRI puts on the containers a kubelet creates.
const (
	podNamespaceLabel  = "io.kubernetes.pod.namespace"
	podNameLabel       = "io.kubernetes.pod.name"
	containerNameLabel = "io.kubernetes.container.name"
)

// findPodContainer resolves NAMESPACE/POD/CONTAINER, the form of kubelet's
// checkpoint API, to the running container of that name in that pod. A
// kubelet keeps the exited containers of earlier restarts beside it, so
// only one with a running task counts.
func findPodContainer(ctx context.Context, c *client.Client, ref string) (client.Container, bool, error) {
	parts := strings.Split(ref, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return nil, false, nil
	}
	filter := fmt.Sprintf("labels.%q==%s,labels.%q==%s,labels.%q==%s",
		podNamespaceLabel, parts[0], podNameLabel, parts[1], containerNameLabel, parts[2])
	found, err := c.Containers(ctx, filter)
	if err != nil {
		return nil, true, err
	}
	var running []client.Container
	for _, ctr := range found {
		task, err := ctr.Task(ctx, nil)
		if err != nil {
			continue
		}
		if st, err := task.Status(ctx); err == nil && st.Status == client.Running {
			running = append(running, ctr)
		}
	}
	switch {
	case len(running) == 1:
		return running[0], true, nil
	case len(found) == 0:
		return nil, true, fmt.Errorf("no container %q in pod %s/%s in containerd namespace %s (pods are in k8s.io: pass -n k8s.io): see 'kubectl get pod -n %s %s': %w",
			parts[2], parts[0], parts[1], namespaceOf(ctx), parts[0], parts[1], errdefs.ErrNotFound)
	case len(running) == 0:
		return nil, true, fmt.Errorf("container %q of pod %s/%s is not running (%d exited): %w",
			parts[2], parts[0], parts[1], len(found), errdefs.ErrFailedPrecondition)
	}
	return nil, true, fmt.Errorf("%d running containers %q in pod %s/%s: give the container ID (crictl ps): %w",
		len(running), parts[2], parts[0], parts[1], errdefs.ErrInvalidArgument)
}

func namespaceOf(ctx context.Context) string {
	ns, _ := namespaces.Namespace(ctx)
	return ns
}
