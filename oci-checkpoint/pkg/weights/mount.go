package weights

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mountSlack is tmpfs room beyond the quota for manifests and the
// rounding of files to huge pages.
const mountSlack = 64 << 20

// PrepareMount makes dir a tmpfs with huge=within_size (size: quota plus
// slack) unless it already is a tmpfs or hugetlbfs, which is then used as
// it is. The mount is never undone by the service: sets outlive restarts.
// It is made private, so containers binding a set see no propagation from
// the host (CRIU dumps such a bind as a plain external mount).
func PrepareMount(dir string, quota int64, logf func(string, ...any)) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return fmt.Errorf("statfs %s: %w", dir, err)
	}
	if mounted, err := isMountPoint(dir); err != nil {
		return err
	} else if mounted && (fs.Type == unix.TMPFS_MAGIC || fs.Type == unix.HUGETLBFS_MAGIC) {
		logf("%s is already a %s mount: using it as it is", dir, fsName(fs.Type))
		return nil
	} else if mounted {
		return fmt.Errorf("%s is a mount of another file system (magic %#x): unmount it or pick another --root", dir, fs.Type)
	}
	opts := "mode=0755,huge=within_size"
	if quota > 0 {
		opts += fmt.Sprintf(",size=%d", quota+mountSlack)
	}
	err := unix.Mount("rekindle-weights", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts)
	if err == unix.EINVAL {
		// Kernels without transparent huge pages for shmem.
		logf("tmpfs refused %q (%v): mounting without huge pages", opts, err)
		opts = "mode=0755"
		if quota > 0 {
			opts += fmt.Sprintf(",size=%d", quota+mountSlack)
		}
		err = unix.Mount("rekindle-weights", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts)
	}
	if err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make %s private: %w", dir, err)
	}
	logf("mounted tmpfs (%s) on %s", opts, dir)
	return nil
}

func fsName(t int64) string {
	if t == unix.HUGETLBFS_MAGIC {
		return "hugetlbfs"
	}
	return "tmpfs"
}

// isMountPoint asks statx for STATX_ATTR_MOUNT_ROOT; kernels without it
// get the older test, a device that differs from the parent's.
func isMountPoint(dir string) (bool, error) {
	var sx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dir, 0, unix.STATX_BASIC_STATS, &sx); err != nil {
		return false, fmt.Errorf("stat %s: %w", dir, err)
	}
	if sx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		return sx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
	}
	var a, b unix.Stat_t
	if err := unix.Stat(dir, &a); err != nil {
		return false, err
	}
	if err := unix.Stat(dir+"/..", &b); err != nil {
		return false, err
	}
	return a.Dev != b.Dev, nil
}
