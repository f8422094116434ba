// Package cliapp is the main scaffolding the command-line programs share
// (oci-checkpoint, rekindle-weights): running a urfave/cli app with its
// error line and exit status, the context a command runs under, and JSON
// output.
package cliapp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"
)

// Run runs app on the process's arguments and exits as Main says: it
// returns only when the app succeeded.
func Run(app *cli.App) {
	if code := Main(app, os.Args, os.Stderr); code != 0 {
		os.Exit(code)
	}
}

// Main runs app on args. An error is written to stderr as
// "NAME: error: ERROR" and gives the status of the cli.ExitCoder it wraps,
// else 1; a UsageError adds its usage line and gives 2; success gives 0.
// (An unwrapped cli.Exit error has already ended the process inside
// app.Run, through cli.OsExiter, with its message.)
func Main(app *cli.App, args []string, stderr io.Writer) int {
	err := app.Run(args)
	if err == nil {
		return 0
	}
	var ue *UsageError
	if errors.As(err, &ue) {
		ue.write(stderr, app.Name)
		return UsageStatus
	}
	fmt.Fprintln(stderr, app.Name+": error:", err)
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return 1
}

// SignalContext is a context canceled by SIGINT or SIGTERM; cancel stops
// watching for them.
func SignalContext() (ctx context.Context, cancel context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// Signal is the cause of a context InterruptContext cancelled: the signal
// that came. Its exit status is the shell's for a process the signal ended
// (128 + its number), so scripts see the signal either way.
type Signal struct{ Sig syscall.Signal }

func (s Signal) Error() string { return "interrupted by " + SignalName(s.Sig) }

// ExitCode makes Signal a cli.ExitCoder.
func (s Signal) ExitCode() int { return 128 + int(s.Sig) }

// SignalName is "SIGINT", "SIGTERM" and so on.
func SignalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return fmt.Sprintf("signal %d", int(s))
}

// InterruptContext is a context cancelled, with a Signal as its cause, by
// the first SIGINT or SIGTERM; first is written to out then. Later ones do
// not end the process (the default would, half way through an undo):
// again is written for each. stop stops watching.
func InterruptContext(out io.Writer, first, again string) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		for n := 0; ; n++ {
			select {
			case s := <-ch:
				sig, _ := s.(syscall.Signal)
				if n == 0 {
					fmt.Fprintf(out, "==> %s: %s\n", SignalName(sig), first)
					cancel(Signal{sig})
				} else {
					fmt.Fprintf(out, "==> %s again: %s\n", SignalName(sig), again)
				}
			case <-done:
				return
			}
		}
	}()
	var once bool
	return ctx, func() {
		if !once {
			once = true
			signal.Stop(ch)
			close(done)
			cancel(nil)
		}
	}
}

// PrintJSON writes v to stdout as indented JSON.
func PrintJSON(v any) error {
	return WriteJSON(os.Stdout, v)
}

// WriteJSON writes v to w as JSON indented by two spaces, with a newline.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
