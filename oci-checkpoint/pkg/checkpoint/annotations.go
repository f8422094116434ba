package checkpoint

import (
	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"

	"rekindle.local/oci-checkpoint/pkg/annotations"
	"rekindle.local/oci-checkpoint/pkg/hostinfo"
)

// Standard describes a checkpoint in the terms of checkpointctl's
// org.criu.checkpoint.* annotations, which CRI-O and checkpointctl read, and
// of the two io.podman.annotations.checkpoint.* keys podman 4.x looks for;
// Rekindle's own org.rekindle.* annotations go beside them.
type Standard struct {
	ContainerName  string
	Pod            string // CRI containers only: the pod's name, uid and namespace
	PodID          string
	PodNamespace   string
	BaseImage      string // the base image's name, as the container was created from it
	BaseDigest     string // the base image's manifest digest
	Engine         string // what made the checkpoint, and its version
	EngineVersion  string
	RuntimeName    string
	RuntimeVersion string
	CRIU           string
	Kernel         string
	Runtime        hostinfo.Runtime
}

// Annotations returns the standard annotations; unknown facts are left out,
// not written empty.
func (s Standard) Annotations() map[string]string {
	a := map[string]string{
		crmetadata.CheckpointAnnotationName:                     s.ContainerName,
		crmetadata.CheckpointAnnotationPod:                      s.Pod,
		crmetadata.CheckpointAnnotationPodID:                    s.PodID,
		crmetadata.CheckpointAnnotationNamespace:                s.PodNamespace,
		crmetadata.CheckpointAnnotationEngine:                   s.Engine,
		crmetadata.CheckpointAnnotationEngineVersion:            s.EngineVersion,
		crmetadata.CheckpointAnnotationRootfsImageName:          s.BaseImage,
		crmetadata.CheckpointAnnotationRootfsImageUserRequested: s.BaseImage,
		crmetadata.CheckpointAnnotationRawImageName:             s.BaseImage,
		crmetadata.CheckpointAnnotationRootfsImageID:            s.BaseDigest,
		crmetadata.CheckpointAnnotationRuntimeName:              s.RuntimeName,
		crmetadata.CheckpointAnnotationRuntimeVersion:           s.RuntimeVersion,
		crmetadata.CheckpointAnnotationCriuVersion:              s.CRIU,
		crmetadata.CheckpointAnnotationHostArch:                 s.Runtime.Arch,
		crmetadata.CheckpointAnnotationHostKernel:               s.Kernel,
		crmetadata.CheckpointAnnotationCgroupVersion:            s.Runtime.CgroupVersion,
		crmetadata.CheckpointAnnotationDistributionName:         s.Runtime.Distribution,
		crmetadata.CheckpointAnnotationDistributionVersion:      s.Runtime.DistroVersion,
		annotations.PodmanCheckpointName:                        s.ContainerName,
		annotations.PodmanRuntimeName:                           s.RuntimeName,
	}
	for k, v := range a {
		if v == "" {
			delete(a, k)
		}
	}
	return a
}

// CRI labels containerd puts on the containers of a pod.
const (
	criPodName      = "io.kubernetes.pod.name"
	criPodUID       = "io.kubernetes.pod.uid"
	criPodNamespace = "io.kubernetes.pod.namespace"
)
