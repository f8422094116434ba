// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"archive/tar"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	devices "github.com/opencontainers/cgroups/devices/config"
)

// tmpfsArchive writes the archive of task 1's /dev/shm (remapMounts'
// tmpfs, device 2) holding members.
func tmpfsArchive(t *testing.T, dir string, members ...*tar.Header) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "tmpfs-dev-2.tar.gz.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z := gzip.NewWriter(f)
	w := tar.NewWriter(z)
	for _, h := range members {
		must(t, w.WriteHeader(h))
		if h.Size > 0 {
			_, err := w.Write(make([]byte, h.Size))
			must(t, err)
		}
	}
	must(t, w.Close())
	must(t, z.Close())
}

func TestCheckRestorePrivilegesTmpfsArchives(t *testing.T) {
	dir := func(name string) *tar.Header { return &tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755} }
	reg := func(name string, mode int64, uid int) *tar.Header {
		return &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Uid: uid, Gid: uid, Size: 3}
	}
	link := func(name, target string, typ byte) *tar.Header {
		return &tar.Header{Name: name, Typeflag: typ, Linkname: target, Mode: 0o777}
	}
	dev := func(name string, typ byte, major, minor int64) *tar.Header {
		return &tar.Header{Name: name, Typeflag: typ, Mode: 0o666, Devmajor: major, Devminor: minor}
	}
	for _, tc := range []struct {
		name    string
		members []*tar.Header
		user    int
		noMknod bool
		err     string
	}{
		{
			name: "runc's /dev",
			members: []*tar.Header{dir("./"), link("./fd", "/proc/self/fd", tar.TypeSymlink), link("./ptmx", "pts/ptmx", tar.TypeSymlink),
				dev("./null", tar.TypeChar, 1, 3), dir("./shm/")},
			noMknod: true,
		},
		{name: "a file of the user's", members: []*tar.Header{reg("./x", 0o644, 1000)}, user: 1000},
		{name: "NCCL's sparse file", members: []*tar.Header{{Name: "./psm_09d0d1c9", Typeflag: tar.TypeGNUSparse, Mode: 0o600, Format: tar.FormatGNU}}},
		{name: "a hard link in the archive", members: []*tar.Header{reg("./x", 0o644, 0), link("./y", "./x", tar.TypeLink)}},
		{
			name:    "a member that climbs",
			members: []*tar.Header{reg("./../../etc/passwd", 0o644, 0)},
			err:     `member "./../../etc/passwd" is not a clean relative name`,
		},
		{
			name:    "an absolute member",
			members: []*tar.Header{reg("/etc/passwd", 0o644, 0)},
			err:     `member "/etc/passwd" is not a clean relative name`,
		},
		{
			name:    "a member below a symlink of the archive",
			members: []*tar.Header{link("./etc", "/etc", tar.TypeSymlink), reg("./etc/passwd", 0o644, 0)},
			err:     `member "./etc/passwd" is below a symlink of the archive`,
		},
		{
			name:    "a hard link out of the archive",
			members: []*tar.Header{link("./shadow", "../../etc/shadow", tar.TypeLink)},
			err:     `is a hard link to "../../etc/shadow", not to a file of the archive`,
		},
		{
			name:    "a block device the config does not give",
			members: []*tar.Header{dev("./sda", tar.TypeBlock, 8, 0)},
			noMknod: true,
			err:     `member "./sda" is device b 8:0, which the config does not give the container, without CAP_MKNOD`,
		},
		{
			name:    "a set-uid file for a user without CAP_FSETID",
			members: []*tar.Header{reg("./sh", 0o4755, 1000)},
			user:    1000,
			err:     "has set-id bits (mode 04755) without CAP_FSETID",
		},
		{
			name:    "another user's file",
			members: []*tar.Header{reg("./x", 0o644, 2000)},
			user:    1000,
			err:     "is owned by 2000:2000, not root nor the config's user 1000 or groups [1000], without CAP_CHOWN",
		},
		{
			name:    "a folder after a symlink of its name",
			members: []*tar.Header{link("./x", "/etc", tar.TypeSymlink), dir("./x")},
			err:     `member "./x" appears twice in the archive`,
		},
		{
			name:    "an owner by name",
			members: []*tar.Header{{Name: "./x", Typeflag: tar.TypeReg, Mode: 0o644, Uname: "root"}},
			err:     `names its owner "root":""`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			images := images(t, thread())
			remapMounts(t, images.Name())
			tmpfsArchive(t, images.Name(), tc.members...)
			config := defaultConfig()
			config.Devices = []*devices.Device{{Path: "/dev/null", Rule: devices.Rule{Type: devices.CharDevice, Major: 1, Minor: 3}}}
			if tc.noMknod {
				config.Capabilities.Permitted = []string{"CAP_CHOWN"}
				config.Capabilities.Effective = config.Capabilities.Permitted
				core := thread()
				core.ThreadCore.Creds.CapPrm = []uint32{1, 0}
				core.ThreadCore.Creds.CapEff = []uint32{1, 0}
				writeImage(t, images.Name(), "core-1.img", "CORE", core)
			}
			p := &Process{UID: tc.user, GID: tc.user}
			if tc.user != 0 {
				config.Capabilities = nil
				core := thread()
				cr := core.ThreadCore.Creds
				for _, id := range []*uint32{cr.Uid, cr.Euid, cr.Suid, cr.Fsuid, cr.Gid, cr.Egid, cr.Sgid, cr.Fsgid} {
					*id = uint32(tc.user)
				}
				cr.CapPrm, cr.CapEff = []uint32{0, 0}, []uint32{0, 0}
				writeImage(t, images.Name(), "core-1.img", "CORE", core)
			}
			err := Restore(images, p, config, "")
			if tc.err == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) ||
				!strings.HasPrefix(err.Error(), "refusing to restore: checkpoint image tmpfs-dev-2.tar.gz.img (the tmpfs at /dev/shm)") {
				t.Fatalf("want an error with %q, got %v", tc.err, err)
			}
		})
	}
}
