//go:build !windows

// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package shim

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/docker/go-units"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"rekindle.local/restore/checkpointimage/bounds"
)

// Limits bound a restore: the container's memory limit, from the
// spec it is restored with, and the host's bounds, which the tasks
// service put in that spec's annotations.
type Limits struct {
	memory int64 // linux.resources.memory.limit; 0 for none
	bounds.Bounds
}

// readSpec reads the spec of the restore in bundle.
func readSpec(bundle string) (*specs.Spec, error) {
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, err
	}
	var spec specs.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("read the spec of the restore: %w", err)
	}
	return &spec, nil
}

// ReadLimits reads the limits of a restore from the spec in bundle.
func ReadLimits(bundle string) (Limits, error) {
	spec, err := readSpec(bundle)
	if err != nil {
		return Limits{}, err
	}
	l := Limits{Bounds: bounds.FromAnnotations(spec.Annotations)}
	if r := spec.Linux; r != nil && r.Resources != nil && r.Resources.Memory != nil &&
		r.Resources.Memory.Limit != nil && *r.Resources.Memory.Limit > 0 {
		l.memory = *r.Resources.Memory.Limit
	}
	return l, nil
}

// decodeBound returns the most the decoded images may take in memory,
// the least of the container's memory limit (whose processes CRIU
// restores those pages into), the host's ceiling and avail, the host's
// available memory (-1 if unknown), and what that bound is; -1 if none.
// A restore beyond the container's limit would be OOM-killed after all
// its work. The tmpfs pages are charged to the shim's cgroup, not the
// container's, which runc restore creates only after the decode: the
// container's limit keeps the decode to what the container may take.
func (l Limits) decodeBound(avail int64) (bound int64, from string) {
	bound = -1
	for _, b := range []struct {
		n    int64
		from string
	}{
		{l.memory, "the container's memory limit (linux.resources.memory.limit)"},
		{l.MaxDecodedPages, bounds.MaxDecodedPagesOption},
		{avail, "the host's available memory (MemAvailable)"},
	} {
		if b.n > 0 && (bound < 0 || b.n < bound) {
			bound, from = b.n, b.from
		}
	}
	return bound, from
}

// checkDecoded refuses a restore whose images take room bytes decoded
// when that is beyond the bound.
func (l Limits) checkDecoded(room int64, images []compressedImage) error {
	bound, from := l.decodeBound(memAvailable())
	if bound < 0 || room <= bound {
		return nil
	}
	what := "the images"
	if len(images) > 0 {
		what = fmt.Sprintf("the images (the largest %s)", largestImage(images))
	}
	return fmt.Errorf("%s take %s (%d bytes) once their pages are decoded, more than the %s (%d bytes) of %s: "+
		"restore with more memory, or from an image checkpointed without --compression pages",
		what, units.BytesSize(float64(room)), room, units.BytesSize(float64(bound)), bound, from)
}

func largestImage(images []compressedImage) string {
	l := images[0]
	for _, img := range images[1:] {
		if img.content > l.content {
			l = img
		}
	}
	return l.name
}
