package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// A failed dump's error quotes the line of CRIU's log that names the
// cause, not its first error line, and where the log is kept.
func TestDumpFailed(t *testing.T) {
	runcErr := errors.New("criu failed: type DUMP errno 0")
	for _, tc := range []struct {
		name, log string
		want      []string
		not       []string
	}{{
		name: "a connected TCP socket past the RLIMIT_NOFILE line",
		log: `(00.000611) Error (criu/util.c:1534): rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted
` + strings.Repeat("(00.010000) Dumping opened files (pid: 42)\n", 800) + `(00.245711) Error (criu/sk-inet.c:200): inet: Connected TCP socket, consider using --tcp-established option.
(00.245729) Error (criu/cr-dump.c:1552): Dump files (pid: 42) failed with -1
(00.262114) Error (criu/cr-dump.c:1982): Dumping FAILED.
`,
		want: []string{"criu failed: type DUMP errno 0: CRIU: inet: Connected TCP socket, consider using --tcp-established option. (criu/sk-inet.c:200) (CRIU's log: "},
		not:  []string{"RLIMIT_NOFILE", "Dumping FAILED", "failed with -1"},
	}, {
		name: "no error line: runc's error and the log",
		log:  "(00.000040) Version: 4.2.1\n",
		want: []string{"dump: criu failed: type DUMP errno 0 (CRIU's log: "},
		not:  []string{"CRIU: "},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir, keep := t.TempDir(), t.TempDir()
			os.WriteFile(filepath.Join(dir, "dump.log"), []byte(tc.log), 0o600)
			err := dumpFailed(runcErr, dir, keep, "eng")
			if !errors.Is(err, runcErr) {
				t.Errorf("runc's error is not wrapped: %v", err)
			}
			kept, _ := filepath.Glob(filepath.Join(keep, "oci-checkpoint-dump-eng-*.log"))
			if len(kept) != 1 {
				t.Fatalf("kept logs: %q, want one", kept)
			}
			for _, w := range append(tc.want, kept[0]) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q is missing from %q", w, err)
				}
			}
			quoted := strings.ReplaceAll(err.Error(), kept[0], "LOG")
			for _, n := range tc.not {
				if strings.Contains(quoted, n) {
					t.Errorf("%q should not be quoted: %q", n, err)
				}
			}
		})
	}
}

// Each failed dump keeps its log; one that succeeds removes the
// container's, not another container's.
func TestRemoveKeptLogs(t *testing.T) {
	dir, keep := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(dir, "dump.log"), []byte("(0.1) Error (criu/a.c:1): x\n"), 0o600)
	for _, c := range []string{"eng", "eng", "eng-b", "other"} {
		dumpFailed(errors.New("x"), dir, keep, c)
	}
	os.WriteFile(filepath.Join(keep, "oci-checkpoint-dump-eng-notes.log"), nil, 0o600)
	if n, _ := filepath.Glob(filepath.Join(keep, "oci-checkpoint-dump-eng-*.log")); len(n) != 4 {
		t.Fatalf("before: %q", n)
	}
	removeKeptLogs(keep, "eng")
	left, _ := filepath.Glob(filepath.Join(keep, "*"))
	var names []string
	for _, n := range left {
		names = append(names, strings.TrimRight(filepath.Base(n), "0123456789.log"))
	}
	sort.Strings(names)
	if got, want := strings.Join(names, " "), "oci-checkpoint-dump-eng-b- oci-checkpoint-dump-eng-notes oci-checkpoint-dump-other-"; got != want {
		t.Errorf("left: %s, want %s", got, want)
	}
}
