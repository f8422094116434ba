package criulog

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestCauses(t *testing.T) {
	for _, tc := range []struct {
		name string
		log  string
		want []Line
	}{{
		name: "a dump refused on a connected TCP socket, past the RLIMIT_NOFILE line",
		log: `(00.000040) Version: 4.2.1 (gitid 0)
(00.000611) Error (criu/util.c:1534): rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted
(00.001201) Warn  (criu/kerndat.c:1290): Can't keep kdat cache on non-tempfs
` + strings.Repeat("(00.010000) Dumping opened files (pid: 42)\n", 800) + `(00.245711) Error (criu/sk-inet.c:200): inet: Connected TCP socket, consider using --tcp-established option.
(00.245729) Error (criu/cr-dump.c:1552): Dump files (pid: 42) failed with -1
(00.262114) Error (criu/cr-dump.c:1982): Dumping FAILED.
`,
		want: []Line{{"inet: Connected TCP socket, consider using --tcp-established option.", "criu/sk-inet.c:200"}},
	}, {
		name: "a restore: the file that differs and the line after it",
		log: `(00.028191) Error (criu/util.c:1534): rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted
(00.127192)      1: Error (criu/files-reg.c:2175): File var/tmp/site/x.so has bad size 110699809 (expect 110699808)
(00.127196)      1: Error (criu/mem.c:1467): ` + "`" + `- Can't open vma
(00.127198)      1: Error (criu/mem.c:1470): a third
(00.135714) Error (criu/cr-restore.c:2331): Restoring FAILED.
`,
		want: []Line{
			{"File var/tmp/site/x.so has bad size 110699809 (expect 110699808)", "criu/files-reg.c:2175"},
			{"`- Can't open vma", "criu/mem.c:1467"},
		},
	}, {
		name: "a restore CRIU was killed in: cgroupd's error is skipped",
		log: `(00.100000) Error (criu/cgroup.c:2080): cgroupd: recv req error: Connection reset by peer
(00.200000)      7: Error (criu/files.c:1200): Unable to open fd=5 id=0x12
`,
		want: []Line{{"Unable to open fd=5 id=0x12", "criu/files.c:1200"}},
	}, {
		name: "only summaries: they are what there is",
		log: `(00.1) Error (criu/cr-dump.c:1552): Dump files (pid: 42) failed with -1
(00.2) Error (criu/cr-dump.c:1982): Dumping FAILED.
(00.3) Error (criu/cr-dump.c:1983): Dumping FAILED.
`,
		want: []Line{
			{"Dump files (pid: 42) failed with -1", "criu/cr-dump.c:1552"},
			{"Dumping FAILED.", "criu/cr-dump.c:1982"},
		},
	}, {
		name: "only noise",
		log:  "(00.1) Error (criu/util.c:1534): rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted\n",
	}, {
		name: "no error",
		log:  "(00.000001) Version: 4.2.1\n(00.2) Warn  (criu/kerndat.c:1290): Can't keep kdat cache\n",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Causes(strings.NewReader(tc.log)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Causes = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCausesOfAndQuote(t *testing.T) {
	p := filepath.Join(t.TempDir(), "dump.log")
	if got := CausesOf(p); got != nil {
		t.Errorf("a missing log: %q", got)
	}
	os.WriteFile(p, []byte("(0.1) Error (criu/a.c:1): one\n(0.2) Error (criu/b.c:2): two\n"), 0o644)
	if got, want := Quote(CausesOf(p)), "one (criu/a.c:1); two (criu/b.c:2)"; got != want {
		t.Errorf("Quote = %q, want %q", got, want)
	}
}
