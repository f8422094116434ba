package checkpoint

import (
	"context"
	"fmt"
	"strings"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/containerd/v2/client"

	"rekindle.local/oci-checkpoint/pkg/annotations"
	"rekindle.local/oci-checkpoint/pkg/hostinfo"
	"rekindle.local/oci-checkpoint/pkg/phase"
	"rekindle.local/oci-checkpoint/pkg/registry"
)

// Report is what `oci-checkpoint inspect` and `check` print (schema:
// docs/json.md).
type Report struct {
	SchemaVersion int    `json:"schema_version"`
	Image         string `json:"image"`
	Digest        string `json:"digest"` // the manifest's
	Size          int64  `json:"size"`   // the manifest, config and layers, as Result's and Entry's
	Local         bool   `json:"local"`
	Checkpoint    bool   `json:"checkpoint"`
	LayerSize     int64  `json:"layer_size"`
	LayerDigest   string `json:"layer_digest"`
	// Compression is the layer's form: none, pages or zstd.
	Compression string        `json:"compression"`
	Engine      string        `json:"engine,omitempty"`
	BaseImage   string        `json:"base_image,omitempty"`
	BaseDigest  string        `json:"base_digest,omitempty"`
	Created     string        `json:"created,omitempty"`
	GPUs        []RecordedGPU `json:"gpus"`
	// Phases are create's, in the order they ran: to package from the
	// manifest; for an image create stored on this host, all of them
	// (resume or stop too) from the image store's record.
	Phases      []phase.Timing    `json:"phases"`
	Annotations map[string]string `json:"annotations"`
	Restorable  bool              `json:"restorable_here"`
	Problems    []string          `json:"problems"`
	Notes       []string          `json:"notes"`
}

// RecordedGPU is a GPU as an image's manifest records it: Result's GPUs
// add what only the checkpointing host knew (bus id, minor).
type RecordedGPU struct {
	UUID  string `json:"uuid"`
	Model string `json:"model,omitempty"`
}

// Inspect reads a checkpoint image's manifest (local, else from its
// registry) and checks it against this host. An image that is no
// checkpoint gives an error. reg says how registries are reached.
func Inspect(ctx context.Context, c *client.Client, ref string, reg registry.Options) (*Report, error) {
	f, err := findManifest(ctx, c, ref, reg)
	if err != nil {
		return nil, err
	}
	name, m, ann := f.name, f.m, f.m.Annotations
	r := &Report{SchemaVersion: SchemaVersion, Image: name, Digest: f.desc.Digest.String(), Size: f.desc.Size + m.Config.Size, Local: f.local,
		Annotations: ann, GPUs: []RecordedGPU{}, Phases: []phase.Timing{}, Problems: []string{}, Notes: []string{}}
	r.Checkpoint = annotations.IsCheckpoint(ann)
	if !r.Checkpoint {
		return r, fmt.Errorf("%s is not a checkpoint image (no checkpoint annotation on its manifest)", name)
	}
	for _, l := range m.Layers {
		r.Size += l.Size
		r.LayerSize += l.Size
		r.LayerDigest = l.Digest.String()
		switch {
		case l.Annotations[annotations.LayerPages] != "":
			r.Compression = CompressionPages
			r.Notes = append(r.Notes, "its pages images are compressed (--compression pages): only Rekindle's containerd restores it")
		case strings.HasSuffix(l.MediaType, "+zstd"):
			r.Compression = CompressionZstd
		default:
			r.Compression = CompressionNone
		}
	}
	r.Engine, r.BaseImage, r.Created = ann[annotations.Engine], ann[annotations.SourceImage], ann[annotations.Created]
	r.BaseDigest = ann[crmetadata.CheckpointAnnotationRootfsImageID]
	if u := ann[annotations.GPUUUIDs]; u != "" {
		for _, id := range strings.Split(u, ",") {
			r.GPUs = append(r.GPUs, RecordedGPU{UUID: id, Model: ann[annotations.GPUModel]})
		}
	}
	// Absent or bad: none shown.
	if l, ok := f.labels[annotations.Phases]; ok {
		r.Phases = phase.Parse(l)
	} else {
		r.Phases = phase.Parse(ann[annotations.Phases])
	}
	if ann[annotations.Source] == annotations.SourceCRIArchive {
		r.Notes = append(r.Notes, "imported from a CRI checkpoint archive (oci-checkpoint import): the engine was dumped as it ran, not quiesced, and no wake helper resumes it")
	}
	problems, notes := hostinfo.Check(ann, hostinfo.Read())
	for _, p := range problems {
		r.Problems = append(r.Problems, p.String())
	}
	r.Notes = append(r.Notes, notes...)
	r.Restorable = len(problems) == 0
	return r, nil
}
