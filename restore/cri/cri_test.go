// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package cri

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"
	runtimespec "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestCheckpointImagePath(t *testing.T) {
	restoreDir := t.TempDir()
	assert.Equal(t, filepath.Join(restoreDir, "checkpoint"), CheckpointImagePath(restoreDir),
		"without a cache path file the restore dir's own copy is used")

	cache := "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/42/fs"
	require.NoError(t, os.WriteFile(filepath.Join(restoreDir, CachePathFile), []byte(cache), 0o600))
	assert.Equal(t, filepath.Join(cache, "checkpoint"), CheckpointImagePath(restoreDir),
		"the cached extracted checkpoint named in the restore dir is used")
}

func TestColdStartRestoreFallbackFile(t *testing.T) {
	restoreDir := t.TempDir()
	fb, err := ReadFallback(restoreDir)
	require.NoError(t, err)
	assert.Nil(t, fb, "a restore dir without a fallback file asks for no cold start")

	want := Fallback{Fallback: "cold", CheckpointImage: "example.com/ckpt:1", BaseImage: "example.com/engine:1"}
	require.NoError(t, WriteFallback(restoreDir, want))
	fb, err = ReadFallback(restoreDir)
	require.NoError(t, err)
	require.NotNil(t, fb)
	assert.Equal(t, want, *fb)

	require.NoError(t, WriteFallback(restoreDir, Fallback{Fallback: "none"}))
	fb, err = ReadFallback(restoreDir)
	require.NoError(t, err)
	assert.Nil(t, fb, "a fallback other than cold is no cold start")

	require.NoError(t, os.WriteFile(filepath.Join(restoreDir, FallbackFile), []byte("{"), 0o600))
	fb, err = ReadFallback(restoreDir)
	assert.Error(t, err)
	assert.Nil(t, fb)
}

func TestCheckpointCacheEntryFile(t *testing.T) {
	restoreDir := t.TempDir()
	e, err := ReadCacheEntry(restoreDir)
	require.NoError(t, err)
	assert.Nil(t, e, "a restore dir without an entry file holds no cache entry")

	want := CacheEntry{Snapshotter: "overlayfs", Layer: digest.FromString("layer")}
	require.NoError(t, WriteCacheEntry(restoreDir, want))
	e, err = ReadCacheEntry(restoreDir)
	require.NoError(t, err)
	require.NotNil(t, e)
	assert.Equal(t, want, *e)

	require.NoError(t, os.WriteFile(filepath.Join(restoreDir, CacheEntryFile), []byte("{"), 0o600))
	e, err = ReadCacheEntry(restoreDir)
	assert.Error(t, err)
	assert.Nil(t, e)
}

func TestColdStartSpec(t *testing.T) {
	current := &runtimespec.Spec{
		Hostname: "pod",
		Process: &runtimespec.Process{
			Args: []string{"/bin/sh"},
			Env:  []string{"PATH=/usr/bin", "ENGINE_PORT=31000", "ONLY_NEW=1"},
			Cwd:  "/",
		},
	}
	dumped := &runtimespec.Spec{
		Process: &runtimespec.Process{
			Args: []string{"python3", "-m", "engine"},
			Env:  []string{"PATH=/opt/venv/bin:/usr/bin", "ENGINE_PORT=30000", "MODEL=tiny"},
			Cwd:  "/srv/engine",
		},
	}
	config := &runtime.ContainerConfig{Envs: []*runtime.KeyValue{{Key: "ENGINE_PORT", Value: []byte("31000")}}}
	got, err := ColdSpec(context.Background(), current, dumped, config)
	require.NoError(t, err)
	assert.Equal(t, []string{"python3", "-m", "engine"}, got.Process.Args)
	assert.Equal(t, "/srv/engine", got.Process.Cwd)
	assert.Equal(t, []string{"PATH=/opt/venv/bin:/usr/bin", "ENGINE_PORT=31000", "MODEL=tiny", "ONLY_NEW=1"}, got.Process.Env,
		"the checkpoint's environment, under the variables the container's config sets")
	assert.Equal(t, "pod", got.Hostname)
	assert.Equal(t, []string{"/bin/sh"}, current.Process.Args, "the container's spec is left as it is")

	// The config's args follow the checkpoint's command; its command
	// replaces both; its working directory wins.
	config.Args = []string{"--port", "31000"}
	got, err = ColdSpec(context.Background(), current, dumped, config)
	require.NoError(t, err)
	assert.Equal(t, []string{"python3", "-m", "engine", "--port", "31000"}, got.Process.Args)
	config.Command, config.WorkingDir = []string{"python3", "-m", "other"}, "/work"
	got, err = ColdSpec(context.Background(), current, dumped, config)
	require.NoError(t, err)
	assert.Equal(t, []string{"python3", "-m", "other", "--port", "31000"}, got.Process.Args)
	assert.Equal(t, "/work", got.Process.Cwd)
}
