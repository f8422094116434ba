// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package cri

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/log"
	runtimespec "github.com/opencontainers/runtime-spec/specs-go"

	"rekindle.local/restore/devshm"
)

// devShm is where a container's shared memory is mounted.
const devShm = "/dev/shm"

// DevShmSource returns the source of the bind mount at /dev/shm in spec,
// "" when it has none.
func DevShmSource(spec *runtimespec.Spec) string {
	if spec == nil {
		return ""
	}
	for _, m := range spec.Mounts {
		if filepath.Clean(m.Destination) == devShm && m.Type == "bind" {
			return m.Source
		}
	}
	return ""
}

// RestoreDevShm unpacks the checkpoint's /dev/shm (devshm-checkpoint.tar,
// which oci-checkpoint create and CRI-O write for a container whose /dev/shm
// came from its sandbox) from the extracted checkpoint that restoreDir
// names into sandboxShm, the new sandbox's /dev/shm, before the runtime
// restores: CRIU dumped no file of that external mount, and links back the
// link_remap files of what the processes held open there under removed
// names. spec is the new container's: only a /dev/shm bound from
// sandboxShm is written to. A container whose pod now uses the host's IPC
// namespace (hostIPC), or mounts no /dev/shm, gets nothing, with a warning:
// the host's /dev/shm is never written. The archive is the image's, so it
// is unpacked as package devshm does: beneath sandboxShm only, no symbolic
// link, device or name outside it, no more than the tmpfs holds.
func RestoreDevShm(ctx context.Context, id, restoreDir, sandboxShm string, spec *runtimespec.Spec) error {
	data := filepath.Dir(CheckpointImagePath(restoreDir))
	f, err := os.Open(filepath.Join(data, devshm.ArchiveName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint's %s: %w", devshm.ArchiveName, err)
	}
	defer f.Close()
	if src := DevShmSource(spec); sandboxShm == "" || filepath.Clean(src) != filepath.Clean(sandboxShm) {
		log.G(ctx).WithField("container", id).Warnf("the checkpoint holds /dev/shm's files (%s), but the container's /dev/shm (%q) is not its sandbox's: not restored there", devshm.ArchiveName, src)
		return nil
	}
	limit, err := devshm.Size(sandboxShm)
	if err != nil {
		return fmt.Errorf("the sandbox's /dev/shm: %w", err)
	}
	if err := devshm.Extract(f, sandboxShm, limit); err != nil {
		return fmt.Errorf("restore the checkpoint's /dev/shm into the sandbox's (%s): %w", sandboxShm, err)
	}
	return nil
}
