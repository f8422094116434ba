package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"

	"rekindle.local/contract/criulog"

	"rekindle.local/oci-checkpoint/pkg/progress"
)

// begin makes the work directory and the record in it, and claims the
// container with the lease that keeps what create writes from the
// garbage collector until the image holds it. A create still running on
// the container refuses this one; what killed ones left is undone first.
func (cr *creation) begin() error {
	me, err := self()
	if err != nil {
		return fmt.Errorf("read this process's start time: %w", err)
	}
	work, err := os.MkdirTemp(cr.o.WorkDir, workPrefix)
	if err != nil {
		return fmt.Errorf("work directory: %w (pass --work-dir on a filesystem with room for the checkpoint)", err)
	}
	if work, err = filepath.Abs(work); err != nil {
		os.RemoveAll(work)
		return err
	}
	cr.work = work
	cr.archiveDir = filepath.Join(work, "archive")
	cr.criuDir = filepath.Join(cr.archiveDir, crmetadata.CheckpointDirectory)
	if err := os.MkdirAll(cr.criuDir, 0o700); err != nil {
		os.RemoveAll(work)
		return fmt.Errorf("work directory: %w", err)
	}
	finish := finishStop
	switch {
	case cr.o.LeaveRunning:
		finish = finishLeaveRunning
	case cr.o.StopAtDump:
		finish = finishStopAtDump
	}
	cr.rec = &record{owner: me, Command: "create", Lease: leasePrefix + randomID(), Container: cr.ctr.ID(), Started: time.Now().UTC(), Work: work,
		Image: cr.name, OCIArchive: cr.o.OCIArchive, Finish: finish}
	cr.fillEngine(cr.rec)
	if err := cr.rec.save(); err != nil {
		os.RemoveAll(work)
		return err
	}
	mine, dead, err := takeClaim(cr.ctx, cr.c, cr.rec, cr.o.Container)
	if err != nil {
		os.RemoveAll(work)
		if errors.Is(err, errBusy) {
			return fmt.Errorf("%w; nothing was changed", err)
		}
		return err
	}
	cr.lease = mine
	cr.ctx = leases.WithLease(cr.ctx, mine.ID)
	for _, r := range undoDead(cr.sig, cr.c, dead, cr.o.Progress) {
		if r.Err != nil {
			cr.end(true)
			return r.Err
		}
	}
	return nil
}

// fillEngine copies how to resume the engine into r: the preflight may
// change the resume calls.
func (cr *creation) fillEngine(r *record) {
	r.Engine, r.Port, r.URL = cr.o.Engine.Name, cr.o.Engine.Port, cr.o.URL
	r.Resume, r.WakeDeadline = cr.o.Engine.Resume, cr.o.WakeDeadline
}

// mark changes the record and saves it. A record that cannot be saved (a
// full disk) does not fail the checkpoint, whose own writes say more; it
// is said once, since a create killed from then on is undone as the
// record last said.
func (cr *creation) mark(change func(*record)) {
	if cr.rec == nil {
		return
	}
	change(cr.rec)
	cr.fillEngine(cr.rec)
	if err := cr.rec.save(); err != nil && cr.unsaved == nil {
		cr.unsaved = err
		if cr.o.Progress != nil {
			fmt.Fprintf(cr.o.Progress, "    warning: %v (if this create is killed, the next undoes it from an older record)\n", err)
		}
	}
}

// end removes the work directory and lets the claim go; what a failed or
// interrupted checkpoint wrote goes with it now, not at some later
// collection.
func (cr *creation) end(failed bool) {
	os.RemoveAll(cr.work)
	var opts []leases.DeleteOpt
	if failed {
		opts = append(opts, leases.SynchronousDelete)
	}
	cr.c.LeasesService().Delete(context.WithoutCancel(cr.ctx), cr.lease, opts...)
}

// dump has CRIU write the container's processes into the work directory.
// It leaves the engine running (unless --stop-at-dump): the container is
// stopped only once the image is written, so a failed packaging (a full
// disk) loses nothing and the engine is resumed to serve again.
func (cr *creation) dump() error {
	var count progress.Counter
	stopWatch := watchDir(cr.criuDir, &count)
	stop := progress.Start(cr.o.Progress, cr.o.ProgressMode, "dump", dumpEstimate(cr.pid), &count)
	// Not cut short by an interruption: runc killed half way leaves the
	// container frozen (Paused) and CRIU's work lost.
	_, err := cr.task.Checkpoint(cr.hold(), client.WithCheckpointImagePath(cr.criuDir), withOptions(cr.archiveDir, cr.o.StopAtDump))
	stop()
	stopWatch()
	if err != nil {
		if logSaysNoSpace(cr.archiveDir) || nearlyFull(cr.archiveDir) {
			err = fmt.Errorf("%w: %w", syscall.ENOSPC, err)
		}
		return noSpace(dumpFailed(err, cr.archiveDir, os.TempDir(), containerName(cr.ctr.ID(), cr.info.Labels)), cr.work)
	}
	removeKeptLogs(os.TempDir(), containerName(cr.ctr.ID(), cr.info.Labels))
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

// dumpFailed is the error of a failed dump: runc's ("criu failed: type
// DUMP errno 0") with the lines of CRIU's dump.log in dir that name the
// cause (rekindle.local/contract/criulog, which picks a restore's too),
// and where the log is kept.
func dumpFailed(err error, dir, keep, container string) error {
	kept := keepLog(dir, keep, container)
	if causes := criulog.CausesOf(filepath.Join(dir, crmetadata.DumpLogFile)); len(causes) > 0 {
		return fmt.Errorf("dump: %w: CRIU: %s (CRIU's log: %s)", err, criulog.Quote(causes), kept)
	}
	return fmt.Errorf("dump: %w (CRIU's log: %s)", err, kept)
}

// keptLogPrefix begins the name of a failed dump's log kept in the
// folder keep: one file per failed dump of the container (its name, as
// the user knows it).
func keptLogPrefix(container string) string { return "oci-checkpoint-dump-" + container + "-" }

// keepLog keeps CRIU's dump.log of a failed dump in dir, which goes with
// the work directory, in the folder keep, and says where it is.
func keepLog(dir, keep, container string) string {
	b, err := os.ReadFile(filepath.Join(dir, crmetadata.DumpLogFile))
	if err != nil {
		return "none written"
	}
	f, err := os.CreateTemp(keep, keptLogPrefix(container)+"*.log")
	if err != nil {
		return "not kept: " + err.Error()
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		return "not kept: " + err.Error()
	}
	return f.Name()
}

// removeKeptLogs removes the logs keepLog kept of the container's failed
// dumps once one succeeds: they told of a cause that is gone.
func removeKeptLogs(keep, container string) {
	names, _ := filepath.Glob(filepath.Join(keep, keptLogPrefix(container)+"*.log"))
	for _, n := range names {
		// CreateTemp's random part is digits: a name with more is
		// another container's whose name continues this one's ("a-b").
		rest := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(n), keptLogPrefix(container)), ".log")
		if rest == "" || strings.Trim(rest, "0123456789") != "" {
			continue
		}
		if fi, err := os.Lstat(n); err == nil && fi.Mode().IsRegular() {
			os.Remove(n)
		}
	}
}
