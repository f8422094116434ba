package checkpoint

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/leases"
)

func TestStatStart(t *testing.T) {
	// comm may hold spaces and parentheses: fields count from the last ')'.
	line := "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100 18446744073709551615\n"
	got, err := statStart(line)
	if err != nil || got != 987654 {
		t.Fatalf("statStart = %d, %v; want 987654", got, err)
	}
	if _, err := statStart("4242 (short) S 1 2"); err == nil {
		t.Error("a short stat line was read")
	}
	if _, err := statStart("garbage"); err == nil {
		t.Error("a line without a command was read")
	}
}

// TestLiveness: a claim's owner is alive while its process runs, dead once
// it exits or when its pid names a later process or another boot, and
// unknown in another pid namespace.
func TestLiveness(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep(1):", err)
	}
	pid := cmd.Process.Pid
	start, err := procStart(pid)
	if err != nil {
		t.Fatal(err)
	}
	me, err := self()
	if err != nil {
		t.Fatal(err)
	}
	o := owner{Pid: pid, PidStart: start, Boot: me.Boot, PidNS: me.PidNS}
	if got := o.liveness(); got != alive {
		t.Errorf("running process: liveness %d, want alive", got)
	}
	reused := o
	reused.PidStart++
	if got := reused.liveness(); got != dead {
		t.Errorf("pid of a later process: liveness %d, want dead", got)
	}
	rebooted := o
	rebooted.Boot = "another-boot"
	if got := rebooted.liveness(); got != dead {
		t.Errorf("another boot: liveness %d, want dead", got)
	}
	elsewhere := o
	elsewhere.PidNS = "pid:[1]"
	if me.PidNS != "" && elsewhere.liveness() != unknown {
		t.Errorf("another pid namespace: liveness %d, want unknown", elsewhere.liveness())
	}
	cmd.Process.Kill()
	cmd.Wait()
	if got := o.liveness(); got != dead {
		t.Errorf("exited process: liveness %d, want dead", got)
	}
}

// TestClaimOrder: two claims made at once order the same way from both
// sides, so exactly one goes on.
func TestClaimOrder(t *testing.T) {
	at := time.Now()
	a := claim{lease: leases.Lease{ID: leasePrefix + "a", CreatedAt: at}}
	b := claim{lease: leases.Lease{ID: leasePrefix + "b", CreatedAt: at}}
	c := claim{lease: leases.Lease{ID: leasePrefix + "0", CreatedAt: at.Add(time.Millisecond)}}
	if !a.before(b) || b.before(a) {
		t.Error("claims of the same time are not ordered by ID")
	}
	if !b.before(c) || c.before(b) {
		t.Error("an older claim does not go first")
	}
	if a.before(a) {
		t.Error("a claim goes before itself")
	}
}

// TestClaimLabels: the lease's labels give back the owner, container and
// work directory; empty values are left out (containerd refuses them).
func TestClaimLabels(t *testing.T) {
	r := &record{owner: owner{Pid: 12, PidStart: 34, Boot: "b"}, Command: "create", Lease: leasePrefix + "x", Container: "ctr1", Work: "/tmp/" + workPrefix + "1"}
	l := r.labels()
	if _, ok := l[labelPidNS]; ok {
		t.Errorf("an empty label is kept: %v", l)
	}
	cl := claimOf(leases.Lease{ID: r.Lease, Labels: l})
	if cl.owner != r.owner || cl.container != "ctr1" || cl.work != r.Work || cl.command != "create" {
		t.Errorf("claim from labels %v = %+v", l, cl)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	work, err := os.MkdirTemp(t.TempDir(), workPrefix)
	if err != nil {
		t.Fatal(err)
	}
	r := &record{Command: "create", Lease: leasePrefix + "x", Container: "ctr1", Work: work, Phase: "dump", Helper: &fileID{Dev: 1, Ino: 2}}
	if err := r.save(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(work, recordFile+".tmp")); err == nil {
		t.Error("the temporary record is left")
	}
	got, err := readRecord(claim{lease: leases.Lease{ID: r.Lease}, container: "ctr1", work: work})
	if err != nil || got.Phase != "dump" || got.Helper == nil || *got.Helper != *r.Helper {
		t.Fatalf("readRecord = %+v, %v", got, err)
	}
	// A record is only its own lease's: another lease naming this folder
	// (or another container) does not undo from it.
	if _, err := readRecord(claim{lease: leases.Lease{ID: leasePrefix + "y"}, container: "ctr1", work: work}); err == nil {
		t.Error("another lease's record was read")
	}
	if _, err := readRecord(claim{lease: leases.Lease{ID: r.Lease}, container: "ctr2", work: work}); err == nil {
		t.Error("another container's record was read")
	}
}

// TestRemoveWork: only a folder create could have made is removed.
func TestRemoveWork(t *testing.T) {
	base := t.TempDir()
	for _, dir := range []string{"/", "relative/" + workPrefix + "1", base, base + "/../" + filepath.Base(base) + "/" + workPrefix + "1", filepath.Join(base, "x")} {
		if err := removeWork(dir, "l"); err == nil {
			t.Errorf("removeWork(%q) did not refuse", dir)
		}
	}
	if _, err := os.Stat(base); err != nil {
		t.Fatal("a refused folder was removed")
	}
	work := filepath.Join(base, workPrefix+"1")
	os.MkdirAll(filepath.Join(work, "archive"), 0o700)
	if err := removeWork(work, "l"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(work); !os.IsNotExist(err) {
		t.Error("the work directory is left")
	}
	if err := removeWork(work, "l"); err != nil {
		t.Errorf("a work directory already gone: %v", err)
	}
	// A symlink in its place is not followed.
	target := filepath.Join(base, "keep")
	os.Mkdir(target, 0o700)
	os.Symlink(target, work)
	if err := removeWork(work, "l"); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("removeWork of a symlink: %v", err)
	}
	if _, err := os.Stat(target); err != nil {
		t.Error("the symlink's target was removed")
	}
}

// TestQuiescedPhases: which killed creates left the engine to resume.
func TestQuiescedPhases(t *testing.T) {
	for _, tc := range []struct {
		r    record
		want bool
	}{
		{record{}, false},
		{record{Phase: "health"}, false},
		{record{Phase: "preflight"}, false},
		{record{Phase: "quiesce"}, false}, // no call sent yet
		{record{Phase: "quiesce", QuiesceSent: 1}, true},
		{record{Phase: "inject-helper"}, true},
		{record{Phase: "record"}, true},
		{record{Phase: "dump"}, true},
		{record{Phase: "package"}, true},
		{record{Phase: "package", Stored: true, Finish: finishStop}, false},
		{record{Phase: "stop", Stored: true, Finish: finishStop}, false},
		{record{Phase: "resume", Stored: true, Finish: finishLeaveRunning}, true},
	} {
		if got := tc.r.quiesced(); got != tc.want {
			t.Errorf("%+v: quiesced %v, want %v", tc.r, got, tc.want)
		}
	}
}
