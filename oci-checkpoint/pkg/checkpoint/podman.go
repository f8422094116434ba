package checkpoint

import (
	"encoding/json"
	"strconv"
	"strings"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/opencontainers/go-digest"
)

// Podman 4.x restores a checkpoint image by recreating the container from
// the archive: it decodes config.dump as its own container configuration
// (libpod's ContainerConfig) and spec.dump as the runtime spec to restore
// with (podman 4.3.1, pkg/checkpoint/checkpoint_restore.go,
// CRImportCheckpoint). checkpointctl's ContainerConfig and libpod's agree
// on the keys they share (id, name, rootfsImageName, runtime, createdTime),
// so one config.dump serves both: checkpointctl's fields, then the few of
// libpod's that podman cannot do without. Readers of either kind ignore the
// other's keys.

// configDump is config.dump.
type configDump struct {
	crmetadata.ContainerConfig
	podmanConfig
}

// podmanConfig holds the fields of libpod's ContainerConfig (their JSON
// names) that podman needs to recreate the container.
type podmanConfig struct {
	// RootfsImageID is the base image's ID in podman's image store (its
	// config digest, hex); podman refuses a config without it ("must set
	// root filesystem source to either image or rootfs").
	RootfsImageID string `json:"rootfsImageID,omitempty"`
	RawImageName  string `json:"RawImageName,omitempty"`
	// A network namespace of podman's own, with the "none" network: podman
	// then writes /etc/resolv.conf and /etc/hosts for the container, whose
	// bind mounts CRIU must find again, and sets up no network. CRIU
	// restores the network namespace the container had (loopback and the
	// listening sockets) from the checkpoint, as for containerd.
	CreateNetNS bool   `json:"createNetNS"`
	NetMode     string `json:"networkMode,omitempty"`
	// ShmSize is the size of the /dev/shm podman mounts, in bytes.
	ShmSize     int64  `json:"shmSize"`
	StopSignal  uint   `json:"stopSignal,omitempty"`
	StopTimeout uint   `json:"stopTimeout,omitempty"`
	LogDriver   string `json:"logDriver,omitempty"`
	// Passwd false: podman adds no /etc/passwd of its own, a bind mount
	// the checkpointed container did not have.
	Passwd *bool `json:"passwd,omitempty"`
}

// defaultShmSize is containerd's and podman's /dev/shm size.
const defaultShmSize = 64 << 20

// newPodmanConfig describes, for podman, a container whose runtime spec is
// spec (the one written as spec.dump) on the base image with the config
// descriptor's digest baseConfig.
func newPodmanConfig(spec []byte, baseImage string, baseConfig digest.Digest) podmanConfig {
	no := false
	return podmanConfig{
		RootfsImageID: baseConfig.Encoded(),
		RawImageName:  baseImage,
		CreateNetNS:   true,
		NetMode:       "none",
		ShmSize:       shmSize(spec),
		StopSignal:    15,
		StopTimeout:   10,
		LogDriver:     "k8s-file",
		Passwd:        &no,
	}
}

// shmSize is the size= option of the spec's /dev/shm mount in bytes, or
// the default.
func shmSize(spec []byte) int64 {
	var s struct {
		Mounts []struct {
			Destination string   `json:"destination"`
			Options     []string `json:"options"`
		} `json:"mounts"`
	}
	if json.Unmarshal(spec, &s) != nil {
		return defaultShmSize
	}
	for _, m := range s.Mounts {
		if m.Destination != "/dev/shm" {
			continue
		}
		for _, o := range m.Options {
			if v, ok := strings.CutPrefix(o, "size="); ok {
				if n, ok := parseSize(v); ok {
					return n
				}
			}
		}
	}
	return defaultShmSize
}

// parseSize reads a tmpfs size: bytes with an optional k, m or g suffix
// (a percentage of memory is not a size: false).
func parseSize(v string) (int64, bool) {
	v = strings.ToLower(v)
	mult := int64(1)
	switch {
	case strings.HasSuffix(v, "k"):
		mult = 1 << 10
	case strings.HasSuffix(v, "m"):
		mult = 1 << 20
	case strings.HasSuffix(v, "g"):
		mult = 1 << 30
	}
	if mult != 1 {
		v = v[:len(v)-1]
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n * mult, true
}
