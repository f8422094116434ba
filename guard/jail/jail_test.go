// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package jail

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	criurpc "github.com/checkpoint-restore/go-criu/v8/rpc"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// jailCheck is run in the jail by /bin/sh: a failed check prints its name.
const jailCheck = `
check() { name=$1; shift; "$@" >/dev/null 2>&1 || echo "FAIL: $name"; }
check "the bound folder's file is there" grep -qx hello "$ALLOWED/file"
check "the bound folder is writable" touch "$ALLOWED/new"
check "the bound file is there" grep -qx one "$FILE"
check "the read-only folder is there" test -f "$RO/file"
check "the read-only folder is read-only" sh -c '! touch "$RO/new"'
check "the canary folder is absent" sh -c '! test -e "$CANARY"'
check "the test's folder holds only what is bound" test "$(ls "$DIR" | tr '\n' ' ')" = "allowed file ro "
check "the host's root holds only the jail" sh -c '! test -e /root && ! test -e /var && ! test -e /home && ! test -e /mnt'
check "/usr is read-only" sh -c '! touch /usr/.jail-test'
check "/etc is read-only" sh -c '! touch /etc/.jail-test'
check "/bin/sh runs" /bin/sh -c true
check "/ is read-only" sh -c '! mkdir /.jail-test'
check "every mount of /sys is read-only" awk '$5 ~ "^/sys" && $6 !~ /(^|,)ro(,|$)/ { bad = 1 } END { exit bad }' /proc/self/mountinfo
check "/sys/fs/cgroup is read-only" sh -c 'if mkdir /sys/fs/cgroup/.jail-test; then rmdir /sys/fs/cgroup/.jail-test; exit 1; fi'
check "/sys/bus/pci is readable" test -d /sys/bus/pci/devices
check "/tmp holds only the way to the binds" test "$(ls -A /tmp | tr '\n' ' ')" = "$TMPTOP"
check "/tmp is writable" touch /tmp/x
check "/run is empty" test -z "$(ls -A /run)"
check "/dev/null works" sh -c 'test -c /dev/null && echo x >/dev/null'
check "/dev holds no other device of the host's" sh -c '! test -e "$HOSTDEV"'
check "/dev is read-only" sh -c '! touch /dev/x'
check "/dev/ptmx is a devpts of the jail's" test -c /dev/pts/ptmx
check "/proc is writable where CRIU writes" test -w /proc/sys/kernel/ns_last_pid
echo "ns: $(readlink /proc/self/ns/mnt)"
`

func readStatus(task string) string {
	b, _ := os.ReadFile(task + "/stat")
	return string(b) + " pid=" + strconv.Itoa(os.Getpid())
}

func mntNS(t *testing.T, proc string) string {
	t.Helper()
	ns, err := os.Readlink(proc + "/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// threadsInNS waits for every thread of this process to be in the mount
// namespace ns: the jail's thread ends with its goroutine.
func threadsInNS(t *testing.T, ns string) {
	t.Helper()
	var other []string
	for range 50 {
		other = nil
		tasks, _ := filepath.Glob("/proc/self/task/*")
		for _, task := range tasks {
			if n, err := os.Readlink(task + "/ns/mnt"); err == nil && n != ns {
				other = append(other, task+" "+readStatus(task))
			}
		}
		if len(other) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("threads of runc left in another mount namespace: %v", other)
}

func TestCriuJail(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("requires root")
	}
	dir := t.TempDir()
	dir, _ = filepath.EvalSymlinks(dir)
	allowed, ro, canary := filepath.Join(dir, "allowed"), filepath.Join(dir, "ro"), filepath.Join(dir, "canary")
	file := filepath.Join(dir, "file")
	for _, d := range []string{allowed, ro, canary} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, text := range map[string]string{
		allowed + "/file": "hello", ro + "/file": "ro", canary + "/canary": "safe", file: "one",
	} {
		if err := os.WriteFile(name, []byte(text+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hostDev := ""
	for _, d := range []string{"/dev/mem", "/dev/kmsg", "/dev/console", "/dev/loop-control"} {
		if _, err := os.Stat(d); err == nil {
			hostDev = d
			break
		}
	}
	if hostDev == "" {
		t.Fatal("no device of the host's to look for in the jail")
	}

	j, err := newCriuJail()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []struct {
		path         string
		ro, optional bool
	}{{allowed, false, false}, {ro, true, false}, {file, false, false}, {filepath.Join(dir, "missing"), false, true}} {
		if err := j.bind(b.path, b.ro, b.optional); err != nil {
			t.Fatal(err)
		}
	}
	tmpTop := ""
	if rel, ok := strings.CutPrefix(dir, "/tmp/"); ok {
		tmpTop = strings.Split(rel, "/")[0] + " "
	}
	hostNS := mntNS(t, "/proc/self")
	var out bytes.Buffer
	cmd := exec.Command("/bin/sh", "-c", jailCheck)
	cmd.Env = append(os.Environ(), "DIR="+dir, "ALLOWED="+allowed, "RO="+ro, "CANARY="+canary, "FILE="+file, "HOSTDEV="+hostDev, "TMPTOP="+tmpTop)
	cmd.Stdout, cmd.Stderr = &out, &out
	inJail := false
	if err := j.start(cmd, func() error {
		// Runs on the jail's thread, whose root is the jail's now.
		_, err := os.Stat(canary)
		inJail = os.IsNotExist(err)
		return nil
	}); err != nil {
		t.Fatalf("jail %s: %v", j, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if !inJail {
		t.Error("the jail's hook did not run in the jail")
	}
	var jailNS string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if ns, ok := strings.CutPrefix(l, "ns: "); ok {
			jailNS = ns
		} else {
			t.Error(l)
		}
	}
	// The command was forked by the jail's thread, in its namespace.
	if jailNS == "" || jailNS == hostNS {
		t.Errorf("the command ran in mount namespace %q, the host's is %q", jailNS, hostNS)
	}
	// This thread, every other one, and the host's files are as they were.
	if ns := mntNS(t, "/proc/thread-self"); ns != hostNS {
		t.Errorf("this thread moved to mount namespace %s", ns)
	}
	threadsInNS(t, hostNS)
	if b, err := os.ReadFile(canary + "/canary"); err != nil || string(b) != "safe\n" {
		t.Errorf("the canary: %q, %v", b, err)
	}
	if _, err := os.Stat(allowed + "/new"); err != nil {
		t.Errorf("the file written to the bound folder: %v", err)
	}
}

// TestCriuJailMakesNoMountpointOnTheHost: a mountpoint missing below a
// bound host folder fails the jail, naming it, and nothing is made there.
func TestCriuJailMakesNoMountpointOnTheHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("requires root")
	}
	dir := t.TempDir()
	dir, _ = filepath.EvalSymlinks(dir)
	host, other := filepath.Join(dir, "host"), filepath.Join(dir, "other")
	for _, d := range []string{host, other} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	j, err := newCriuJail()
	if err != nil {
		t.Fatal(err)
	}
	if err := j.bind(host, false, false); err != nil {
		t.Fatal(err)
	}
	j.add(&jailMount{kind: jailBind, dst: host + "/sub/mnt", src: other, dir: true})
	cmd := exec.Command("/bin/true")
	err = j.start(cmd, nil)
	if err == nil {
		_ = cmd.Wait()
		t.Fatal("the jail was built")
	}
	if !strings.Contains(err.Error(), "bind "+other+" at "+host+"/sub/mnt") || !strings.Contains(err.Error(), "missing below a bound folder") {
		t.Errorf("the error does not name the bind and why: %v", err)
	}
	if cmd.Process != nil {
		t.Error("the command started")
	}
	if _, err := os.Stat(host + "/sub"); !os.IsNotExist(err) {
		t.Errorf("a folder was made in the host's folder: %v", err)
	}
	threadsInNS(t, mntNS(t, "/proc/self"))
	if err := j.bind("relative/path", false, true); err == nil {
		t.Error("a relative path was taken")
	}
}

// TestRestoreJail checks what a restore's jail holds: what runc names to
// CRIU by host path, and nothing an image names.
func TestRestoreJail(t *testing.T) {
	dir := t.TempDir()
	dir, _ = filepath.EvalSymlinks(dir)
	p := func(name string) string { return filepath.Join(dir, name) }
	for _, d := range []string{"state", "img", "work", "vol", "bin"} {
		if err := os.Mkdir(p(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"runc.conf", "bin/criu"} {
		if err := os.WriteFile(p(f), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("vol", p("vol-link")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", p("bin")+":relative")
	t.Setenv("CRIU_LIBS_DIR", "")

	req := &criurpc.CriuReq{Opts: &criurpc.CriuOpts{ConfigFile: proto.String(p("runc.conf"))}}
	for _, src := range []string{p("vol-link"), p("missing"), "/sys/fs/cgroup/x", "/proc/1", "/dev/null", "/tmp"} {
		req.Opts.ExtMnt = append(req.Opts.ExtMnt, &criurpc.ExtMountMap{Key: proto.String("/k"), Val: proto.String(src)})
	}
	j, err := restoreJail(req, Dirs{State: p("state"), Images: p("img"), Work: p("work")}, p("bin/criu"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range j.mounts {
		switch m.kind {
		case jailBind:
			got[m.dst] = map[bool]string{true: "ro", false: "rw"}[m.ro]
		case jailLink:
			got[m.dst] = "-> " + m.src
		default:
			got[m.dst] = kindName(m)
		}
	}
	for dst, want := range map[string]string{
		p("state"): "rw", p("img"): "rw", p("work"): "rw",
		p("vol"): "ro", p("vol-link"): "-> " + p("vol"), "/dev/null": "rw",
		p("runc.conf"): "ro", p("bin"): "ro", "/sys": "ro", "/usr": "ro", "/proc": "proc",
		"/run": "tmpfs", "/dev": "tmpfs", "/": "tmpfs",
	} {
		if got[dst] != want {
			t.Errorf("%s: %q, want %q", dst, got[dst], want)
		}
	}
	for _, dst := range []string{p("missing"), "/sys/fs/cgroup/x", "/proc/1", "relative", "/root", "/var", "/home"} {
		if w, ok := got[dst]; ok {
			t.Errorf("%s is in the jail (%s)", dst, w)
		}
	}
	// The host's /tmp, bound by the config, over the jail's, as it is.
	var tmp []string
	for _, m := range j.mounts {
		if m.dst == "/tmp" {
			tmp = append(tmp, kindName(m)+map[bool]string{true: " ro", false: " rw"}[m.ro])
		}
	}
	if strings.Join(tmp, ", ") != "tmpfs rw, bind /tmp rw" {
		t.Errorf("/tmp holds %v, want the jail's tmpfs under the host's /tmp", tmp)
	}
	// The host's root cannot be held.
	req.Opts.ExtMnt = append(req.Opts.ExtMnt, &criurpc.ExtMountMap{Key: proto.String("/host"), Val: proto.String("/")})
	if _, err := restoreJail(req, Dirs{State: p("state"), Images: p("img"), Work: p("work")}, p("bin/criu")); err == nil || !strings.Contains(err.Error(), "host's root") {
		t.Errorf("a bind of the host's root: %v", err)
	}
}

// TestDetachedDir: the runc shim hands a restore its decoded pages in a
// tmpfs of no namespace, as /proc/PID/fd/N; that one is not bound.
func TestDetachedDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("requires root")
	}
	fsfd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		t.Skipf("fsopen: %v", err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigCreate(fsfd); err != nil {
		t.Fatal(err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(mfd)
	if !detachedDir("/proc/self/fd/" + strconv.Itoa(mfd)) {
		t.Error("a detached tmpfs is taken for one of runc's mounts")
	}
	if detachedDir(t.TempDir()) {
		t.Error("a folder of runc's mounts is taken for a detached one")
	}
}
