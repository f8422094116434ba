package checkpoint

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/opencontainers/runtime-spec/specs-go"

	"rekindle.local/restore/devshm"
)

// criSandboxIDAnnotation names a CRI container's sandbox in its spec.
const criSandboxIDAnnotation = "io.kubernetes.cri.sandbox-id"

// sandboxDevShm returns the folder containerd's CRI binds into a container
// as /dev/shm from its pod's sandbox (STATE/sandboxes/ID/shm), "" when the
// container has none: it is not a CRI container, its pod shares the host's
// IPC namespace (hostIPC: the host's /dev/shm), or it mounts its own.
func sandboxDevShm(spec *specs.Spec) string {
	if spec == nil {
		return ""
	}
	id := spec.Annotations[criSandboxIDAnnotation]
	if id == "" {
		return ""
	}
	for _, m := range spec.Mounts {
		if filepath.Clean(m.Destination) != "/dev/shm" || m.Type != "bind" {
			continue
		}
		src := filepath.Clean(m.Source)
		if filepath.Base(src) == "shm" && filepath.Base(filepath.Dir(src)) == id &&
			filepath.Base(filepath.Dir(filepath.Dir(src))) == "sandboxes" {
			return src
		}
	}
	return ""
}

// writeDevShm writes a CRI container's /dev/shm, its sandbox's tmpfs, into
// the checkpoint folder dir as devshm-checkpoint.tar, as CRI-O does: CRI
// binds it from outside the container, so CRIU dumps no file in it, and a
// file there that a process holds open under a name it has since removed
// (a renamed POSIX semaphore) is dumped as a link_remap.N beside it that
// the restore needs. It writes nothing for a container without one. The
// files are the container's: they are read through descriptors, never
// through a symbolic link, and only directories and regular files, no more
// than the tmpfs's size (package devshm).
func writeDevShm(spec *specs.Spec, dir string) (string, int64, error) {
	src := sandboxDevShm(spec)
	if src == "" {
		return "", 0, nil
	}
	limit, err := devshm.Size(src)
	if err != nil {
		return src, 0, fmt.Errorf("the pod's /dev/shm: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, devshm.ArchiveName), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return src, 0, err
	}
	defer f.Close()
	n, err := devshm.Write(f, src, limit)
	if err != nil {
		return src, n, fmt.Errorf("the pod's /dev/shm: %w", err)
	}
	return src, n, f.Close()
}
