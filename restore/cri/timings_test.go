// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package cri

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRestoreTimings(t *testing.T) {
	dir := t.TempDir()
	tm, err := RestoreTimings(dir, 2*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "container-setup=0.000s task-create=0.000s criu-restore=2.000s total=2.000s", tm.String(),
		"without a recorded setup only the restore is known")

	require.NoError(t, WriteSetup(dir, "registry.example/engine:ckpt", 250*time.Millisecond))
	tm, err = RestoreTimings(dir, 2*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "registry.example/engine:ckpt", tm.Image)
	assert.Equal(t, "container-setup=0.250s task-create=0.000s criu-restore=2.000s total=2.250s", tm.String())

	require.NoError(t, os.WriteFile(filepath.Join(dir, SetupFile), []byte("{"), 0o600))
	_, err = RestoreTimings(dir, time.Second)
	assert.ErrorContains(t, err, SetupFile, "a damaged record names its file")
}
