package checkpoint

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"rekindle.local/oci-checkpoint/pkg/annotations"
	"rekindle.local/oci-checkpoint/pkg/phase"
	"rekindle.local/oci-checkpoint/pkg/wake"
	"rekindle.local/restore/devshm"
)

// pack writes the dump files and the image from the work directory.
func (cr *creation) pack() error {
	start := time.Now()
	cr.res = &Result{SchemaVersion: SchemaVersion, Image: cr.name, Container: cr.ctr.ID(), Engine: cr.o.Engine.Name,
		Created: cr.checkpointedAt.Format(time.RFC3339), BaseImage: cr.info.Image, GPUs: cr.gpus}
	marker, _ := json.Marshal(map[string]string{"checkpointed_at": cr.checkpointedAt.Format(time.RFC3339Nano)})
	if err := writeRootfsDiff(cr.ctx, cr.c, cr.info, cr.diffLower, cr.archiveDir, []ExtraFile{{Name: wake.WakeFile, Data: marker, Mode: 0o644}}); err != nil {
		where := contentRoot(cr.ctx, cr.c)
		if where == "" || strings.Contains(err.Error(), cr.work) {
			where = cr.work
		}
		return noSpace(fmt.Errorf("rootfs diff: %w", err), where)
	}
	// After the dump: it makes the link_remap files of what the engine
	// holds open in /dev/shm under a removed name.
	// Only then is the task asked for its processes: the rest of the
	// packaging never calls the runtime shim.
	var pids []uint32
	if sandboxDevShm(cr.spec) != "" {
		if procs, err := cr.task.Pids(cr.ctx); err == nil {
			for _, p := range procs {
				pids = append(pids, p.Pid)
			}
		}
	}
	if src, n, err := writeDevShm(cr.spec, cr.archiveDir, cr.criuDir, pids); err != nil {
		return noSpace(fmt.Errorf("%s: %w", devshm.ArchiveName, err), cr.work)
	} else if src != "" {
		if cr.o.Progress != nil {
			fmt.Fprintf(cr.o.Progress, "/dev/shm of the pod: %d bytes from %s\n", n, src)
		}
	}
	base, err := cr.baseImage()
	if err != nil {
		return fmt.Errorf("base image %s of the container: %w (it must stay in the image store while checkpointing)", cr.info.Image, err)
	}
	std := cr.standard(base)
	if err := writeDumps(cr.ctx, cr.ctr, cr.info, base, cr.archiveDir, cr.checkpointedAt, std); err != nil {
		return err
	}
	cr.res.BaseDigest = base.Target().Digest.String()
	annotate := func() map[string]string {
		cr.res.Annotations = cr.annotations(std, time.Since(start))
		return cr.res.Annotations
	}
	desc, size, err := writeImage(cr.ctx, cr.c, cr.name, base, cr.archiveDir, annotate, cr.o)
	if err != nil {
		return err
	}
	cr.res.Digest, cr.res.Size, cr.res.OCIArchive = desc.Digest.String(), size, cr.o.OCIArchive
	return nil
}

// baseImage is the container's base image. A container restored from a
// checkpoint image on a host that lacked its base has none by name: the
// restore fetched the base's content but made no image record. Its base is
// then the content its checkpoint recorded the digest of, and only that.
func (cr *creation) baseImage() (client.Image, error) {
	img, err := cr.c.GetImage(cr.ctx, cr.info.Image)
	if err == nil || !errdefs.IsNotFound(err) || cr.baseDigest == "" {
		return img, err
	}
	desc, derr := descriptorOf(cr.ctx, cr.c.ContentStore(), cr.baseDigest)
	if derr != nil {
		return nil, fmt.Errorf("%w, nor its recorded digest %s in the content store: %v", err, cr.baseDigest, derr)
	}
	img = client.NewImage(cr.c, images.Image{Name: cr.info.Image, Target: desc})
	if _, err := img.Config(cr.ctx); err != nil {
		return nil, fmt.Errorf("recorded digest %s: %w", cr.baseDigest, err)
	}
	return img, nil
}

// descriptorOf describes the manifest or index stored as dgst.
func descriptorOf(ctx context.Context, cs content.Store, dgst digest.Digest) (ocispec.Descriptor, error) {
	info, err := cs.Info(ctx, dgst)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if info.Size > 4<<20 {
		return ocispec.Descriptor{}, fmt.Errorf("%s is %d bytes: not a manifest", dgst, info.Size)
	}
	b, err := content.ReadBlob(ctx, cs, ocispec.Descriptor{Digest: dgst, Size: info.Size})
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	var m struct {
		MediaType string            `json:"mediaType"`
		Manifests []json.RawMessage `json:"manifests"`
		Config    *json.RawMessage  `json:"config"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("%s: %w", dgst, err)
	}
	mt := m.MediaType
	switch {
	case mt != "":
	case m.Manifests != nil:
		mt = ocispec.MediaTypeImageIndex
	case m.Config != nil:
		mt = ocispec.MediaTypeImageManifest
	default:
		return ocispec.Descriptor{}, fmt.Errorf("%s is neither an image manifest nor an index", dgst)
	}
	return ocispec.Descriptor{MediaType: mt, Digest: dgst, Size: info.Size}, nil
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
// Rekindle's own and the legacy CRI-O name; the phase times are those so
// far, in the order they ran, package's until now (packing, its time so
// far).
func (cr *creation) annotations(std map[string]string, packing time.Duration) map[string]string {
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
	phases, _ := json.Marshal(append(slices.Clip(cr.t.Phases), phase.Timing{Name: "package", Seconds: packing.Seconds()}))
	ann[annotations.Phases] = string(phases)
	ann[annotations.LegacyCheckpoint] = containerName(cr.ctr.ID(), cr.info.Labels)
	if cr.o.Fallback == annotations.FallbackCold {
		ann[annotations.Fallback] = annotations.FallbackCold
	}
	return ann
}

// labelPhases records all of create's phases, the last ones (the end of
// package, resume or stop) with them, on the image store's record of the
// image, where inspect finds them: the manifest was written before they
// ended. A label is this host's metadata and does not travel with the
// image; nor can it be recorded for an OCI archive. It is not worth
// failing the checkpoint for.
func (cr *creation) labelPhases() {
	if cr.o.OCIArchive != "" {
		return
	}
	img, err := cr.c.ImageService().Get(cr.ctx, cr.name)
	if err != nil {
		return
	}
	b, _ := json.Marshal(cr.t.Phases)
	if img.Labels == nil {
		img.Labels = map[string]string{}
	}
	img.Labels[annotations.Phases] = string(b)
	cr.c.ImageService().Update(cr.ctx, img, "labels."+annotations.Phases)
}

// packageFailed says how to get the engine back when --stop-at-dump has
// ended it: there is nothing left to resume.
func (cr *creation) packageFailed(err error) error {
	if !cr.o.StopAtDump {
		return err
	}
	cr.quiesced = false
	if derr := deleteTask(context.WithoutCancel(cr.ctx), cr.task, cr.info.Labels); derr != nil {
		err = fmt.Errorf("%w (and %v)", err, derr)
	}
	return fmt.Errorf("%w; the container was stopped by the dump (--stop-at-dump): restart it with 'nerdctl start %s'", err, cr.o.Container)
}
