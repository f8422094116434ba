package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"rekindle.local/oci-checkpoint/pkg/engine"
	"rekindle.local/oci-checkpoint/pkg/inroot"
	"rekindle.local/oci-checkpoint/pkg/wake"
)

// injectHelper copies rekindle-wake into the container and starts it
// detached. Files from an earlier checkpoint of the same container (a
// restored one) go first, so the new helper does not wake at once. wrote
// gets the helper file's identity before it is started: the process
// running that file is the helper, whatever the container says.
func injectHelper(ctx context.Context, root *inroot.Root, task client.Task, spec *specs.Spec, o Options, wrote func(fileID)) error {
	for _, f := range []string{wake.WakeFile, wake.StatusFile, wake.PidFile} {
		if err := root.Remove(f); err != nil {
			return err
		}
	}
	bin, err := os.ReadFile(o.WakeBinary)
	if err != nil {
		return err
	}
	held, err := root.WriteFileHeld(wake.HelperPath, bin, 0o755)
	if err != nil {
		return err
	}
	defer held.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(held.Fd()), &st); err != nil {
		return err
	}
	wrote(fileID{Dev: st.Dev, Ino: st.Ino})
	// The helper runs as the container's user and writes its pid and
	// status beside itself; the folder belongs to that user as the host
	// sees it (through the user namespace's maps, where there is one).
	u := spec.Process.User
	var uidMaps, gidMaps []specs.LinuxIDMapping
	if spec.Linux != nil {
		uidMaps, gidMaps = spec.Linux.UIDMappings, spec.Linux.GIDMappings
	}
	if uid, gid := hostID(u.UID, uidMaps), hostID(u.GID, gidMaps); uid != 0 || gid != 0 {
		if err := root.ChownDir(wake.Dir, int(uid), int(gid)); err != nil {
			return err
		}
	}
	args := []string{wake.HelperPath, "start", "--engine", o.Engine.Name, "--port", strconv.Itoa(o.Engine.Port),
		"--deadline", o.WakeDeadline.String()}
	for _, c := range o.Engine.Resume {
		args = append(args, "--resume", c.String())
	}
	if _, err := execIn(ctx, task, spec, "rekindle-wake-"+randomID(), args, 10*time.Second); err != nil {
		return fmt.Errorf("start the wake helper: %w", err)
	}
	procs, err := task.Pids(ctx)
	if err != nil {
		return fmt.Errorf("list the container's processes: %w", err)
	}
	pids := make([]uint32, 0, len(procs))
	for _, p := range procs {
		pids = append(pids, p.Pid)
	}
	return verifyHelper(held, bin, pids)
}

// verifyHelper checks that one of pids (host pids) runs the helper file
// held, and that the file still holds bin: the container could put
// another file at the helper's path, or rewrite this one, before the exec.
// The helper runs with the container's own privileges either way; this
// keeps the checkpoint's wake path the one oci-checkpoint shipped.
func verifyHelper(held *os.File, bin []byte, pids []uint32) error {
	got := make([]byte, len(bin)+1)
	n, err := held.ReadAt(got, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read back the wake helper: %w", err)
	}
	if !bytes.Equal(got[:n], bin) {
		return fmt.Errorf("the container rewrote the wake helper %s before it ran; not checkpointing it", wake.HelperPath)
	}
	var want unix.Stat_t
	if err := unix.Fstat(int(held.Fd()), &want); err != nil {
		return err
	}
	for _, pid := range pids {
		// stat follows the kernel's link to the running file: no name in
		// the container is walked.
		var st unix.Stat_t
		if unix.Stat(fmt.Sprintf("/proc/%d/exe", pid), &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino {
			return nil
		}
	}
	return fmt.Errorf("no process of the container runs the wake helper written to %s: it exited, or the container put another file there; not checkpointing it",
		wake.HelperPath)
}

// hostID is the host's id for id inside a user namespace with maps; the
// same id where there are none, or where no map holds it.
func hostID(id uint32, maps []specs.LinuxIDMapping) uint32 {
	for _, m := range maps {
		if id >= m.ContainerID && id-m.ContainerID < m.Size {
			return m.HostID + id - m.ContainerID
		}
	}
	return id
}

// resume brings a quiesced engine back: through the helper (write the wake
// file, wait for its status) when it runs, else with the profile's calls.
func resume(ctx context.Context, root *inroot.Root, eng *engine.Client, o Options, helperUp bool, task client.Task) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.WakeDeadline)
	defer cancel()
	st, err := task.Status(ctx)
	if err != nil {
		return fmt.Errorf("ask containerd whether the container still runs: %w", err)
	}
	if st.Status == client.Paused || st.Status == client.Pausing {
		// A dump that ended half way (CRIU or runc killed) leaves the
		// container frozen: thaw it, or the engine cannot answer.
		if err := task.Resume(ctx); err != nil {
			return fmt.Errorf("the container is %s (a dump that ended half way froze it) and unpausing it failed: %w", st.Status, err)
		}
		if st, err = task.Status(ctx); err != nil {
			return fmt.Errorf("ask containerd whether the container still runs: %w", err)
		}
	}
	if st.Status != client.Running {
		return fmt.Errorf("the container is no longer running (%s)", st.Status)
	}
	if !helperUp {
		for _, call := range o.Engine.Resume {
			if _, err := eng.Retry(ctx, call); err != nil {
				return err
			}
		}
		return nil
	}
	b, _ := json.Marshal(map[string]string{"reason": "resume in place"})
	if err := root.WriteFile(wake.WakeFile, b, 0o644); err != nil {
		return err
	}
	for {
		b, err := root.ReadFile(wake.StatusFile)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			// The container put something else there: waiting will not help.
			return fmt.Errorf("the wake helper's status: %w", err)
		}
		if err == nil {
			var st wake.Status
			if err := json.Unmarshal(b, &st); err != nil {
				return fmt.Errorf("%s: %w", wake.StatusFile, err)
			}
			if st.Outcome != wake.Resumed {
				return fmt.Errorf("the wake helper reports: %s", st.Error)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the wake helper wrote no %s within %s", wake.StatusFile, o.WakeDeadline)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
