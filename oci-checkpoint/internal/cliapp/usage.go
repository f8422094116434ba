package cliapp

import (
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/urfave/cli/v2"
)

// UsageError is a mistake in a command line (an unknown command or flag, a
// bad flag value, missing or extra arguments): Main prints it and the
// command's usage line on stderr and exits 2, as nerdctl and podman do,
// instead of urfave/cli's whole help on stdout.
type UsageError struct {
	Command string // the command's path, "oci-checkpoint create"
	Usage   string // its usage line, "oci-checkpoint create [flags] CONTAINER IMAGE"
	Err     error
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// UsageStatus is the exit status of a usage error.
const UsageStatus = 2

// write prints e as Main does: the error, then the usage line.
func (e *UsageError) write(w io.Writer, name string) {
	fmt.Fprintf(w, "%s: error: %v\nusage: %s (see '%s --help')\n", name, e.Err, e.Usage, e.Command)
}

// Usagef returns a usage error of cc's command.
func Usagef(cc *cli.Context, format string, a ...any) error {
	return usageError(cc, fmt.Errorf(format, a...))
}

func usageError(cc *cli.Context, err error) *UsageError {
	var names []string
	for _, c := range cc.Lineage() {
		if c.Command != nil && c.Command.Name != "" {
			names = append([]string{c.Command.Name}, names...)
		}
	}
	path := strings.Join(names, " ")
	usage := path + " [global flags] COMMAND [flags] [ARGS...]"
	if len(names) > 1 {
		usage = path + " [flags]"
		if a := cc.Command.ArgsUsage; a != "" {
			usage += " " + a
		}
	}
	return &UsageError{Command: path, Usage: usage, Err: err}
}

// CheckArgs returns a usage error unless cc's arguments are the ones its
// command's ArgsUsage names: one for each word, one or more for a last
// word ending in "...", and any number for a last "[WORD...]".
func CheckArgs(cc *cli.Context) error {
	want := strings.Fields(cc.Command.ArgsUsage)
	n := cc.NArg()
	some := len(want) > 0 && strings.HasSuffix(want[len(want)-1], "...")
	if some && strings.HasPrefix(want[len(want)-1], "[") {
		want = want[:len(want)-1]
	}
	switch {
	case n < len(want):
		return Usagef(cc, "missing %s", strings.TrimSuffix(strings.Join(want[n:], " "), "..."))
	case n > len(want) && !some:
		extra := cc.Args().Get(len(want))
		if strings.HasPrefix(extra, "-") && len(want) > 0 {
			return Usagef(cc, "%s after %s: flags go before the arguments", extra, strings.Join(want, " "))
		}
		return Usagef(cc, "unexpected argument %q", extra)
	}
	return nil
}

// Strict makes every usage error of app a UsageError: a bad flag of app or
// of any of its commands, and an unknown command, also after help.
func Strict(app *cli.App) {
	app.OnUsageError = onUsageError
	app.Action = func(cc *cli.Context) error {
		if cc.Args().Present() {
			return Usagef(cc, "unknown command %q (%s --help lists them)", cc.Args().First(), app.Name)
		}
		return cli.ShowAppHelp(cc)
	}
	// help NAME of no command: urfave/cli lets this hook print, not fail.
	app.CommandNotFound = func(cc *cli.Context, name string) {
		usageError(cc, fmt.Errorf("unknown command %q (%s --help lists them)", name, app.Name)).write(cc.App.ErrWriter, app.Name)
		cli.OsExiter(UsageStatus)
	}
	// urfave/cli adds its own help command to every command, itself
	// included: that one is left as it is.
	seen := map[*cli.Command]bool{}
	var strict func([]*cli.Command)
	strict = func(cmds []*cli.Command) {
		for _, c := range cmds {
			if seen[c] || c.Name == "help" {
				continue
			}
			seen[c] = true
			c.OnUsageError = onUsageError
			strict(c.Subcommands)
		}
	}
	strict(app.Commands)
}

func onUsageError(cc *cli.Context, err error, _ bool) error {
	return usageError(cc, fmt.Errorf("%s", longFlags.ReplaceAllString(err.Error(), "$1--$2")))
}

// longFlags finds the flags that Go's flag package names with one dash
// ("flag provided but not defined: -bogus"), to name them as they are
// typed; one-letter ones keep theirs.
var longFlags = regexp.MustCompile(`(: |flag )-([A-Za-z0-9][-A-Za-z0-9]+)`)
