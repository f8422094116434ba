package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"rekindle.local/oci-checkpoint/internal/cliapp"
)

// runMain runs oci-checkpoint's app on args as main does and returns its
// exit status, stdout and stderr.
func runMain(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	exited := -1
	oldExiter, oldErr := cli.OsExiter, cli.ErrWriter
	cli.OsExiter, cli.ErrWriter = func(code int) { exited = code }, &stderr
	defer func() { cli.OsExiter, cli.ErrWriter = oldExiter, oldErr }()
	app := newApp()
	app.Writer, app.ErrWriter = &stdout, &stderr
	code := cliapp.Main(app, append([]string{"oci-checkpoint"}, args...), &stderr)
	if exited != -1 {
		code = exited
	}
	return code, stdout.String(), stderr.String()
}

const rootUsage = "oci-checkpoint [global flags] COMMAND [flags] [ARGS...]"

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		err   string // in the error line
		usage string // the usage line's
	}{
		{[]string{"nosuch"}, `unknown command "nosuch"`, rootUsage},
		{[]string{"help", "nosuch"}, `unknown command "nosuch"`, rootUsage},
		{[]string{"--bogus", "ls"}, "flag provided but not defined: --bogus", rootUsage},
		{[]string{"create", "--bogus", "c", "i"}, "flag provided but not defined: --bogus", "oci-checkpoint create [flags] CONTAINER IMAGE"},
		{[]string{"create", "-x", "c", "i"}, "flag provided but not defined: -x", "oci-checkpoint create [flags] CONTAINER IMAGE"},
		{[]string{"create", "c"}, "missing IMAGE", "oci-checkpoint create [flags] CONTAINER IMAGE"},
		{[]string{"create"}, "missing CONTAINER IMAGE", "oci-checkpoint create [flags] CONTAINER IMAGE"},
		{[]string{"create", "c", "i", "--json"}, "--json after CONTAINER IMAGE: flags go before the arguments", "oci-checkpoint create [flags] CONTAINER IMAGE"},
		{[]string{"create", "--port", "abc", "c", "i"}, `invalid value "abc" for flag --port`, "oci-checkpoint create [flags] CONTAINER IMAGE"},
		{[]string{"create", "--quiesce", "GET /health extra", "c", "i"}, `"GET /health extra": GET takes no body`, "oci-checkpoint create [flags] CONTAINER IMAGE"},
		{[]string{"create", "--engine", "tgi", "c", "i"}, `unknown engine "tgi"`, "oci-checkpoint create [flags] CONTAINER IMAGE"},
		{[]string{"create", "--compression", "gzip", "c", "i"}, `--compression "gzip": want none, pages or zstd`, "oci-checkpoint create [flags] CONTAINER IMAGE"},
		{[]string{"create", "--output", "tar:/x", "c", "i"}, "want oci-archive:PATH", "oci-checkpoint create [flags] CONTAINER IMAGE"},
		{[]string{"import", "a.tar"}, "missing IMAGE", "oci-checkpoint import [flags] ARCHIVE IMAGE"},
		{[]string{"import", "a.tar", "i", "x"}, `unexpected argument "x"`, "oci-checkpoint import [flags] ARCHIVE IMAGE"},
		{[]string{"import", "--engine", "tgi", "a.tar", "i"}, `--engine "tgi": want one of sglang, vllm, generic`, "oci-checkpoint import [flags] ARCHIVE IMAGE"},
		{[]string{"import", "--port", "70000", "a.tar", "i"}, "--port 70000: want 1 to 65535", "oci-checkpoint import [flags] ARCHIVE IMAGE"},
		{[]string{"import", "--compression", "gzip", "a.tar", "i"}, `--compression "gzip": want none, pages or zstd`, "oci-checkpoint import [flags] ARCHIVE IMAGE"},
		{[]string{"import", "--fallback", "maybe", "a.tar", "i"}, `--fallback "maybe": want cold or none`, "oci-checkpoint import [flags] ARCHIVE IMAGE"},
		{[]string{"import", "--output", "tar:/x", "a.tar", "i"}, "want oci-archive:PATH", "oci-checkpoint import [flags] ARCHIVE IMAGE"},
		{[]string{"inspect"}, "missing IMAGE", "oci-checkpoint inspect [flags] IMAGE"},
		{[]string{"inspect", "a", "b"}, `unexpected argument "b"`, "oci-checkpoint inspect [flags] IMAGE"},
		{[]string{"check"}, "missing IMAGE", "oci-checkpoint check [flags] IMAGE"},
		{[]string{"check", "--no-such-flag", "x"}, "flag provided but not defined: --no-such-flag", "oci-checkpoint check [flags] IMAGE"},
		{[]string{"memory", "a", "b"}, `unexpected argument "b"`, "oci-checkpoint memory [flags] IMAGE"},
		{[]string{"memory", "--top", "x", "a"}, `invalid value "x" for flag --top`, "oci-checkpoint memory [flags] IMAGE"},
		{[]string{"ls", "x"}, `unexpected argument "x"`, "oci-checkpoint ls [flags]"},
		{[]string{"list", "--bogus"}, "flag provided but not defined: --bogus", "oci-checkpoint ls [flags]"},
		{[]string{"rm"}, "missing IMAGE", "oci-checkpoint rm [flags] IMAGE..."},
		{[]string{"recover", "--bogus"}, "flag provided but not defined: --bogus", "oci-checkpoint recover [flags] [CONTAINER...]"},
		{[]string{"recover", "c", "--quiet"}, "--quiet after [CONTAINER...]: flags go before the arguments", "oci-checkpoint recover [flags] [CONTAINER...]"},
		{[]string{"sign", "img"}, "--key FILE is required", "oci-checkpoint sign [flags] IMAGE"},
		{[]string{"sign", "--key"}, "flag needs an argument: --key", "oci-checkpoint sign [flags] IMAGE"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := runMain(t, tc.args...)
			if code != 2 {
				t.Errorf("exit status %d, want 2", code)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			if len(lines) != 2 || !strings.HasPrefix(lines[0], "oci-checkpoint: error: ") || !strings.Contains(lines[0], tc.err) ||
				lines[1] != "usage: "+tc.usage+" (see '"+strings.Fields(tc.usage + " ")[0]+commandOf(tc.usage)+" --help')" {
				t.Errorf("stderr:\n%s\nwant an error line with %q, then \"usage: %s (see ...)\"", stderr, tc.err, tc.usage)
			}
		})
	}
}

// commandOf is the command name in a usage line ("" for the app's own).
func commandOf(usage string) string {
	f := strings.Fields(usage)
	if len(f) > 1 && !strings.HasPrefix(f[1], "[") {
		return " " + f[1]
	}
	return ""
}

func TestNoArgumentsPrintsHelp(t *testing.T) {
	code, stdout, stderr := runMain(t)
	if code != 0 || !strings.Contains(stdout, "COMMANDS:") || stderr != "" {
		t.Errorf("status %d, stdout %q, stderr %q: want 0 and the help on stdout", code, stdout, stderr)
	}
}

func TestCommandHelp(t *testing.T) {
	for _, c := range newApp().Commands {
		if c.Description == "" {
			t.Errorf("%s has no description", c.Name)
		}
		if !strings.Contains(c.Description, "\nExample") || !strings.Contains(c.Description, "\n  oci-checkpoint "+c.Name+" ") {
			t.Errorf("%s's help has no example ('  oci-checkpoint %s ...' under Example)", c.Name, c.Name)
		}
		for _, f := range c.Flags {
			if n := strings.Count(f.String(), "(default"); n > 1 {
				t.Errorf("%s %s prints %d defaults: %s", c.Name, f.Names()[0], n, f.String())
			}
		}
	}
	for name, want := range map[string]string{
		"port":        "(default: the profile's: sglang 30000, vllm 8000)",
		"sleep-level": "(default: 2)",
	} {
		for _, f := range createCmd.Flags {
			if f.Names()[0] == name && !strings.HasSuffix(f.String(), want) {
				t.Errorf("create --%s: %q, want it to end with %q", name, f.String(), want)
			}
		}
	}
}

// The commands that write an image take its flags alike: the same names,
// defaults and help, but for what --work-dir holds.
func TestImageFlagsShared(t *testing.T) {
	flagsOf := func(c *cli.Command) map[string]string {
		m := map[string]string{}
		for _, f := range c.Flags {
			if d, ok := f.(cli.DocGenerationFlag); ok {
				m[f.Names()[0]] = d.GetUsage() + " [" + d.GetDefaultText() + "]"
			}
		}
		return m
	}
	create, imp := flagsOf(createCmd), flagsOf(importCmd)
	for _, f := range imageFlags("") {
		name := f.Names()[0]
		c, okc := create[name]
		i, oki := imp[name]
		switch {
		case !okc || !oki:
			t.Errorf("--%s: in create %v, in import %v; want both", name, okc, oki)
		case name == "work-dir":
			if c == i {
				t.Errorf("--work-dir says the same for both: %q", c)
			}
		case c != i:
			t.Errorf("--%s: create says %q, import %q", name, c, i)
		}
	}
}
