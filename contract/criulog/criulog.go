// Package criulog picks, from a CRIU log, the lines that say why CRIU
// failed. runc reports only "criu failed: type DUMP errno 0" (or RESTORE);
// the cause is somewhere in CRIU's log, often hundreds of lines past its
// first error line, which on many hosts is one CRIU logs and goes on from.
// oci-checkpoint quotes these lines when a dump fails; containerd's runc
// shim (containerd-patches' "runc-shim: name CRIU's errors when a restore
// fails") picks a restore's by the same rules.
package criulog

import (
	"bufio"
	"io"
	"os"
	"regexp"
	"strings"
)

// errorLine matches an error line of a CRIU log, e.g.
// "(00.127192)      1: Error (criu/files-reg.c:2175): File x has bad size 2 (expect 1)".
var errorLine = regexp.MustCompile(`\bError \(([^)]+)\): (.+)$`)

// noise are error lines that never name the cause: CRIU logs them and
// goes on, or they follow from another failure.
var noise = []string{
	// util.c: CRIU cannot raise its own descriptor limit and goes on
	// with the one it has (unprivileged hosts, most containers).
	"Can't setup RLIMIT_NOFILE",
	// cgroup.c: the restore's cgroup daemon lost CRIU, which failed or
	// was killed (a restore's deadline): the effect, not the cause.
	"cgroupd: recv req error",
}

// summary matches the lines with which CRIU passes a failure up its
// calls ("Dump files (pid: 7) failed with -1", "Dumping FAILED."): they
// say which step failed, not why. They are quoted only when nothing
// else is.
var summary = regexp.MustCompile(`(failed with -?[0-9]+|FAILED\.?)$`)

// Max is how many lines Causes returns at most: the cause, and the line
// that often follows it with the object or the fix.
const Max = 2

// Line is one error line of a CRIU log: its message and CRIU's source
// location.
type Line struct {
	Message string `json:"message"`
	Source  string `json:"source"`
}

func (l Line) String() string { return l.Message + " (" + l.Source + ")" }

// Causes returns the first Max error lines of the CRIU log r that name
// a cause: noise is skipped, and summary lines are returned only when the
// log has no other error line. None: the log holds no error.
func Causes(r io.Reader) []Line {
	var causes, summaries []Line
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() && len(causes) < Max {
		m := errorLine.FindStringSubmatch(sc.Text())
		if m == nil || isNoise(m[2]) {
			continue
		}
		l := Line{Message: strings.TrimSpace(m[2]), Source: m[1]}
		if summary.MatchString(l.Message) {
			if len(summaries) < Max {
				summaries = append(summaries, l)
			}
			continue
		}
		causes = append(causes, l)
	}
	if len(causes) == 0 {
		return summaries
	}
	return causes
}

// CausesOf is Causes of the log at path; a log that cannot be read has
// none.
func CausesOf(path string) []Line {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	return Causes(f)
}

// Quote joins lines as an error quotes them: "cause (criu/x.c:1); next
// (criu/y.c:2)".
func Quote(lines []Line) string {
	s := make([]string, len(lines))
	for i, l := range lines {
		s[i] = l.String()
	}
	return strings.Join(s, "; ")
}

func isNoise(msg string) bool {
	for _, n := range noise {
		if strings.Contains(msg, n) {
			return true
		}
	}
	return false
}
