package checkpoint

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"

	"rekindle.local/oci-checkpoint/pkg/annotations"
	"rekindle.local/oci-checkpoint/pkg/wake"
)

// pack writes the dump files and the image from the work directory.
func (cr *creation) pack() error {
	cr.res = &Result{Image: cr.name, Container: cr.ctr.ID(), BaseImage: cr.info.Image, GPUs: cr.gpus}
	marker, _ := json.Marshal(map[string]string{"checkpointed_at": cr.checkpointedAt.Format(time.RFC3339Nano)})
	if err := writeRootfsDiff(cr.ctx, cr.c, cr.info, cr.diffLower, cr.archiveDir, []ExtraFile{{Name: wake.WakeFile, Data: marker, Mode: 0o644}}); err != nil {
		where := contentRoot(cr.ctx, cr.c)
		if where == "" || strings.Contains(err.Error(), cr.work) {
			where = cr.work
		}
		return noSpace(fmt.Errorf("rootfs diff: %w", err), where)
	}
	base, err := cr.c.GetImage(cr.ctx, cr.info.Image)
	if err != nil {
		return fmt.Errorf("base image %s of the container: %w (it must stay in the image store while checkpointing)", cr.info.Image, err)
	}
	std := cr.standard(base)
	if err := writeDumps(cr.ctx, cr.ctr, cr.info, base, cr.archiveDir, cr.checkpointedAt, std); err != nil {
		return err
	}
	ann := cr.annotations(std)
	cr.res.Annotations = ann
	desc, size, err := writeImage(cr.ctx, cr.c, cr.name, base, cr.archiveDir, ann, cr.o)
	if err != nil {
		return err
	}
	cr.res.Digest, cr.res.Size, cr.res.OCIArchive = desc.Digest.String(), size, cr.o.OCIArchive
	return nil
}

func (cr *creation) standard(base client.Image) map[string]string {
	info := cr.info
	return Standard{
		ContainerName: containerName(cr.ctr.ID(), info.Labels),
		Pod:           info.Labels[criPodName], PodID: info.Labels[criPodUID], PodNamespace: info.Labels[criPodNamespace],
		BaseImage: info.Image, BaseDigest: base.Target().Digest.String(),
		Engine: checkpointer, EngineVersion: cr.o.Version,
		RuntimeName: "runc", RuntimeVersion: cr.runtime.RuncVersion,
		CRIU: cr.host.CRIU, Kernel: cr.host.Kernel, Runtime: cr.runtime,
	}.Annotations()
}

// annotations are the manifest's: the host's facts, the standard ones,
// Rekindle's own and the legacy CRI-O name; the phase times are those so far.
func (cr *creation) annotations(std map[string]string) map[string]string {
	ann := cr.host.Annotations(cr.gpus)
	for k, v := range std {
		ann[k] = v
	}
	ann[annotations.Format] = annotations.FormatVersion
	ann[annotations.Engine] = cr.o.Engine.Name
	ann[annotations.EnginePort] = strconv.Itoa(cr.o.Engine.Port)
	if cr.facts.Version != "" {
		ann[annotations.EngineVersion] = cr.facts.Version
	}
	ann[annotations.Created] = cr.checkpointedAt.Format(time.RFC3339)
	ann[annotations.SourceImage] = cr.info.Image
	phases, _ := json.Marshal(cr.t.Map())
	ann[annotations.Phases] = string(phases)
	ann[annotations.LegacyCheckpoint] = containerName(cr.ctr.ID(), cr.info.Labels)
	if cr.o.Fallback == annotations.FallbackCold {
		ann[annotations.Fallback] = annotations.FallbackCold
	}
	return ann
}

// packageFailed says how to get the engine back when --stop-at-dump has
// ended it: there is nothing left to resume.
func (cr *creation) packageFailed(err error) error {
	if !cr.o.StopAtDump {
		return err
	}
	cr.quiesced = false
	return fmt.Errorf("%w; the container was stopped by the dump (--stop-at-dump): restart it with 'nerdctl start %s'", err, cr.o.Container)
}
