package main

import (
	"io"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"rekindle.local/oci-checkpoint/pkg/engine"
)

// createProfile parses create's flags in args as oci-checkpoint would and
// returns the engine profile they give, or the first error: the flags'
// parsing or profile's.
func createProfile(args ...string) (engine.Profile, error) {
	var p engine.Profile
	var perr error
	cmd := *createCmd
	cmd.OnUsageError = nil
	cmd.Action = func(cc *cli.Context) error { p, perr = profile(cc); return perr }
	app := &cli.App{Name: "oci-checkpoint", Commands: []*cli.Command{&cmd}, Writer: io.Discard, ErrWriter: io.Discard}
	err := app.Run(append([]string{"oci-checkpoint", "create"}, append(args, "CONTAINER", "IMAGE")...))
	return p, err
}

func TestCreateCallFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		quiesce []string // the calls, as Call.String gives them
		resume  []string
		err     []string // what the error names
	}{
		{
			name:    "a body with commas is one call",
			args:    []string{"--engine", "generic", "--port", "1", "--quiesce", `POST /x {"a": 1, "b": 2}`, "--resume", `POST /y {"c": [1, 2]}`},
			quiesce: []string{`POST /x {"a": 1, "b": 2}`}, resume: []string{`POST /y {"c": [1, 2]}`},
		},
		{
			name:    "each occurrence is a call, in order",
			args:    []string{"--engine", "generic", "--port", "1", "--quiesce", "POST /a", "--quiesce", "exec sync, then wait", "--resume", "POST /b"},
			quiesce: []string{"POST /a", "exec sync, then wait"}, resume: []string{"POST /b"},
		},
		{
			name:    "the profile's calls stand unless replaced",
			args:    []string{"--resume", "POST /mine {}"},
			quiesce: []string{"POST /flush_cache", "POST /release_memory_occupation {}"}, resume: []string{"POST /mine {}"},
		},
		{
			name: "a GET with something after its path",
			args: []string{"--engine", "generic", "--port", "1", "--quiesce", "GET /health extra", "--resume", "POST /b"},
			err:  []string{`"GET /health extra"`, "GET takes no body", "want 'GET /path', 'POST /path [JSON]' or 'exec COMMAND'"},
		},
		{
			name: "a body that is not JSON",
			args: []string{"--resume", "POST /b {a: 1}"},
			err:  []string{`"POST /b {a: 1}"`, "the body is not JSON", "want 'GET /path', 'POST /path [JSON]' or 'exec COMMAND'"},
		},
		{
			name: "an unknown method",
			args: []string{"--quiesce", "FETCH /x"},
			err:  []string{`"FETCH /x"`, "want 'GET /path', 'POST /path [JSON]' or 'exec COMMAND'"},
		},
		{
			name: "a bad health call",
			args: []string{"--health", "GET health"},
			err:  []string{`"GET health"`, "the path must start with /"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := createProfile(tc.args...)
			if len(tc.err) > 0 {
				if err == nil {
					t.Fatalf("accepted: quiesce %v, resume %v", p.Quiesce, p.Resume)
				}
				for _, s := range tc.err {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := callStrings(p.Quiesce); strings.Join(got, "|") != strings.Join(tc.quiesce, "|") {
				t.Errorf("quiesce %q, want %q", got, tc.quiesce)
			}
			if got := callStrings(p.Resume); strings.Join(got, "|") != strings.Join(tc.resume, "|") {
				t.Errorf("resume %q, want %q", got, tc.resume)
			}
		})
	}
}

func callStrings(cs []engine.Call) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.String())
	}
	return out
}
