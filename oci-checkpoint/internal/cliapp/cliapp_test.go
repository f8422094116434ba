package cliapp

import (
	"bytes"
	"errors"
	"fmt"
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
