/*
   Copyright The containerd Authors.

   Licensed under the Apache License, Version 2.0 (the "License");
   you may not use this file except in compliance with the License.
   You may obtain a copy of the License at

       http://www.apache.org/licenses/LICENSE-2.0

   Unless required by applicable law or agreed to in writing, software
   distributed under the License is distributed on an "AS IS" BASIS,
   WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
   See the License for the specific language governing permissions and
   limitations under the License.
*/

package shim

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// RemoveRestoreLeftovers removes what a `runc restore` of container id
// leaves when it is killed (RestoreWithin's grace ran out): runc writes
// its state only once the restore is done, so a forced `runc delete`
// finds nothing, and the container's root stays bound at criu-root in
// runc's state dir (runcRoot/id) and its cgroups stay, empty, in every
// hierarchy. The cgroups are those of the bundle's spec; a systemd
// slice ("slice:prefix:name") is systemd's to remove.
func RemoveRestoreLeftovers(runcRoot, id, bundle string) error {
	var errs []error
	state := filepath.Join(runcRoot, id)
	criuRoot := filepath.Join(state, "criu-root")
	if err := unix.Unmount(criuRoot, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
		errs = append(errs, &os.PathError{Op: "unmount", Path: criuRoot, Err: err})
	}
	for _, dir := range []string{criuRoot, state} {
		// Only what is empty: runc's state of a restore that got further
		// is runc delete's.
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) {
			errs = append(errs, err)
		}
	}
	path, err := specCgroupsPath(filepath.Join(bundle, "config.json"))
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if path == "" || strings.Contains(path, ":") {
		return errors.Join(errs...)
	}
	mounts, err := cgroupMounts()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, mp := range mounts {
		dir := filepath.Join(mp, filepath.Clean("/"+path))
		if dir == mp {
			continue
		}
		if err := unix.Rmdir(dir); err != nil && err != unix.ENOENT {
			errs = append(errs, &os.PathError{Op: "rmdir", Path: dir, Err: err})
		}
	}
	return errors.Join(errs...)
}

func specCgroupsPath(config string) (string, error) {
	b, err := os.ReadFile(config)
	if err != nil {
		return "", err
	}
	var spec specs.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return "", fmt.Errorf("%s: %w", config, err)
	}
	if spec.Linux == nil {
		return "", nil
	}
	return spec.Linux.CgroupsPath, nil
}

// cgroupMounts returns the mount points of this mount namespace's cgroup
// (v1) and cgroup2 file systems.
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mps []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
		pre, post, ok := strings.Cut(s.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) >= 5 && len(g) >= 1 && (g[0] == "cgroup" || g[0] == "cgroup2") {
			mps = append(mps, unescapeMountinfo(f[4]))
		}
	}
	return mps, s.Err()
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%3o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
