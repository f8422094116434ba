package checkpoint

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"

	"rekindle.local/oci-checkpoint/pkg/progress"
)

// stopTask kills the checkpointed container's processes once its image is
// written, as a dump that exits would have, waits for the task to end and
// deletes it (deleteTask).
func stopTask(ctx context.Context, task client.Task, labels map[string]string) error {
	exited, err := task.Wait(ctx)
	if err != nil {
		return err
	}
	if err := task.Kill(ctx, syscall.SIGKILL, client.WithKillAll); err != nil {
		return err
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("the container's task did not exit within 30s of SIGKILL")
	case <-ctx.Done():
		return ctx.Err()
	}
	return deleteTask(ctx, task, labels)
}

// criKind labels the containers containerd's CRI plugin manages.
const criKind = "io.cri-containerd.kind"

// deleteTask deletes the ended task of a stopped container. runc then runs
// the container's poststop hooks: nerdctl's gives back its CNI address and
// host ports (the port reserver holding them goes), which a task left
// stopped keeps until 'nerdctl rm' or 'start', so a restore of the image on
// the same host port would fail with "port is already allocated". The
// container stays; 'nerdctl start' starts it afresh.
func deleteTask(ctx context.Context, task client.Task, labels map[string]string) error {
	if labels[criKind] != "" {
		return nil // CRI deletes its containers' tasks itself as they exit; the pod holds the network
	}
	if _, err := task.Delete(ctx, client.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("delete the stopped task (which gives back its address and ports): %w", err)
	}
	return nil
}

// watchDir counts the bytes of the files in dir every half second into c,
// for the progress of a dump that CRIU writes there.
func watchDir(dir string, c *progress.Counter) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				n, _ := dirSize(dir)
				c.Add(n - c.Load())
			}
		}
	}()
	return func() { close(done) }
}

// dumpEstimate guesses how many bytes a dump of the container of pid
// writes: its cgroup's anonymous and shared memory. 0 when unknown.
func dumpEstimate(pid uint32) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		// On a hybrid hierarchy the unified line has no memory.stat.
		var n int64
		switch {
		case parts[0] == "0" && parts[1] == "":
			n = statSum(filepath.Join("/sys/fs/cgroup", parts[2], "memory.stat"), "anon", "shmem")
		case strings.Contains(","+parts[1]+",", ",memory,"):
			n = statSum(filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.stat"), "total_rss", "total_shmem")
		}
		if n > 0 {
			return n
		}
	}
	return 0
}

func statSum(path string, keys ...string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	var sum int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		for _, want := range keys {
			if k == want {
				n, _ := strconv.ParseInt(v, 10, 64)
				sum += n
			}
		}
	}
	return sum
}
