package checkpoint

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"fmt"
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

// logSaysNoSpace reports whether CRIU's dump.log in dir tells of a full
// disk: containerd passes on only "criu failed: type DUMP errno 0".
func logSaysNoSpace(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, crmetadata.DumpLogFile))
	return err == nil && bytes.Contains(b, []byte("No space left on device"))
}
