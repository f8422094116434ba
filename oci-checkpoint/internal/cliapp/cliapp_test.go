package cliapp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

func app(err error) *cli.App {
	return &cli.App{Name: "prog", Action: func(*cli.Context) error { return err }}
}

func TestMainExitStatus(t *testing.T) {
	exited := -1
	old := cli.OsExiter
	cli.OsExiter = func(code int) { exited = code }
	defer func() { cli.OsExiter = old }()

	for _, tc := range []struct {
		name string
		err  error
		code int
		line string
	}{
		{"success", nil, 0, ""},
		{"plain error", errors.New("boom"), 1, "prog: error: boom\n"},
		{"wrapped exit coder", fmt.Errorf("load: %w", cli.Exit("usage: prog NAME", 2)), 2, "prog: error: load: usage: prog NAME\n"},
		{"usage error", fmt.Errorf("x: %w", &UsageError{Command: "prog x", Usage: "prog x [flags] NAME", Err: errors.New("missing NAME")}), 2,
			"prog: error: missing NAME\nusage: prog x [flags] NAME (see 'prog x --help')\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			exited = -1
			if code := Main(app(tc.err), []string{"prog"}, &stderr); code != tc.code {
				t.Errorf("status %d, want %d", code, tc.code)
			}
			if stderr.String() != tc.line {
				t.Errorf("stderr %q, want %q", stderr.String(), tc.line)
			}
			if exited != -1 {
				t.Errorf("cli.OsExiter called with %d for an error it does not handle", exited)
			}
		})
	}

	// cli.Exit itself: urfave/cli prints and exits in app.Run (here the
	// stub records the status); Main then adds its line and the same status.
	var stderr bytes.Buffer
	if code := Main(app(cli.Exit("usage: prog NAME", 2)), []string{"prog"}, &stderr); code != 2 || exited != 2 {
		t.Errorf("cli.Exit: status %d, exiter %d, want 2 and 2", code, exited)
	}
}

func TestWriteJSON(t *testing.T) {
	var b bytes.Buffer
	if err := WriteJSON(&b, map[string]any{"a": 1, "b": []int{2}}); err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"a\": 1,\n  \"b\": [\n    2\n  ]\n}\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}

func TestSignalContext(t *testing.T) {
	ctx, cancel := SignalContext()
	defer cancel()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("SIGTERM did not cancel the context")
	}
}

func TestInterruptContext(t *testing.T) {
	var out syncBuffer
	ctx, stop := InterruptContext(&out, "undoing", "still undoing")
	defer stop()
	for i := 0; i < 2; i++ {
		if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		// The second must not end the test binary: it is only said.
		deadline := time.Now().Add(5 * time.Second)
		for !strings.Contains(out.String(), []string{"==> SIGINT: undoing", "==> SIGINT again: still undoing"}[i]) {
			if time.Now().After(deadline) {
				t.Fatalf("signal %d not said: %q", i+1, out.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	<-ctx.Done()
	var s Signal
	if !errors.As(context.Cause(ctx), &s) || s.Sig != syscall.SIGINT {
		t.Fatalf("cause %v, want Signal{SIGINT}", context.Cause(ctx))
	}
	if s.Error() != "interrupted by SIGINT" || s.ExitCode() != 130 {
		t.Errorf("got %q, %d", s.Error(), s.ExitCode())
	}
	if got := (Signal{syscall.SIGTERM}).ExitCode(); got != 143 {
		t.Errorf("SIGTERM's status %d, want 143", got)
	}
	// Wrapped, it still gives its status.
	code := Main(app(fmt.Errorf("%w during dump", s)), []string{"prog"}, &bytes.Buffer{})
	if code != 130 {
		t.Errorf("Main's status %d, want 130", code)
	}
}

// syncBuffer is a bytes.Buffer the signal goroutine may write to while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
