// Package checkpoint turns a running engine container into a checkpoint
// image in the CRI-O/checkpointctl format that Rekindle's containerd
// restores on `nerdctl run`.
package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/errdefs"

	"rekindle.local/oci-checkpoint/pkg/annotations"
	"rekindle.local/oci-checkpoint/pkg/engine"
	"rekindle.local/oci-checkpoint/pkg/hostinfo"
	"rekindle.local/oci-checkpoint/pkg/inroot"
	"rekindle.local/oci-checkpoint/pkg/phase"
	"rekindle.local/oci-checkpoint/pkg/progress"
	"rekindle.local/oci-checkpoint/pkg/wake"
)

// checkpointer names oci-checkpoint as the checkpoint's engine in the
// checkpointctl annotation.
const checkpointer = "rekindle-oci-checkpoint"

// Options of Create.
type Options struct {
	Container string
	Image     string // a name; normalised as nerdctl does
	Engine    engine.Profile
	// URL reaches the engine from the host instead of through the
	// container's network namespace (host-network containers, tests).
	URL            string
	HealthTimeout  time.Duration
	QuiesceTimeout time.Duration
	WakeDeadline   time.Duration
	WakeBinary     string // the static rekindle-wake to inject
	LeaveRunning   bool
	// StopAtDump ends the container with the dump, as runc's checkpoint
	// does by default, instead of once the image is written: an engine
	// that keeps its weights on the GPU then skips putting them back after
	// the dump, but a failed packaging loses it.
	StopAtDump bool
	// OCIArchive, when set, receives the image as an OCI archive instead
	// of the image store.
	OCIArchive string
	WorkDir    string
	// Version of oci-checkpoint, recorded as the checkpointing engine's.
	Version string
	// Compression of the checkpoint layer: CompressionNone (default) or
	// CompressionZstd.
	Compression string
	// Progress receives phase lines and, for long phases, progress as
	// ProgressMode says.
	Progress     io.Writer
	ProgressMode progress.Mode
}

// Result describes the image written.
type Result struct {
	Image       string             `json:"image"`
	Digest      string             `json:"digest"`
	Size        int64              `json:"size"`
	OCIArchive  string             `json:"oci_archive,omitempty"`
	Container   string             `json:"container"`
	BaseImage   string             `json:"base_image"`
	GPUs        []hostinfo.GPU     `json:"gpus"`
	Phases      []phase.Timing     `json:"phases"`
	Seconds     map[string]float64 `json:"seconds"`
	Annotations map[string]string  `json:"annotations"`
}

// Create checkpoints the container into an image. On failure after the
// engine was quiesced it is resumed and left running, and nothing is left
// in the image store.
func Create(ctx context.Context, c *client.Client, o Options) (res *Result, err error) {
	name, err := NormalizeName(o.Image)
	if err != nil {
		return nil, err
	}
	ctr, err := FindContainer(ctx, c, o.Container)
	if err != nil {
		return nil, err
	}
	info, err := ctr.Info(ctx)
	if err != nil {
		return nil, err
	}
	task, err := ctr.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("container %s has no running task: start it first", o.Container)
	} else if err != nil {
		return nil, err
	}
	st, err := task.Status(ctx)
	if err != nil {
		return nil, err
	}
	if st.Status != client.Running {
		return nil, fmt.Errorf("container %s is %s: only a running container can be checkpointed", o.Container, st.Status)
	}
	if info.Image == "" {
		return nil, fmt.Errorf("container %s was not created from an image: a checkpoint image needs one as its base", o.Container)
	}
	if _, err := os.Stat(o.WakeBinary); err != nil {
		return nil, fmt.Errorf("wake helper: %w (build it with 'make build', or pass --wake-binary)", err)
	}
	spec, err := ctr.Spec(ctx)
	if err != nil {
		return nil, err
	}
	pid := task.Pid()
	root, err := inroot.Open(fmt.Sprintf("/proc/%d/root", pid))
	if err != nil {
		return nil, err
	}
	defer root.Close()

	t := &phase.Timer{Out: o.Progress}
	eng := &engine.Client{HTTP: NetnsHTTP(pid), Base: fmt.Sprintf("http://127.0.0.1:%d", o.Engine.Port)}
	if o.URL != "" {
		eng = &engine.Client{Base: o.URL}
	}
	eng.Exec = func(ctx context.Context, command string) error {
		_, err := execIn(ctx, task, spec, "rekindle-quiesce-"+randomID(), []string{"/bin/sh", "-c", command}, o.QuiesceTimeout)
		return err
	}

	if err := t.Run("health", func() error { return waitHealthy(ctx, eng, o.Engine.Health, o.HealthTimeout) }); err != nil {
		return nil, err
	}

	quiesced, helperUp := false, false
	defer func() {
		if err == nil || !quiesced {
			return
		}
		// Undo: the helper resumes the engine once it sees the wake file;
		// without a helper, resume it from here.
		if rerr := resume(ctx, root, eng, o, helperUp, task); rerr != nil {
			err = fmt.Errorf("%w; resuming the engine failed too: %v", err, rerr)
		} else {
			err = fmt.Errorf("%w (the engine was resumed and is running)", err)
		}
	}()

	if err := t.Run("quiesce", func() error {
		qctx, cancel := context.WithTimeout(ctx, o.QuiesceTimeout)
		defer cancel()
		for _, call := range o.Engine.Quiesce {
			if err := eng.Do(qctx, call); err != nil {
				return fmt.Errorf("quiesce: %w; the engine is left running", err)
			}
		}
		quiesced = true
		return nil
	}); err != nil {
		return nil, err
	}

	if err := t.Run("inject-helper", func() error {
		if err := injectHelper(ctx, root, task, spec, o); err != nil {
			return err
		}
		helperUp = true
		return nil
	}); err != nil {
		return nil, err
	}

	var gpus []hostinfo.GPU
	host, hostRuntime := hostinfo.Read(), hostinfo.ReadRuntime()
	if err := t.Run("record", func() error {
		devs, err := root.CharDevices("/dev", "nvidia*")
		if err != nil {
			return fmt.Errorf("list the container's GPU devices: %w", err)
		}
		gpus = hostinfo.DeviceMinors(devs, host.GPUs)
		if gpus == nil {
			gpus = []hostinfo.GPU{}
		}
		b, _ := json.MarshalIndent(gpus, "", "  ")
		return root.WriteFile(wake.DevicesFile, append(b, '\n'), 0o644)
	}); err != nil {
		return nil, err
	}

	// The lease keeps what we write from the garbage collector until the
	// image holds it, and lets it go if we fail.
	ctx, done, err := c.WithLease(ctx, leases.WithRandomID(), leases.WithExpiration(24*time.Hour))
	if err != nil {
		return nil, err
	}
	defer done(context.WithoutCancel(ctx))

	work, err := os.MkdirTemp(o.WorkDir, "oci-checkpoint-")
	if err != nil {
		return nil, fmt.Errorf("work directory: %w (pass --work-dir on a filesystem with room for the checkpoint)", err)
	}
	defer os.RemoveAll(work)
	archiveDir := filepath.Join(work, "archive")
	criuDir := filepath.Join(archiveDir, crmetadata.CheckpointDirectory)
	if err := os.MkdirAll(criuDir, 0o700); err != nil {
		return nil, err
	}

	checkpointedAt := time.Now().UTC()
	// The dump leaves the engine running; the container is stopped only
	// once the image is written, so a failed packaging (a full disk) loses
	// nothing and the engine is resumed to serve again.
	if err := t.Run("dump", func() error {
		var count progress.Counter
		stopWatch := watchDir(criuDir, &count)
		stop := progress.Start(o.Progress, o.ProgressMode, "dump", dumpEstimate(pid), &count)
		_, err := task.Checkpoint(ctx, client.WithCheckpointImagePath(criuDir), withOptions(archiveDir, o.StopAtDump))
		stop()
		stopWatch()
		if err != nil {
			if logSaysNoSpace(archiveDir) {
				err = fmt.Errorf("%w: %w", syscall.ENOSPC, err)
			}
			return noSpace(fmt.Errorf("dump: %w (CRIU's log: %s)", err, criuLog(archiveDir)), work)
		}
		return nil
	}); err != nil {
		return nil, err
	}

	res = &Result{Image: name, Container: ctr.ID(), BaseImage: info.Image, GPUs: gpus}
	err = t.Run("package", func() error {
		marker, _ := json.Marshal(map[string]string{"checkpointed_at": checkpointedAt.Format(time.RFC3339Nano)})
		if err := writeRootfsDiff(ctx, c, info, archiveDir, []ExtraFile{{Name: wake.WakeFile, Data: marker, Mode: 0o644}}); err != nil {
			where := contentRoot(ctx, c)
			if where == "" || strings.Contains(err.Error(), work) {
				where = work
			}
			return noSpace(fmt.Errorf("rootfs diff: %w", err), where)
		}
		base, err := c.GetImage(ctx, info.Image)
		if err != nil {
			return fmt.Errorf("base image %s of the container: %w (it must stay in the image store while checkpointing)", info.Image, err)
		}
		std := Standard{
			ContainerName: containerName(ctr.ID(), info.Labels),
			Pod:           info.Labels[criPodName], PodID: info.Labels[criPodUID], PodNamespace: info.Labels[criPodNamespace],
			BaseImage: info.Image, BaseDigest: base.Target().Digest.String(),
			Engine: checkpointer, EngineVersion: o.Version,
			RuntimeName: "runc", RuntimeVersion: hostRuntime.RuncVersion,
			CRIU: host.CRIU, Kernel: host.Kernel, Runtime: hostRuntime,
		}.Annotations()
		if err := writeDumps(ctr, info, base, archiveDir, checkpointedAt, std); err != nil {
			return err
		}
		ann := host.Annotations(gpus)
		for k, v := range std {
			ann[k] = v
		}
		ann[annotations.Format] = annotations.FormatVersion
		ann[annotations.Engine] = o.Engine.Name
		ann[annotations.EnginePort] = strconv.Itoa(o.Engine.Port)
		ann[annotations.Created] = checkpointedAt.Format(time.RFC3339)
		ann[annotations.SourceImage] = info.Image
		phases, _ := json.Marshal(t.Map())
		ann[annotations.Phases] = string(phases)
		ann[annotations.LegacyCheckpoint] = containerName(ctr.ID(), info.Labels)
		res.Annotations = ann
		desc, size, err := writeImage(ctx, c, name, base, archiveDir, ann, o)
		if err != nil {
			return err
		}
		res.Digest, res.Size, res.OCIArchive = desc.Digest.String(), size, o.OCIArchive
		return nil
	})
	if err != nil {
		if o.StopAtDump {
			quiesced = false // nothing left to resume
			return nil, fmt.Errorf("%w; the container was stopped by the dump (--stop-at-dump): restart it with 'nerdctl start %s'", err, o.Container)
		}
		return nil, err
	}
	quiesced = false // from here the image exists; resume below is not an undo
	if o.LeaveRunning {
		if err := t.Run("resume", func() error { return resume(ctx, root, eng, o, true, task) }); err != nil {
			return res, fmt.Errorf("the image %s was written but the engine did not resume: %w", name, err)
		}
	} else if o.StopAtDump {
		// The dump ended the container.
	} else if err := t.Run("stop", func() error { return stopTask(ctx, task) }); err != nil {
		return res, fmt.Errorf("the image %s was written but stopping the container failed: %w", name, err)
	}
	res.Phases, res.Seconds = t.Phases, t.Map()
	return res, nil
}

func containerName(id string, labels map[string]string) string {
	if n := labels[nerdctlNameLabel]; n != "" {
		return n
	}
	return id
}

func withOptions(workPath string, exit bool) client.CheckpointTaskOpts {
	return func(r *client.CheckpointTaskInfo) error {
		if r.Options == nil {
			r.Options = &options.CheckpointOptions{}
		}
		opts, ok := r.Options.(*options.CheckpointOptions)
		if !ok {
			return errors.New("the container's runtime is not runc: only io.containerd.runc.v2 can be checkpointed")
		}
		opts.Exit = exit
		opts.WorkPath = workPath // dump.log and stats-dump land in the archive
		opts.FileLocks = true
		return nil
	}
}

// criuLog keeps CRIU's dump.log of a failed dump, which would go with the
// work directory, and says where it is.
func criuLog(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, crmetadata.DumpLogFile))
	if err != nil {
		return "none written"
	}
	f, err := os.CreateTemp("", "oci-checkpoint-dump-*.log")
	if err != nil {
		return "not kept: " + err.Error()
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		return "not kept: " + err.Error()
	}
	return f.Name()
}

func waitHealthy(ctx context.Context, eng *engine.Client, health engine.Call, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		last = eng.Do(cctx, health)
		ccancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the engine did not become healthy within %s: %v (wrong --port or --engine?)", timeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func randomID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}
