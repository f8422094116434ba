package weights

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

type devIno struct {
	major, minor uint32
	ino          uint64
}

// mappers returns the pids of the processes on this host that map any of
// files, found by device and inode in /proc/PID/maps (paths differ inside
// containers; the inode does not).
func mappers(files []string) []int {
	want := map[devIno]bool{}
	for _, f := range files {
		var st unix.Stat_t
		if unix.Stat(f, &st) == nil {
			want[devIno{unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino}] = true
		}
	}
	if len(want) == 0 {
		return nil
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/maps")
	var pids []int
	for _, p := range procs {
		if mapsAny(p, want) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			pids = append(pids, pid)
		}
	}
	sort.Ints(pids)
	return pids
}

func mapsAny(path string, want map[devIno]bool) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// address perms offset dev inode [path]
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || fields[4] == "0" {
			continue
		}
		var k devIno
		if _, err := fmt.Sscanf(fields[3], "%x:%x", &k.major, &k.minor); err != nil {
			continue
		}
		if k.ino, err = strconv.ParseUint(fields[4], 10, 64); err == nil && want[k] {
			return true
		}
	}
	return false
}

// describePids names pids with their commands for an error message.
func describePids(pids []int) string {
	var parts []string
	for _, p := range pids {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p))
		parts = append(parts, fmt.Sprintf("%d (%s)", p, strings.TrimSpace(string(comm))))
	}
	return strings.Join(parts, ", ")
}
