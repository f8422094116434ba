package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"

	"rekindle.local/oci-checkpoint/pkg/progress"
)

// workspace takes the lease and makes the work directory; cleanup
// removes the directory and lets the lease go.
func (cr *creation) workspace() (cleanup func(), err error) {
	// The lease keeps what we write from the garbage collector until the
	// image holds it, and lets it go if we fail.
	ctx, done, err := cr.c.WithLease(cr.ctx, leases.WithRandomID(), leases.WithExpiration(24*time.Hour))
	if err != nil {
		return nil, err
	}
	cr.ctx = ctx
	release := func() { done(context.WithoutCancel(ctx)) }
	work, err := os.MkdirTemp(cr.o.WorkDir, "oci-checkpoint-")
	if err != nil {
		release()
		return nil, fmt.Errorf("work directory: %w (pass --work-dir on a filesystem with room for the checkpoint)", err)
	}
	cleanup = func() {
		os.RemoveAll(work)
		release()
	}
	cr.work = work
	cr.archiveDir = filepath.Join(work, "archive")
	cr.criuDir = filepath.Join(cr.archiveDir, crmetadata.CheckpointDirectory)
	if err := os.MkdirAll(cr.criuDir, 0o700); err != nil {
		cleanup()
		return nil, err
	}
	cr.checkpointedAt = time.Now().UTC()
	return cleanup, nil
}

// dump has CRIU write the container's processes into the work directory.
// It leaves the engine running (unless --stop-at-dump): the container is
// stopped only once the image is written, so a failed packaging (a full
// disk) loses nothing and the engine is resumed to serve again.
func (cr *creation) dump() error {
	var count progress.Counter
	stopWatch := watchDir(cr.criuDir, &count)
	stop := progress.Start(cr.o.Progress, cr.o.ProgressMode, "dump", dumpEstimate(cr.pid), &count)
	_, err := cr.task.Checkpoint(cr.ctx, client.WithCheckpointImagePath(cr.criuDir), withOptions(cr.archiveDir, cr.o.StopAtDump))
	stop()
	stopWatch()
	if err != nil {
		if logSaysNoSpace(cr.archiveDir) || nearlyFull(cr.archiveDir) {
			err = fmt.Errorf("%w: %w", syscall.ENOSPC, err)
		}
		return noSpace(fmt.Errorf("dump: %w (CRIU's log: %s)", err, criuLog(cr.archiveDir)), cr.work)
	}
	return nil
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
