// rekindle-wake is injected into an engine container before it is
// checkpointed. It waits, holding no socket or open file, until
// /.rekindle/wake exists (the file travels in the checkpoint's rootfs diff,
// so it appears when the container is restored), then calls the engine's
// resume endpoints and records the outcome in /.rekindle/status.
//
//	rekindle-wake start --engine sglang --port 30000 [--resume CALL]...
//
// start forks the waiter into its own session and returns once it runs;
// the waiter is reparented to the container's init, so CRIU dumps it with
// the engine.
//
// Once it has woken the engine the helper does not exit: a child of the
// engine's PID 1 that exits stays a zombie unless PID 1 reaps it, and most
// engines' (python, a shell script) never do; the zombie was carried into
// every later checkpoint. It execs itself as "rekindle-wake idle", which
// holds no file and sleeps, and the next start (a checkpoint of the
// restored engine) arms that one again instead of forking a second:
// whatever PID 1 does, a container holds one helper and no zombie.
//
// It holds no file in its cgroup either: Go's container-aware GOMAXPROCS
// keeps cpu.cfs_quota_us (cpu.max) open, and in a restored container that
// file's path names the container, so a second checkpoint of it would not
// restore anywhere else (CRIU: "Can't open file sys/fs/cgroup/cpu/default/ID/...").
//
//go:debug containermaxprocs=0
//go:debug updatemaxprocs=0
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"rekindle.local/oci-checkpoint/pkg/engine"
	"rekindle.local/oci-checkpoint/pkg/wake"
)

// init names the process: the waiter and the idle helper are exec'd
// through /proc/self/exe, which would call them "exe" in ps and CRIU's
// images. It runs on the main thread, whose name is the process's.
func init() {
	name := []byte(filepath.Base(wake.HelperPath) + "\x00")
	unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0)
}

type calls []string

func (c *calls) String() string     { return fmt.Sprint(*c) }
func (c *calls) Set(s string) error { *c = append(*c, s); return nil }

func main() {
	if len(os.Args) == 2 && os.Args[1] == wake.IdleArg {
		idle()
		return
	}
	if len(os.Args) < 2 || (os.Args[1] != "start" && os.Args[1] != "wait") {
		fmt.Fprintln(os.Stderr, "usage: rekindle-wake start|wait --engine NAME --port N [--resume CALL]... [--deadline D] [--poll D]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	name := fs.String("engine", "sglang", "engine profile: "+fmt.Sprint(engine.Names))
	port := fs.Int("port", 0, "engine port inside the container (0: the profile's)")
	deadline := fs.Duration("deadline", 10*time.Minute, "give up resuming after this long")
	poll := fs.Duration("poll", 5*time.Millisecond, "how often to look for the wake file")
	var resume calls
	fs.Var(&resume, "resume", "resume call ('POST /path [JSON]' or 'exec CMD'); replaces the profile's, repeatable")
	fs.Parse(os.Args[2:])

	p, err := engine.Lookup(*name, *port)
	if err != nil {
		fail(err)
	}
	if p.Resume, err = engine.Override(p.Resume, resume); err != nil {
		fail(err)
	}
	if len(p.Resume) == 0 {
		fail(errors.New("no resume calls: pass --resume"))
	}
	if os.Args[1] == "start" {
		start()
		return
	}
	wait(p, *poll, *deadline)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "rekindle-wake:", err)
	os.Exit(1)
}

// start runs "wait" with the same flags in a new session, stdio on
// /dev/null, and returns once the waiter has written its pid file.
func start() {
	if err := os.MkdirAll(wake.Dir, 0o755); err != nil {
		fail(err)
	}
	os.Remove(wake.PidFile)
	if pid, ok := rearm(os.Args[2:]); ok {
		fmt.Println(pid)
		return
	}
	// The waiter runs this very file, not whatever the path names by now.
	cmd := exec.Command("/proc/self/exe", append([]string{"wait"}, os.Args[2:]...)...)
	cmd.Args[0] = os.Args[0]
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	for i := 0; i < 500; i++ {
		if b, err := os.ReadFile(wake.PidFile); err == nil && string(b) == strconv.Itoa(cmd.Process.Pid) {
			fmt.Println(cmd.Process.Pid)
			return // the waiter is orphaned to the container's init when we exit
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Kill()
	fail(errors.New("the waiter did not start within 5s"))
}

func wait(p engine.Profile, poll, deadline time.Duration) {
	if err := os.WriteFile(wake.PidFile+".tmp", []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.Exit(1)
	}
	if err := os.Rename(wake.PidFile+".tmp", wake.PidFile); err != nil {
		os.Exit(1)
	}
	var st syscall.Stat_t
	for syscall.Stat(wake.WakeFile, &st) != nil {
		time.Sleep(poll)
	}
	s := wake.Status{Engine: p.Name, WokeAt: time.Now(), Loopback: loopbackUp()}
	var marker struct {
		CheckpointedAt string `json:"checkpointed_at"`
	}
	if b, err := os.ReadFile(wake.WakeFile); err == nil && json.Unmarshal(b, &marker) == nil {
		s.CheckpointedAt = marker.CheckpointedAt
	}

	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	c := &engine.Client{
		HTTP: &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil,
			DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext}},
		Base: fmt.Sprintf("http://127.0.0.1:%d", p.Port),
	}
	s.Outcome = wake.Resumed
	for _, call := range p.Resume {
		t0 := time.Now()
		n, err := c.Retry(ctx, call)
		r := wake.CallResult{Call: call.String(), Attempts: n, Seconds: time.Since(t0).Seconds()}
		if err != nil {
			r.Error = err.Error()
			s.Outcome, s.Error = wake.Failed, fmt.Sprintf("resume call %s failed: %v", call, err)
		}
		s.Calls = append(s.Calls, r)
		if err != nil {
			break
		}
	}
	s.DoneAt = time.Now()
	s.ResumeSeconds = s.DoneAt.Sub(s.WokeAt).Seconds()
	b, _ := json.MarshalIndent(s, "", "  ")
	os.WriteFile(wake.StatusFile+".tmp", append(b, '\n'), 0o644)
	os.Rename(wake.StatusFile+".tmp", wake.StatusFile)
	os.Remove(wake.PidFile)

	// The container's log is its init's stdout: say the outcome there too.
	line := fmt.Sprintf("rekindle-wake: engine %s resumed in %.3fs\n", p.Name, s.ResumeSeconds)
	if s.Outcome != wake.Resumed {
		line = fmt.Sprintf("rekindle-wake: ERROR: %s (after %.3fs); see %s\n", s.Error, s.ResumeSeconds, wake.StatusFile)
	}
	if f, err := os.OpenFile("/proc/1/fd/1", os.O_WRONLY|os.O_APPEND, 0); err == nil {
		f.WriteString(line)
		f.Close()
	}
	goIdle()
}

// goIdle becomes "rekindle-wake idle" (the same file, a fresh process
// image: nothing of the wake is kept); if the exec fails it sleeps as it is.
func goIdle() {
	syscall.Exec("/proc/self/exe", []string{os.Args[0], wake.IdleArg}, os.Environ())
	idle()
}

// idle sleeps until start arms it: SIGUSR1 with the flags in the args
// file, then it execs the helper file now at wake.HelperPath as a waiter
// with them (the file the new checkpoint wrote and checks runs).
func idle() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	for range ch {
		b, err := os.ReadFile(wake.ArgsFile)
		var args []string
		if err != nil || json.Unmarshal(b, &args) != nil {
			continue
		}
		os.Remove(wake.ArgsFile)
		syscall.Exec(wake.HelperPath, append([]string{wake.HelperPath, "wait"}, args...), os.Environ())
	}
}

// rearm hands args to an idle helper of this container, if there is one,
// and returns its pid once it waits with them.
func rearm(args []string) (int, bool) {
	pid := findIdle("/proc")
	if pid == 0 {
		return 0, false
	}
	b, _ := json.Marshal(args)
	if os.WriteFile(wake.ArgsFile+".tmp", b, 0o644) != nil || os.Rename(wake.ArgsFile+".tmp", wake.ArgsFile) != nil {
		return 0, false
	}
	if syscall.Kill(pid, syscall.SIGUSR1) != nil {
		os.Remove(wake.ArgsFile)
		return 0, false
	}
	for i := 0; i < 500; i++ {
		if b, err := os.ReadFile(wake.PidFile); err == nil && string(b) == strconv.Itoa(pid) {
			return pid, true
		}
		time.Sleep(10 * time.Millisecond)
	}
	// It did not take the flags: start a new waiter (this one may stay idle).
	os.Remove(wake.ArgsFile)
	return 0, false
}

// findIdle is the pid of an idle helper in the process table at proc
// (its command line "rekindle-wake idle"), 0 when there is none.
func findIdle(proc string) int {
	ents, err := os.ReadDir(proc)
	if err != nil {
		return 0
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(proc + "/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if isIdle(b) {
			return pid
		}
	}
	return 0
}

// isIdle says whether a /proc/PID/cmdline is an idle helper's.
func isIdle(cmdline []byte) bool {
	argv := strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")
	return len(argv) == 2 && filepath.Base(argv[0]) == filepath.Base(wake.HelperPath) && argv[1] == wake.IdleArg
}

// loopbackUp brings the container's lo up. Stock runc restores a container
// into a new network namespace without CRIU restoring its interfaces (the
// CNI hook configures eth0 again) and, unlike at start, does not bring lo
// up, so engines and this helper would find 127.0.0.1 unreachable. Our runc
// (runc-patches/libct-criu-bring-up-the-loopback-of-the-restored-con) does; this covers a stock one where the container
// has CAP_NET_ADMIN. The helper runs with the container's own capabilities
// and records the outcome in its status either way.
func loopbackUp() string {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "error: " + err.Error()
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return "error: " + err.Error()
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return "error: " + err.Error()
	}
	flags := ifr.Uint16()
	if flags&unix.IFF_UP != 0 {
		return "up"
	}
	ifr.SetUint16(flags | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return "error: " + err.Error()
	}
	return "brought up"
}
