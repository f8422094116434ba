package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"rekindle.local/oci-checkpoint/pkg/engine"
	"rekindle.local/oci-checkpoint/pkg/inroot"
	"rekindle.local/oci-checkpoint/pkg/phase"
	"rekindle.local/oci-checkpoint/pkg/wake"
)

// undoClaim undoes what the dead claim cl left and removes it: the
// engine thawed, resumed or stopped as its record says, the lease's
// snapshots and ingests, the lease, the work directory. say gets one line
// a step. Nothing in the container is trusted to say what was done: the
// record is on the host, and the helper is known by the file it runs.
func undoClaim(ctx context.Context, c *client.Client, cl claim, say func(string, ...any)) error {
	ctx = context.WithoutCancel(ctx) // a second signal does not cut an undo short either
	rec, rerr := readRecord(cl)
	if cl.command != "recover" {
		switch {
		case rerr != nil:
			say("its record is not readable (%v): the engine is not touched; if it answers 503, call its resume endpoint", rerr)
		default:
			if err := undoEngine(ctx, c, rec, say); err != nil {
				return err
			}
		}
	}
	if err := dropLease(ctx, c, cl.lease, say); err != nil {
		return err
	}
	if cl.work != "" {
		if err := removeWork(cl.work, cl.lease.ID); err != nil {
			return err
		}
		say("removed its work directory %s", cl.work)
	}
	if rec != nil && rec.Phase == "package" {
		// The layer it wrote into the content store's folder (blob.go):
		// files no live writer holds locked.
		if root := contentRoot(ctx, c); root != "" {
			removeStale(TmpDir(root))
		}
	}
	if rec != nil && rec.OCIArchive != "" && !rec.Stored {
		if err := os.Remove(rec.OCIArchive + ".partial"); err == nil {
			say("removed its partial archive %s.partial", rec.OCIArchive)
		}
	}
	return nil
}

// readRecord reads the record a claim's work directory holds.
func readRecord(cl claim) (*record, error) {
	if cl.work == "" {
		return nil, errors.New("its lease names no work directory")
	}
	if err := checkWork(cl.work); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(cl.work, recordFile))
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(cl.work, recordFile), err)
	}
	if r.Lease != cl.lease.ID || r.Container != cl.container {
		return nil, fmt.Errorf("%s is lease %s's of container %s, not this one's", filepath.Join(cl.work, recordFile), r.Lease, r.Container)
	}
	return &r, nil
}

// checkWork refuses a work directory path that create could not have
// made: the lease's label is removed with rm -r.
func checkWork(dir string) error {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || !strings.HasPrefix(filepath.Base(dir), workPrefix) {
		return fmt.Errorf("%q is not a work directory of oci-checkpoint create", dir)
	}
	return nil
}

// removeWork removes a dead claim's work directory, which is gone
// already where the create got that far in its own cleanup.
func removeWork(dir, lease string) error {
	if err := checkWork(dir); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s (lease %s's work directory) is not a directory: not removed", dir, lease)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove the work directory %s: %w", dir, err)
	}
	return nil
}

// dropLease removes what the lease holds that nothing else removes (the
// rootfs diff's snapshot views, content still being written), then the
// lease, collecting the content only it held.
func dropLease(ctx context.Context, c *client.Client, l leases.Lease, say func(string, ...any)) error {
	ls := c.LeasesService()
	rs, err := ls.ListResources(ctx, l)
	if err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("list lease %s's resources: %w", l.ID, err)
	}
	var gone []string
	for _, r := range rs {
		switch {
		case strings.HasPrefix(r.Type, "snapshots/"):
			sn := c.SnapshotService(strings.TrimPrefix(r.Type, "snapshots/"))
			if err := sn.Remove(ctx, r.ID); err != nil && !errdefs.IsNotFound(err) {
				return fmt.Errorf("remove snapshot %s (lease %s's): %w", r.ID, l.ID, err)
			}
			gone = append(gone, "snapshot "+r.ID)
		case r.Type == "ingests":
			if err := c.ContentStore().Abort(ctx, r.ID); err != nil && !errdefs.IsNotFound(err) {
				return fmt.Errorf("abort ingest %s (lease %s's): %w", r.ID, l.ID, err)
			}
			gone = append(gone, "ingest "+r.ID)
		}
	}
	if err := ls.Delete(ctx, l, leases.SynchronousDelete); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("remove lease %s: %w", l.ID, err)
	}
	say("removed its lease %s%s", l.ID, joinAll(", ", gone))
	return nil
}

func joinAll(sep string, s []string) string {
	if len(s) == 0 {
		return ""
	}
	return sep + strings.Join(s, sep)
}

// phaseIndex is name's place in phase.Order; -1 for none (begun no phase).
func phaseIndex(name string) int { return slices.Index(phase.Order, name) }

// quiesced says whether the engine may be quiesced by rec's create: a
// quiesce call was sent and the image not stored, or it was and the
// create was to resume it (--leave-running).
func (r *record) quiesced() bool {
	i := phaseIndex(r.Phase)
	switch {
	case r.Stored:
		return r.Finish == finishLeaveRunning
	case i == phaseIndex("quiesce"):
		return r.QuiesceSent > 0
	default:
		return i > phaseIndex("quiesce")
	}
}

// undoEngine brings the engine back as rec's create would have on a
// failure: thawed and resumed, or, once the image was stored, stopped
// (or resumed) as it was asked. A container removed or started again
// since has nothing to undo.
func undoEngine(ctx context.Context, c *client.Client, rec *record, say func(string, ...any)) error {
	if !rec.Stored && !rec.quiesced() {
		say("it had not changed the engine yet: nothing to resume")
		return nil
	}
	ctr, err := c.LoadContainer(ctx, rec.Container)
	if errdefs.IsNotFound(err) {
		say("the container is gone: no engine to bring back")
		return nil
	} else if err != nil {
		return err
	}
	task, err := ctr.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		say("the container has no task (it was stopped since): no engine to bring back")
		return nil
	} else if err != nil {
		return err
	}
	st, err := task.Status(ctx)
	if err != nil {
		return fmt.Errorf("ask containerd whether the container runs: %w", err)
	}
	if rec.TaskPid == 0 || task.Pid() != rec.TaskPid {
		say("the container runs another task now (it was started again since): no engine to bring back")
		return nil
	}
	if st.Status == client.Stopped {
		if !rec.Stored && rec.Finish != finishStopAtDump {
			say("the engine had ended (its task is stopped): nothing to resume")
			return nil
		}
		info, err := ctr.Info(ctx)
		if err != nil {
			return err
		}
		if err := deleteTask(ctx, task, info.Labels); err != nil {
			return err
		}
		if rec.Stored {
			say("deleted the container's stopped task, as create was asked to (the image %s it stored is kept)", rec.where())
		} else {
			say("deleted the container's task, which the dump had ended (--stop-at-dump): start the container again with 'nerdctl start %s'", rec.Container)
		}
		return nil
	}
	if start, err := procStart(int(rec.TaskPid)); err != nil || start != rec.TaskStart {
		say("the container runs another process now: no engine to bring back")
		return nil
	}
	if st.Status == client.Paused || st.Status == client.Pausing {
		if err := task.Resume(ctx); err != nil {
			return fmt.Errorf("the container is %s (the killed dump froze it) and unpausing it failed: %w (try 'nerdctl unpause %s')", st.Status, err, rec.Container)
		}
		say("unpaused the container (the killed dump had frozen it)")
	}
	if rec.Stored && rec.Finish != finishLeaveRunning {
		info, err := ctr.Info(ctx)
		if err != nil {
			return err
		}
		if err := stopTask(ctx, task, info.Labels); err != nil {
			return fmt.Errorf("stop the container, as create was asked to: %w", err)
		}
		say("stopped the container, as create was asked to (the image %s it stored is kept)", rec.where())
		return nil
	}
	return resumeEngine(ctx, ctr, task, rec, say)
}

// where names the image or archive a record's create wrote.
func (r *record) where() string {
	if r.OCIArchive != "" {
		return r.OCIArchive
	}
	return r.Image
}

// resumeEngine resumes the engine of rec's create: through the helper it
// started when that waits, which then sleeps for the next create to arm
// it (a second helper beside it would be dumped running from a replaced
// file); else with the profile's calls from here.
func resumeEngine(ctx context.Context, ctr client.Container, task client.Task, rec *record, say func(string, ...any)) error {
	spec, err := ctr.Spec(ctx)
	if err != nil {
		return err
	}
	o := Options{WakeDeadline: rec.WakeDeadline, QuiesceTimeout: 5 * time.Minute,
		Engine: engine.Profile{Name: rec.Engine, Port: rec.Port, Resume: rec.Resume}}
	if o.WakeDeadline <= 0 {
		o.WakeDeadline = 10 * time.Minute
	}
	eng := &engine.Client{HTTP: NetnsHTTP(rec.TaskPid), Base: fmt.Sprintf("http://127.0.0.1:%d", rec.Port)}
	if rec.URL != "" {
		eng = &engine.Client{Base: rec.URL}
	}
	eng.Exec = func(ctx context.Context, command string) error {
		_, err := execIn(ctx, task, spec, "rekindle-resume-"+randomID(), []string{"/bin/sh", "-c", command}, o.QuiesceTimeout)
		return err
	}
	hpid, mode := waitHelper(ctx, task, rec.Helper)
	root, err := inroot.Open(fmt.Sprintf("/proc/%d/root", rec.TaskPid))
	if err != nil {
		return err
	}
	defer root.Close()
	calls := make([]string, len(rec.Resume))
	for i, c := range rec.Resume {
		calls[i] = c.String()
	}
	if mode == "wait" {
		if err := resume(ctx, root, eng, o, true, task); err != nil {
			return fmt.Errorf("resume the engine through its wake helper (pid %d): %w", hpid, err)
		}
		say("resumed the engine through the wake helper it had started (pid %d), which stays, idle, for the next create", hpid)
		return nil
	}
	if err := resume(ctx, root, eng, o, false, task); err != nil {
		return fmt.Errorf("resume the engine (%s): %w", strings.Join(calls, ", "), err)
	}
	say("resumed the engine: %s", strings.Join(calls, ", "))
	return nil
}

// waitHelper finds the container's process that runs the helper file id
// (a host pid) and how it runs: "wait" (armed: it resumes on the wake
// file), "idle", or "" with no such process. One still starting (its
// "start" forks the waiter and exits) is waited for, 10s at most.
func waitHelper(ctx context.Context, task client.Task, id *fileID) (uint32, string) {
	if id == nil {
		return 0, ""
	}
	for end := time.Now().Add(10 * time.Second); ; {
		pid, mode := findHelper(ctx, task, *id)
		if mode != "start" || time.Now().After(end) {
			return pid, mode
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func findHelper(ctx context.Context, task client.Task, id fileID) (uint32, string) {
	procs, err := task.Pids(ctx)
	if err != nil {
		return 0, ""
	}
	// A "start" still forking the waiter goes first (it is waited out),
	// then the waiter a wake file wakes, then an idle helper.
	rank := map[string]int{"start": 3, "wait": 2, wake.IdleArg: 1}
	var found uint32
	mode := ""
	for _, p := range procs {
		var st unix.Stat_t
		if unix.Stat(fmt.Sprintf("/proc/%d/exe", p.Pid), &st) != nil || st.Dev != id.Dev || st.Ino != id.Ino {
			continue
		}
		if m := helperMode(p.Pid); found == 0 || rank[m] > rank[mode] {
			found, mode = p.Pid, m
		}
	}
	return found, mode
}

// helperMode is argv[1] of a helper process: start, wait or idle.
func helperMode(pid uint32) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return ""
	}
	argv := strings.Split(string(b), "\x00")
	if len(argv) < 2 {
		return ""
	}
	switch argv[1] {
	case "start", "wait", wake.IdleArg:
		return argv[1]
	}
	return ""
}

// RecoverOptions of Recover.
type RecoverOptions struct {
	// Containers to recover (IDs, names or ID prefixes); none: every
	// container a dead create left something of.
	Containers []string
	Progress   io.Writer // nil says nothing
}

// Recovered is one dead create undone, or that could not be.
type Recovered struct {
	Container string
	Claim     string // "oci-checkpoint create (pid N, started T)"
	Phase     string
	Err       error
}

// Recover undoes what creates that were killed left of the containers
// asked: a create still running is left alone (its error is errBusy's).
func Recover(ctx context.Context, c *client.Client, o RecoverOptions) ([]Recovered, error) {
	var ids []string
	if len(o.Containers) == 0 {
		all, err := claims(ctx, c, "")
		if err != nil {
			return nil, err
		}
		for _, cl := range all {
			if cl.owner.liveness() == dead && !slices.Contains(ids, cl.container) {
				ids = append(ids, cl.container)
			}
		}
	}
	for _, ref := range o.Containers {
		ctr, err := FindContainer(ctx, c, ref)
		switch {
		case err == nil:
			ids = append(ids, ctr.ID())
		case errdefs.IsNotFound(err):
			// A container removed since is known to its claims by ID.
			cls, cerr := claims(ctx, c, ref)
			if cerr != nil || len(cls) == 0 {
				return nil, err
			}
			ids = append(ids, ref)
		default:
			return nil, err
		}
	}
	var out []Recovered
	for _, id := range ids {
		rs, err := recoverContainer(ctx, c, id, "recover", o.Progress)
		out = append(out, rs...)
		if err != nil {
			out = append(out, Recovered{Container: id, Err: err})
		}
	}
	return out, nil
}

// recoverContainer claims container id for cmd and undoes the dead claims
// on it; the claim is let go after.
func recoverContainer(ctx context.Context, c *client.Client, id, cmd string, out io.Writer) ([]Recovered, error) {
	me, err := self()
	if err != nil {
		return nil, err
	}
	rec := &record{owner: me, Command: cmd, Lease: leasePrefix + randomID(), Container: id, Started: time.Now().UTC()}
	mine, dead, err := takeClaim(ctx, c, rec, containerRef(ctx, c, id))
	if err != nil {
		return nil, err
	}
	defer c.LeasesService().Delete(context.WithoutCancel(ctx), mine)
	return undoDead(ctx, c, dead, out), nil
}

// undoDead undoes dead claims in turn, saying so on out.
func undoDead(ctx context.Context, c *client.Client, dead []claim, out io.Writer) []Recovered {
	var rs []Recovered
	for _, cl := range dead {
		r := Recovered{Container: cl.container, Claim: cl.describe()}
		if rec, err := readRecord(cl); err == nil {
			r.Phase = rec.Phase
		}
		at := r.Phase
		if at == "" {
			at = "its start"
		}
		say := func(format string, a ...any) {
			if out != nil {
				fmt.Fprintf(out, "    "+format+"\n", a...)
			}
		}
		if out != nil {
			if cl.command == "recover" {
				fmt.Fprintf(out, "==> an earlier %s of container %s was killed; removing its lease:\n", cl.describe(), containerRef(ctx, c, cl.container))
			} else {
				fmt.Fprintf(out, "==> an earlier %s of container %s was killed at %s; undoing it:\n", cl.describe(), containerRef(ctx, c, cl.container), at)
			}
		}
		if r.Err = undoClaim(ctx, c, cl, say); r.Err != nil {
			r.Err = fmt.Errorf("container %s: undoing %s, killed at %s: %w; once the cause is fixed, 'oci-checkpoint recover %s' undoes the rest",
				containerRef(ctx, c, cl.container), cl.describe(), at, r.Err, cl.container)
		} else if out != nil {
			fmt.Fprintf(out, "==> undone\n")
		}
		rs = append(rs, r)
	}
	return rs
}

// containerRef is the container's name where nerdctl gave it one.
func containerRef(ctx context.Context, c *client.Client, id string) string {
	ctr, err := c.LoadContainer(ctx, id)
	if err != nil {
		return id
	}
	labels, err := ctr.Labels(ctx)
	if err != nil {
		return id
	}
	return containerName(id, labels)
}
