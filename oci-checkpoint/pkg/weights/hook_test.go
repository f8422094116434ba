package weights

import (
	"bufio"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestShimLog(t *testing.T) {
	bundle := t.TempDir()
	fifo := filepath.Join(bundle, "log")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// containerd holds the read end open, as here.
	r, err := os.OpenFile(fifo, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	shimLog(bundle, `weight set m was not loaded on this host`)
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil || !strings.Contains(line, `level=info msg="weight set m was not loaded on this host"`) {
		t.Fatalf("fifo got %q, %v", line, err)
	}
	// A regular file named log is not written to.
	plain := t.TempDir()
	os.WriteFile(filepath.Join(plain, "log"), nil, 0o600)
	shimLog(plain, "x")
	if b, _ := os.ReadFile(filepath.Join(plain, "log")); len(b) != 0 {
		t.Fatalf("wrote %q into a regular file", b)
	}
}

// The token is read from a volume the pod may have chosen and filled: what
// it plants there must not make host root read, or open, a file outside
// the volume or anything but a small regular file. Each case runs with a
// volume and, outside it, a host file the pod must not reach.
func TestReadToken(t *testing.T) {
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	keys := []crypto.PublicKey{&ecKey.PublicKey}
	now := time.Now()
	jwt := signJWT(t, ecKey, saClaimsFor("prod", "p", "u1", "engine", now.Add(time.Hour)))
	const canaryText = "host-only canary"

	for _, tc := range []struct {
		name string
		// setup fills vol; canary is the host file. It may return a check
		// to run after the read.
		setup func(t *testing.T, vol, canary string) func(t *testing.T)
		want  string   // the token read, or
		err   []string // what the error says besides the token's path (VOL: the volume)
	}{
		{"regular file", func(t *testing.T, vol, _ string) func(*testing.T) {
			mustWrite(t, filepath.Join(vol, "token"), jwt)
			return nil
		}, jwt, nil},
		// The kubelet's layout (AtomicWriter): symlinks that stay in the volume.
		{"kubelet's symlinks", func(t *testing.T, vol, _ string) func(*testing.T) {
			ts := filepath.Join(vol, "..2025_01_01_00_00_00.1")
			os.Mkdir(ts, 0o755)
			mustWrite(t, filepath.Join(ts, "token"), jwt)
			mustSymlink(t, filepath.Base(ts), filepath.Join(vol, "..data"))
			mustSymlink(t, "..data/token", filepath.Join(vol, "token"))
			return nil
		}, jwt, nil},
		{"symlink to a host file", func(t *testing.T, vol, canary string) func(*testing.T) {
			mustSymlink(t, canary, filepath.Join(vol, "token"))
			return nil
		}, "", []string{"a symlink in it leads out of VOL"}},
		{"relative symlink out of the volume", func(t *testing.T, vol, canary string) func(*testing.T) {
			rel, _ := filepath.Rel(vol, canary)
			mustSymlink(t, rel, filepath.Join(vol, "token"))
			return nil
		}, "", []string{"leads out of"}},
		{"directory on the way a symlink out", func(t *testing.T, vol, canary string) func(*testing.T) {
			mustSymlink(t, filepath.Dir(canary), filepath.Join(vol, "..data"))
			mustSymlink(t, "..data/"+filepath.Base(canary), filepath.Join(vol, "token"))
			return nil
		}, "", []string{"leads out of"}},
		// A FIFO stands in for a device whose open acts: a writer waiting in
		// open(2) is let through the moment anything opens it for reading.
		{"FIFO", func(t *testing.T, vol, _ string) func(*testing.T) {
			fifo := filepath.Join(vol, "token")
			if err := unix.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			opened, tids := make(chan int, 1), make(chan int, 1)
			go func() {
				runtime.LockOSThread() // its thread ends with it
				tids <- unix.Gettid()
				fd, _ := unix.Open(fifo, unix.O_WRONLY|unix.O_CLOEXEC, 0)
				opened <- fd
			}()
			// A reader that came before the writer waits would go unseen.
			inOpen(t, <-tids)
			return func(t *testing.T) {
				select {
				case fd := <-opened:
					unix.Close(fd)
					t.Errorf("the token FIFO was opened for reading")
				case <-time.After(200 * time.Millisecond):
					// let the writer go
					r, _ := unix.Open(fifo, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
					unix.Close(<-opened)
					unix.Close(r)
				}
			}
		}, "", []string{"is a FIFO, not a regular file"}},
		{"directory", func(t *testing.T, vol, _ string) func(*testing.T) {
			os.Mkdir(filepath.Join(vol, "token"), 0o755)
			return nil
		}, "", []string{"is a directory, not a regular file"}},
		{"device node", func(t *testing.T, vol, _ string) func(*testing.T) {
			// /dev/null's numbers: harmless should it be opened
			if err := unix.Mknod(filepath.Join(vol, "token"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
				t.Skipf("mknod: %v (needs root)", err)
			}
			return nil
		}, "", []string{"is a character device, not a regular file"}},
		{"oversized", func(t *testing.T, vol, _ string) func(*testing.T) {
			mustWrite(t, filepath.Join(vol, "token"), "")
			os.Truncate(filepath.Join(vol, "token"), maxTokenSize+1)
			return nil
		}, "", []string{"is larger than 65536 bytes"}},
		{"missing", func(t *testing.T, vol, _ string) func(*testing.T) { return nil }, "", []string{"no such file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vol, outside := t.TempDir(), t.TempDir()
			canary := filepath.Join(outside, "canary")
			mustWrite(t, canary, canaryText)
			after := tc.setup(t, vol, canary)
			got, err := readTokenWithin(t, vol)
			if after != nil {
				after(t)
			}
			if strings.Contains(got, canaryText) {
				t.Fatalf("read the host file outside the volume: %q", got)
			}
			if tc.err == nil {
				if err != nil || got != tc.want {
					t.Fatalf("got %q, %v; want %q", got, err, tc.want)
				}
				if sa, err := verifyToken(Container{CRI: true, PodNamespace: "prod", PodName: "p", PodUID: "u1", Token: got}, keys, now); err != nil || sa != "engine" {
					t.Fatalf("the token read does not verify: %q, %v", sa, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("got %q and no error; want %q", got, tc.err)
			}
			for _, w := range append([]string{filepath.Join(vol, "token")}, tc.err...) {
				if w = strings.ReplaceAll(w, "VOL", vol); !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// inOpen waits until thread tid is in openat(2).
func inOpen(t *testing.T, tid int) {
	t.Helper()
	want := strconv.Itoa(unix.SYS_OPENAT) + " "
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/syscall", tid))
		if err != nil {
			t.Skipf("cannot tell the writer waits: %v", err)
		}
		if strings.HasPrefix(string(b), want) {
			return
		}
	}
	t.Fatalf("thread %d is not in openat after 5s", tid)
}

// readTokenWithin fails the test if readToken blocks (on a FIFO) for 5s.
func readTokenWithin(t *testing.T, dir string) (string, error) {
	t.Helper()
	type result struct {
		s   string
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := readToken(dir)
		done <- result{s, err}
	}()
	select {
	case r := <-done:
		return r.s, r.err
	case <-time.After(5 * time.Second):
		t.Fatalf("readToken(%s) still blocked after 5s", dir)
		return "", nil
	}
}

func mustWrite(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, to, at string) {
	t.Helper()
	if err := os.Symlink(to, at); err != nil {
		t.Fatal(err)
	}
}
