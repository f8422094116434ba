// Package checkpoint turns a running engine container into a checkpoint
// image in the CRI-O/checkpointctl format that Rekindle's containerd
// restores on `nerdctl run`.
package checkpoint

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/runtime-spec/specs-go"

	"rekindle.local/oci-checkpoint/pkg/engine"
	"rekindle.local/oci-checkpoint/pkg/hostinfo"
	"rekindle.local/oci-checkpoint/pkg/inroot"
	"rekindle.local/oci-checkpoint/pkg/phase"
	"rekindle.local/oci-checkpoint/pkg/progress"
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
	URL           string
	HealthTimeout time.Duration
	// RefusedTimeout ends the health wait once the engine's port has
	// refused connections this long in a row (0: DefaultRefusedTimeout).
	RefusedTimeout time.Duration
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
	// Replace lets Create replace a checkpoint image of that name (or the
	// OCIArchive file); without it Create refuses one before it starts.
	Replace bool
	WorkDir string
	// Version of oci-checkpoint, recorded as the checkpointing engine's.
	Version string
	// Compression of the checkpoint layer: CompressionNone (default) or
	// CompressionZstd.
	Compression string
	// KeepZeroPages packages CRIU's pages as it wrote them; by default the
	// pages of zeros in private anonymous memory are left out (pkg/sparse).
	KeepZeroPages bool
	// Fallback is what a restorer does on a host that cannot restore the
	// image: annotations.FallbackCold records it on the manifest;
	// annotations.FallbackNone or "" records nothing (the restore fails).
	Fallback string
	// SignKey, when set, signs the image's manifest (see sign.go): a host
	// that requires a signature restores it only with the public key.
	SignKey ed25519.PrivateKey
	// Progress receives phase lines and, for long phases, progress as
	// ProgressMode says.
	Progress     io.Writer
	ProgressMode progress.Mode
}

// Create checkpoints the container into an image. On failure after the
// engine was quiesced it is resumed and left running, and nothing is left
// in the image store.
//
// ctx ending (a signal: cliapp.InterruptContext) interrupts it: what
// changes the engine (a quiesce call, the helper's start, the dump) is
// never cut short, since a CRIU stopped half way leaves the engine frozen;
// Create stops at the next step, undoes as after a failure and returns
// ctx's cause. Once the image is stored it finishes as asked.
func Create(ctx context.Context, c *client.Client, o Options) (res *Result, err error) {
	defer func() {
		// An RPC that ctx's end cut short says "context canceled": say why.
		if cause := context.Cause(ctx); err != nil && ctx.Err() != nil && !errors.Is(err, cause) {
			err = fmt.Errorf("%w: %v", cause, err)
		}
	}()
	cr, err := open(ctx, c, o)
	if err != nil {
		return nil, err
	}
	defer func() { cr.end(err != nil) }()
	defer cr.root.Close()
	if err := cr.run("health", cr.health, "nothing was changed, the engine is left running"); err != nil {
		return nil, err
	}
	if err := cr.run("preflight", cr.preflight, "nothing was changed, the engine is left running"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && cr.quiesced {
			err = cr.undo(err)
		}
	}()
	const none = "no image was written"
	if err := cr.run("quiesce", cr.quiesce, none); err != nil {
		return nil, err
	}
	if err := cr.run("inject-helper", cr.injectHelper, none); err != nil {
		return nil, err
	}
	cr.host, cr.runtime = hostinfo.Read(), hostinfo.ReadRuntime()
	if err := cr.run("record", cr.record, none); err != nil {
		return nil, err
	}
	cr.checkpointedAt = time.Now().UTC()
	if err := cr.run("dump", cr.dump, none); err != nil {
		return nil, err
	}
	// No check after it: the image is stored (storeImage looks at ctx
	// last), and a signal from here on comes too late to undo.
	if err := cr.phase("package", cr.pack); err != nil {
		return nil, cr.packageFailed(cr.interruptedOr("package", err, none))
	}
	cr.mark(func(r *record) { r.Stored = true })
	cr.quiesced = false // from here the image exists; resume below is not an undo
	cr.ctx = context.WithoutCancel(cr.ctx)
	return cr.finish()
}

// phase runs fn as the phase name, recorded as begun first: a create
// killed in it is undone from there.
func (cr *creation) phase(name string, fn func() error) error {
	cr.mark(func(r *record) { r.Phase = name })
	return cr.t.Run(name, fn)
}

// run runs the phase name and then looks for an interruption: one that
// came while it ran, or cut it short, is the phase's error (what then
// says what was done about it).
func (cr *creation) run(name string, fn func() error, then string) error {
	if err := cr.phase(name, fn); err != nil {
		return cr.interruptedOr(name, err, then)
	}
	return cr.interruptedOr(name, nil, then)
}

// interruptedOr is err, or the interruption's error when ctx has ended.
func (cr *creation) interruptedOr(phase string, err error, then string) error {
	if cr.sig.Err() == nil {
		return err
	}
	return fmt.Errorf("%w during %s; %s", context.Cause(cr.sig), phase, then)
}

// hold is the context of a step that must not be cut short: its values
// (namespace, lease), not ctx's end.
func (cr *creation) hold() context.Context { return context.WithoutCancel(cr.ctx) }

// creation is one Create in progress: what the phases find and leave for
// the next.
type creation struct {
	ctx  context.Context // under the lease once workspace has taken it
	sig  context.Context // Create's own: its end interrupts
	c    *client.Client
	o    Options
	name string // the image's, normalised

	ctr       client.Container
	info      containers.Container // as source() gives it
	diffLower string               // the snapshot the rootfs diff is against ("": its parent)
	// baseDigest is the base image's digest a restored container's
	// checkpoint recorded: its base may have no image record (baseImage).
	baseDigest digest.Digest
	task       client.Task
	spec       *specs.Spec
	pid        uint32
	root       *inroot.Root
	eng        *engine.Client
	facts      engine.Facts // what the preflight learned of the engine
	t          *phase.Timer

	quiesced bool // a failure from here resumes the engine
	helperUp bool // the wake helper runs in the container

	rec     *record      // what this create did, for the next if it is killed
	lease   leases.Lease // rec's claim on the container
	unsaved error        // the record's last failed save, said once

	host    hostinfo.Host
	runtime hostinfo.Runtime
	gpus    []hostinfo.GPU

	work, archiveDir, criuDir string
	checkpointedAt            time.Time
	res                       *Result
}

// open claims the container (record.go: a create still running refuses
// it, a killed one's leftovers are undone first), checks that it can be
// checkpointed and opens its root and its engine; nothing of it is
// changed yet. On success the caller ends the claim (end).
func open(ctx context.Context, c *client.Client, o Options) (*creation, error) {
	name, err := NormalizeName(o.Image)
	if err != nil {
		return nil, err
	}
	ctr, err := FindContainer(ctx, c, o.Container)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(o.WakeBinary); err != nil {
		return nil, fmt.Errorf("wake helper: %w (build it with 'make build', or pass --wake-binary)", err)
	}
	cr := &creation{ctx: ctx, sig: ctx, c: c, o: o, name: name, ctr: ctr, t: &phase.Timer{Out: o.Progress}}
	if err := cr.begin(); err != nil {
		return nil, err
	}
	if err := cr.check(); err != nil {
		cr.end(true)
		return nil, err
	}
	return cr, nil
}

// check is open's look at the container once it is claimed.
func (cr *creation) check() error {
	ctx, c, o := cr.ctx, cr.c, cr.o
	if err := checkOutput(ctx, c.ContentStore(), c.ImageService(), cr.name, o); err != nil {
		return err
	}
	info, err := cr.ctr.Info(ctx)
	if err != nil {
		return err
	}
	task, err := cr.ctr.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return fmt.Errorf("container %s has no running task: start it first", o.Container)
	} else if err != nil {
		return err
	}
	st, err := task.Status(ctx)
	if err != nil {
		return err
	}
	if st.Status != client.Running {
		return fmt.Errorf("container %s is %s: only a running container can be checkpointed", o.Container, st.Status)
	}
	if info.Image == "" {
		return fmt.Errorf("container %s was not created from an image: a checkpoint image needs one as its base", o.Container)
	}
	info, diffLower, baseDigest, err := source(ctx, c, info)
	if err != nil {
		return err
	}
	spec, err := cr.ctr.Spec(ctx)
	if err != nil {
		return err
	}
	pid := task.Pid()
	root, err := inroot.Open(fmt.Sprintf("/proc/%d/root", pid))
	if err != nil {
		return err
	}
	cr.info, cr.diffLower, cr.baseDigest, cr.task, cr.spec, cr.pid, cr.root = info, diffLower, baseDigest, task, spec, pid, root
	cr.eng = &engine.Client{HTTP: NetnsHTTP(pid), Base: fmt.Sprintf("http://127.0.0.1:%d", o.Engine.Port)}
	if o.URL != "" {
		cr.eng = &engine.Client{Base: o.URL}
	}
	cr.eng.Exec = func(ctx context.Context, command string) error {
		_, err := execIn(ctx, task, spec, "rekindle-quiesce-"+randomID(), []string{"/bin/sh", "-c", command}, o.QuiesceTimeout)
		return err
	}
	cr.mark(func(r *record) {
		r.TaskPid = pid
		r.TaskStart, _ = procStart(int(pid))
	})
	return nil
}

// finish leaves the container as asked once the image is written:
// resumed, already ended by the dump, or stopped.
func (cr *creation) finish() (*Result, error) {
	switch {
	case cr.o.LeaveRunning:
		if err := cr.phase("resume", func() error { return resume(cr.ctx, cr.root, cr.eng, cr.o, true, cr.task) }); err != nil {
			return cr.res, fmt.Errorf("the image %s was written but the engine did not resume: %w", cr.name, err)
		}
	case cr.o.StopAtDump:
		// The dump ended the container: its task goes, with its address and ports.
		if err := deleteTask(cr.ctx, cr.task, cr.info.Labels); err != nil {
			return cr.res, fmt.Errorf("the image %s was written but deleting the stopped task failed: %w", cr.name, err)
		}
	default:
		if err := cr.phase("stop", func() error { return stopTask(cr.ctx, cr.task, cr.info.Labels) }); err != nil {
			return cr.res, fmt.Errorf("the image %s was written but stopping the container failed: %w", cr.name, err)
		}
	}
	cr.res.Phases = cr.t.Phases
	cr.labelPhases()
	return cr.res, nil
}

// undo resumes the engine after a failure past the quiesce: the helper
// resumes it once it sees the wake file; without a helper, from here.
func (cr *creation) undo(err error) error {
	if rerr := resume(cr.hold(), cr.root, cr.eng, cr.o, cr.helperUp, cr.task); rerr != nil {
		return fmt.Errorf("%w; resuming the engine failed too: %v", err, rerr)
	}
	return fmt.Errorf("%w (the engine was resumed and is running)", err)
}
