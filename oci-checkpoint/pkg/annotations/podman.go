package annotations

// Podman 4.x names its checkpoint annotations under its own prefix
// (libpod/define/annotations.go), not checkpointctl's org.criu.checkpoint.*.
// `podman container restore IMAGE` takes an image for a checkpoint only when
// its manifest has PodmanRuntimeName, and only when the value is the name of
// the OCI runtime podman uses (podman 4.3.1, cmd/podman/utils/utils.go,
// IsCheckpointImage: "image is not a checkpoint" without it, "requires
// runtime" when it differs).
const (
	PodmanCheckpointName = "io.podman.annotations.checkpoint.name"
	PodmanRuntimeName    = "io.podman.annotations.checkpoint.runtime.name"
)
