package checkpoint

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/containerd/containerd/v2/client"

	"rekindle.local/oci-checkpoint/pkg/annotations"
	"rekindle.local/oci-checkpoint/pkg/hostinfo"
	"rekindle.local/oci-checkpoint/pkg/registry"
)

// Report is what `oci-checkpoint inspect` and `check` print.
type Report struct {
	Image       string `json:"image"`
	Local       bool   `json:"local"`
	Checkpoint  bool   `json:"checkpoint"`
	LayerSize   int64  `json:"layer_size"`
	LayerDigest string `json:"layer_digest"`
	// Compression is the layer's form: none, pages or zstd.
	Compression string             `json:"compression"`
	Engine      string             `json:"engine,omitempty"`
	BaseImage   string             `json:"base_image,omitempty"`
	Created     string             `json:"created,omitempty"`
	GPUs        []string           `json:"gpus"`
	Phases      map[string]float64 `json:"phases,omitempty"`
	Annotations map[string]string  `json:"annotations"`
	Restorable  bool               `json:"restorable_here"`
	Problems    []string           `json:"problems"`
	Notes       []string           `json:"notes"`
}

// Inspect reads a checkpoint image's manifest (local, else from its
// registry) and checks it against this host. An image that is no
// checkpoint gives an error. reg says how registries are reached.
func Inspect(ctx context.Context, c *client.Client, ref string, reg registry.Options) (*Report, error) {
	name, m, local, err := Manifest(ctx, c, ref, reg)
	if err != nil {
		return nil, err
	}
	ann := m.Annotations
	r := &Report{Image: name, Local: local, Annotations: ann, GPUs: []string{}, Problems: []string{}, Notes: []string{}}
	r.Checkpoint = annotations.IsCheckpoint(ann)
	if !r.Checkpoint {
		return r, fmt.Errorf("%s is not a checkpoint image (no checkpoint annotation on its manifest)", name)
	}
	for _, l := range m.Layers {
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
	if u := ann[annotations.GPUUUIDs]; u != "" {
		r.GPUs = strings.Split(u, ",")
	}
	json.Unmarshal([]byte(ann[annotations.Phases]), &r.Phases) // absent or bad: none shown
	problems, notes := hostinfo.Check(ann, hostinfo.Read())
	for _, p := range problems {
		r.Problems = append(r.Problems, p.String())
	}
	r.Notes = append(r.Notes, notes...)
	r.Restorable = len(problems) == 0
	return r, nil
}
