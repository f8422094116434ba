//go:build linux

// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package shim

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"rekindle.local/restore/checkpointimage/bounds"
)

func TestRestoreLimitsDecodeBound(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		memory, ceiling, avail int64
		wantBound              int64
		wantFrom               string
	}{
		{"container", 64 << 20, 1 << 30, 8 << 30, 64 << 20, "linux.resources.memory.limit"},
		{"ceiling", 4 << 30, 1 << 30, 8 << 30, 1 << 30, "checkpoint_restore_max_decoded_pages"},
		{"host", 0, 1 << 30, 512 << 20, 512 << 20, "MemAvailable"},
		{"no container limit", 0, 1 << 30, -1, 1 << 30, "checkpoint_restore_max_decoded_pages"},
		{"none", 0, 0, -1, -1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := Limits{memory: tc.memory, Bounds: bounds.Bounds{MaxDecodedPages: tc.ceiling}}
			bound, from := l.decodeBound(tc.avail)
			assert.Equal(t, tc.wantBound, bound)
			assert.Contains(t, from, tc.wantFrom)
		})
	}
}

func TestReadRestoreLimits(t *testing.T) {
	bundle := t.TempDir()
	limit := int64(32 << 20)
	spec := specs.Spec{
		Annotations: map[string]string{bounds.MaxDecodedPagesAnnotation: "1073741824"},
		Linux:       &specs.Linux{Resources: &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &limit}}},
	}
	b, err := json.Marshal(&spec)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o600))
	l, err := ReadLimits(bundle)
	require.NoError(t, err)
	assert.Equal(t, limit, l.memory)
	assert.Equal(t, int64(1<<30), l.MaxDecodedPages)
}

// A layer of a few KiB whose table says it decodes to more than the
// container may hold is refused before a tmpfs is mounted.
func TestExpandPagesRefusesBeyondMemoryLimit(t *testing.T) {
	dir := imageDir(t, map[string][]byte{
		"pages-1.img.zst": seekable(t, make([]byte, 8<<20), 1<<20, nil),
		"pages-2.img.zst": seekable(t, pages(8192), 4096, nil),
		"inventory.img":   []byte("inventory"),
	})
	target := filepath.Join(t.TempDir(), "criu-pages")
	_, undo, err := ExpandPages(context.Background(), dir, target, Limits{memory: 4 << 20})
	undo()
	require.Error(t, err)
	for _, want := range []string{"pages-1.img.zst", "once their pages are decoded", "4MiB (4194304 bytes)", "the container's memory limit (linux.resources.memory.limit)"} {
		assert.Contains(t, err.Error(), want)
	}
	assert.NoDirExists(t, target, "a refused restore left its mount point")
}
