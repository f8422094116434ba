package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"golang.org/x/sys/unix"

	"rekindle.local/oci-checkpoint/pkg/progress"
)

// noSpace turns a full disk under dir into an error that says so, names
// the path and the fix; other errors pass through.
func noSpace(err error, dir string) error {
	if err == nil || !isNoSpace(err) {
		return err
	}
	return fmt.Errorf("no space left on device (ENOSPC) in %s (%s free now): free space there or move it to a larger filesystem: %w",
		dir, freeSpace(dir), err)
}

// isNoSpace also matches ENOSPC that crossed gRPC or came from CRIU's log
// as text.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || strings.Contains(strings.ToLower(err.Error()), "no space left on device")
}

func freeSpace(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "unknown"
	}
	return progress.Bytes(int64(st.Bavail) * st.Bsize)
}

func unixAccess(path string) error {
	return unix.Access(path, unix.W_OK)
}

// nearlyFull reports whether dir's filesystem has less than 1 MiB left
// for unprivileged writes: CRIU's log lives there too, so on a full disk
// its last lines, the one naming ENOSPC among them, may never be written.
func nearlyFull(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && uint64(st.Bavail)*uint64(st.Bsize) < 1<<20
}

// logSaysNoSpace reports whether CRIU's dump.log in dir tells of a full
// disk: containerd passes on only "criu failed: type DUMP errno 0".
func logSaysNoSpace(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, crmetadata.DumpLogFile))
	return err == nil && bytes.Contains(b, []byte("No space left on device"))
}
