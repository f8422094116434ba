// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

// Package checkpointimage restores containers from checkpoint images in the
// format written by CRI-O, Podman and containerd's CRI CheckpointContainer
// (and read by checkpointctl): an OCI image whose single layer holds the
// CRIU images (checkpoint/), config.dump, spec.dump, rootfs-diff.tar and
// deleted.files, marked by a checkpoint annotation on the manifest.
package checkpointimage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
)

// legacyCheckpointAnnotation is the annotation CRI-O wrote before the
// annotation names moved to checkpointctl's lib.
const legacyCheckpointAnnotation = "io.kubernetes.cri-o.annotations.checkpoint.name"

// Image is a checkpoint image found in the image store.
type Image struct {
	// Name of the checkpoint image.
	Name string
	// References are the names the image has in the image store, which
	// the host's Policy matches; Name alone when there are none.
	References []string
	// Manifest is the platform manifest of the checkpoint image.
	Manifest ocispec.Manifest
	// Layer is the layer holding the checkpoint archive.
	Layer ocispec.Descriptor
	// ContainerName is the name of the checkpointed container, from the annotation.
	ContainerName string
}

// IsCheckpointAnnotated reports whether annotations mark a checkpoint image,
// and the checkpointed container's name.
func IsCheckpointAnnotated(annotations map[string]string) (string, bool) {
	for _, k := range []string{crmetadata.CheckpointAnnotationName, legacyCheckpointAnnotation} {
		if v, ok := annotations[k]; ok {
			return v, true
		}
	}
	return "", false
}

// Detect returns the checkpoint image behind img, or nil when img is not a
// checkpoint image. The annotation is looked for on the image's target
// (index or manifest) and on the platform manifest.
func Detect(ctx context.Context, provider content.Provider, img images.Image, platform platforms.MatchComparer) (*Image, error) {
	p, err := content.ReadBlob(ctx, provider, img.Target)
	if err != nil {
		return nil, fmt.Errorf("read %s of image %s: %w", img.Target.Digest, img.Name, err)
	}
	var top struct {
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	if err := json.Unmarshal(p, &top); err != nil {
		return nil, fmt.Errorf("decode %s of image %s: %w", img.Target.Digest, img.Name, err)
	}
	name, ok := IsCheckpointAnnotated(top.Annotations)
	if !ok {
		name, ok = IsCheckpointAnnotated(img.Target.Annotations)
	}

	manifest, err := images.Manifest(ctx, provider, img.Target, platform)
	if err != nil {
		if !ok && (errdefs.IsNotFound(err) || errors.Is(err, errdefs.ErrInvalidArgument)) {
			return nil, nil
		}
		return nil, fmt.Errorf("manifest of image %s: %w", img.Name, err)
	}
	if !ok {
		name, ok = IsCheckpointAnnotated(manifest.Annotations)
	}
	if !ok {
		return nil, nil
	}
	if len(manifest.Layers) != 1 {
		return nil, fmt.Errorf("checkpoint image %s has %d layers, want exactly one holding the checkpoint archive: %w",
			img.Name, len(manifest.Layers), errdefs.ErrInvalidArgument)
	}
	return &Image{
		Name:          img.Name,
		Manifest:      manifest,
		Layer:         manifest.Layers[0],
		ContainerName: name,
	}, nil
}
