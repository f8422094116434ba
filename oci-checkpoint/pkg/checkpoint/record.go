package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"

	"rekindle.local/oci-checkpoint/pkg/engine"
)

// A create in progress is recorded on the host, never in the container: a
// lease in containerd's store (labelled with the container and the
// process that holds it) is the index a later create or recover finds it
// by, and record.json in its work directory says how far it got. A create
// SIGKILLed (the OOM killer, kill -9) cannot undo what it did; the next
// create of that container, or oci-checkpoint recover, reads the record
// and undoes it (recover.go). recover claims a container the same way.

// The lease labels of a claim.
const (
	labelCommand   = "org.rekindle.create.command" // create or recover
	labelContainer = "org.rekindle.create.container"
	labelPid       = "org.rekindle.create.pid"
	labelPidStart  = "org.rekindle.create.pid-start" // /proc/PID/stat's starttime
	labelBoot      = "org.rekindle.create.boot"      // the kernel's boot_id
	labelPidNS     = "org.rekindle.create.pid-ns"
	labelWork      = "org.rekindle.create.work-dir"
)

// leasePrefix begins the ID of a claim's lease.
const leasePrefix = "rekindle-create-"

// recordFile is the record's name in the work directory; workPrefix
// begins the work directory's name.
const (
	recordFile = "record.json"
	workPrefix = "oci-checkpoint-"
)

// owner is the process a claim belongs to, as the host sees it.
type owner struct {
	Pid      int    `json:"pid"`
	PidStart uint64 `json:"pid_start"`
	Boot     string `json:"boot"`
	PidNS    string `json:"pid_ns"`
}

// self is this process as owner.
func self() (owner, error) {
	o := owner{Pid: os.Getpid()}
	var err error
	if o.PidStart, err = procStart(o.Pid); err != nil {
		return o, err
	}
	o.Boot, o.PidNS = bootID(), pidNS("self")
	return o, nil
}

// liveness of a claim's owner.
type liveness int

const (
	dead liveness = iota
	alive
	unknown // another pid namespace: this process cannot see it
)

func (o owner) liveness() liveness {
	if o.Boot != "" && o.Boot != bootID() {
		return dead // the host was restarted since
	}
	if o.PidNS != "" && o.PidNS != pidNS("self") {
		return unknown
	}
	if st, err := procStart(o.Pid); err == nil && st == o.PidStart {
		return alive
	}
	return dead // gone, or its pid is another process's now
}

// procStart is /proc/PID/stat's starttime (clock ticks after boot), which
// with the pid names one process over the life of the host.
func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return statStart(string(b))
}

// statStart reads starttime, the 22nd field, from a /proc/PID/stat line;
// the second field (comm, in parentheses) may hold spaces and ')'.
func statStart(stat string) (uint64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("no command in /proc/PID/stat")
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 20 {
		return 0, errors.New("short /proc/PID/stat")
	}
	return strconv.ParseUint(f[19], 10, 64)
}

func bootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}

func pidNS(pid string) string {
	s, _ := os.Readlink("/proc/" + pid + "/ns/pid")
	return s
}

// record is what a create in progress has done, as far as undoing it
// needs: written to its work directory before each step that changes
// the engine, so that a create killed at any point is undone from it.
type record struct {
	owner
	Command   string    `json:"command"`
	Lease     string    `json:"lease"`
	Container string    `json:"container"`
	Started   time.Time `json:"started"`
	Work      string    `json:"work_dir"`
	// TaskPid and TaskStart name the engine's init process: a container
	// started again since runs another engine, which has nothing to undo.
	TaskPid   uint32 `json:"task_pid,omitempty"`
	TaskStart uint64 `json:"task_start,omitempty"`

	Image      string `json:"image,omitempty"`
	OCIArchive string `json:"oci_archive,omitempty"`
	Finish     string `json:"finish,omitempty"` // finishStop, finishLeaveRunning or finishStopAtDump

	// How to resume the engine: create's profile, as the preflight left it.
	Engine       string        `json:"engine,omitempty"`
	Port         int           `json:"port,omitempty"`
	URL          string        `json:"url,omitempty"`
	Resume       []engine.Call `json:"resume,omitempty"`
	WakeDeadline time.Duration `json:"wake_deadline,omitempty"`

	// Phase is the phase begun last (phase.Order).
	Phase string `json:"phase,omitempty"`
	// QuiesceSent counts the quiesce calls begun: with none the engine
	// was not changed.
	QuiesceSent int `json:"quiesce_sent,omitempty"`
	// Helper is the injected helper's file, once written: the process
	// that runs it is the helper this create started.
	Helper *fileID `json:"helper,omitempty"`
	// Stored: the image is stored (or the archive written).
	Stored bool `json:"stored,omitempty"`
}

// fileID names a file by device and inode.
type fileID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

const (
	finishStop         = "stop"
	finishLeaveRunning = "leave-running"
	finishStopAtDump   = "stop-at-dump"
)

// save writes the record into its work directory, whole or not at all.
func (r *record) save() error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(r.Work, recordFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("record of the checkpoint in %s: %w", r.Work, err)
	}
	if err := os.Rename(tmp, filepath.Join(r.Work, recordFile)); err != nil {
		return fmt.Errorf("record of the checkpoint in %s: %w", r.Work, err)
	}
	return nil
}

// labels are the lease's: the container and the owner.
func (r *record) labels() map[string]string {
	l := map[string]string{
		labelCommand: r.Command, labelContainer: r.Container,
		labelPid: strconv.Itoa(r.Pid), labelPidStart: strconv.FormatUint(r.PidStart, 10),
		labelBoot: r.Boot, labelPidNS: r.PidNS,
	}
	if r.Work != "" {
		l[labelWork] = r.Work
	}
	for k, v := range l {
		if v == "" {
			delete(l, k) // containerd refuses empty label values
		}
	}
	return l
}

// claim is one lease of a create or recover, as another finds it.
type claim struct {
	lease leases.Lease
	owner owner
	// command and container as labelled; work is the work dir, "" for
	// recover's.
	command, container, work string
}

func claimOf(l leases.Lease) claim {
	c := claim{lease: l, command: l.Labels[labelCommand], container: l.Labels[labelContainer], work: l.Labels[labelWork]}
	c.owner.Pid, _ = strconv.Atoi(l.Labels[labelPid])
	c.owner.PidStart, _ = strconv.ParseUint(l.Labels[labelPidStart], 10, 64)
	c.owner.Boot, c.owner.PidNS = l.Labels[labelBoot], l.Labels[labelPidNS]
	return c
}

// before orders claims by creation, then ID: of two claims made at once
// each sees the other and the same one goes first.
func (c claim) before(d claim) bool {
	if !c.lease.CreatedAt.Equal(d.lease.CreatedAt) {
		return c.lease.CreatedAt.Before(d.lease.CreatedAt)
	}
	return c.lease.ID < d.lease.ID
}

// describe is "create (pid N, started T)".
func (c claim) describe() string {
	cmd := c.command
	if cmd == "" {
		cmd = "create"
	}
	return fmt.Sprintf("oci-checkpoint %s (pid %d, started %s)", cmd, c.owner.Pid, c.lease.CreatedAt.Local().Format("2006-01-02 15:04:05"))
}

// claims lists the claims on container (all of them when container is
// ""), oldest first.
func claims(ctx context.Context, c *client.Client, container string) ([]claim, error) {
	filter := fmt.Sprintf("labels.%q", labelContainer)
	if container != "" {
		filter = fmt.Sprintf("labels.%q==%q", labelContainer, container)
	}
	ls, err := c.LeasesService().List(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("list the leases of checkpoints in progress: %w", err)
	}
	out := make([]claim, 0, len(ls))
	for _, l := range ls {
		if strings.HasPrefix(l.ID, leasePrefix) {
			out = append(out, claimOf(l))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].before(out[j]) })
	return out, nil
}

// errBusy: another live create or recover holds the container.
var errBusy = errors.New("is held by another oci-checkpoint")

// takeClaim leases container for rec (its labels) and looks at the other
// claims on it: one alive and made before this one is refused (errBusy;
// this claim is let go), dead ones are returned, oldest first, for the
// caller to undo. ref names the container in errors. The lease expires
// in a day as a last resort: a claim is let go by its owner, or undone by
// the next.
func takeClaim(ctx context.Context, c *client.Client, rec *record, ref string) (mine leases.Lease, deadOnes []claim, err error) {
	ls := c.LeasesService()
	mine, err = ls.Create(ctx, leases.WithID(rec.Lease), leases.WithExpiration(24*time.Hour), leases.WithLabels(rec.labels()))
	if err != nil {
		return mine, nil, fmt.Errorf("lease for the checkpoint: %w", err)
	}
	all, err := claims(ctx, c, rec.Container)
	if err != nil {
		ls.Delete(context.WithoutCancel(ctx), mine)
		return mine, nil, err
	}
	me := claimOf(mine)
	for _, o := range all {
		if o.lease.ID == mine.ID {
			continue
		}
		switch o.owner.liveness() {
		case alive:
			if o.before(me) {
				ls.Delete(context.WithoutCancel(ctx), mine)
				return mine, nil, &busyError{fmt.Sprintf("container %s is held by %s, which is still running: wait for it to end, or interrupt it (SIGINT undoes what it did)",
					ref, o.describe())}
			}
		case unknown:
			if o.before(me) {
				ls.Delete(context.WithoutCancel(ctx), mine)
				return mine, nil, &busyError{fmt.Sprintf("container %s is held by %s in another pid namespace (%s), whose process this one cannot see: "+
					"run oci-checkpoint there, or once that process has ended remove its lease ('ctr leases rm %s') and run 'oci-checkpoint recover %s' there",
					ref, o.describe(), o.owner.PidNS, o.lease.ID, ref)}
			}
		default:
			deadOnes = append(deadOnes, o)
		}
	}
	return mine, deadOnes, nil
}

// busyError is a claim refused: errors.Is(err, errBusy).
type busyError struct{ msg string }

func (e *busyError) Error() string        { return e.msg }
func (e *busyError) Is(target error) bool { return target == errBusy }
