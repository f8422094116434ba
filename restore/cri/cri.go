// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package cri

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
	runtimespec "github.com/opencontainers/runtime-spec/specs-go"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/containerd/containerd/v2/pkg/oci"
	"rekindle.local/restore/checkpointimage"
)

// CachePathFile, in a container's checkpoint restore directory, names the
// cached extracted checkpoint to restore from.
const CachePathFile = "checkpoint-cache-path"

// CheckpointImagePath is where a container's CRIU images are restored from:
// the cached extracted checkpoint named in restoreDir, else restoreDir's
// own copy.
func CheckpointImagePath(restoreDir string) string {
	if b, err := os.ReadFile(filepath.Join(restoreDir, CachePathFile)); err == nil {
		return filepath.Join(string(b), crmetadata.CheckpointDirectory)
	}
	return filepath.Join(restoreDir, crmetadata.CheckpointDirectory)
}

// FallbackFile, in a container's checkpoint restore directory, says that
// its checkpoint image asks to start the container cold when the runtime
// fails to restore it (org.rekindle.restore.fallback=cold).
const FallbackFile = "restore-fallback.json"

// Fallback is what FallbackFile holds.
type Fallback struct {
	// Fallback is the image's fallback, checkpointimage.FallbackCold.
	Fallback string `json:"fallback"`
	// CheckpointImage is the checkpoint image, as the container's config
	// names it.
	CheckpointImage string `json:"checkpointImage"`
	// BaseImage is the image the container's root filesystem comes from.
	BaseImage string `json:"baseImage"`
}

// WriteFallback records f in restoreDir.
func WriteFallback(restoreDir string, f Fallback) error {
	return writeJSON(restoreDir, FallbackFile, f)
}

// ReadFallback returns the cold start that restoreDir records for a failed
// restore, nil when it records none.
func ReadFallback(restoreDir string) (*Fallback, error) {
	f, err := readJSON[Fallback](restoreDir, FallbackFile)
	if f == nil || f.Fallback != checkpointimage.FallbackCold {
		return nil, err
	}
	return f, nil
}

// CacheEntryFile, in a container's checkpoint restore directory, names the
// checkpoint cache entry that the container holds.
const CacheEntryFile = "checkpoint-cache-entry.json"

// CacheEntry is what CacheEntryFile holds.
type CacheEntry struct {
	// Snapshotter holds the cache entry.
	Snapshotter string `json:"snapshotter"`
	// Layer is the checkpoint layer the entry was made from.
	Layer digest.Digest `json:"layer"`
}

// WriteCacheEntry records e in restoreDir.
func WriteCacheEntry(restoreDir string, e CacheEntry) error {
	return writeJSON(restoreDir, CacheEntryFile, e)
}

// ReadCacheEntry returns the cache entry that restoreDir records, nil when
// it records none.
func ReadCacheEntry(restoreDir string) (*CacheEntry, error) {
	return readJSON[CacheEntry](restoreDir, CacheEntryFile)
}

func writeJSON(restoreDir, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(restoreDir, name), b, 0o600)
}

// readJSON returns what file name in restoreDir holds, nil when there is
// no such file.
func readJSON[T any](restoreDir, name string) (*T, error) {
	b, err := os.ReadFile(filepath.Join(restoreDir, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &v, nil
}

// ForgetFailed drops the cache entry e that container id failed to restore
// from, as the tasks service does: its files may be why the restore failed
// (a pages image cut short), and every later restore of the image would
// read them again. The container, whose start failed, will not restore from
// it again, so its own hold goes first; holds of other containers keep the
// entry (checkpointimage.Restorer.Forget).
func ForgetFailed(ctx context.Context, r *checkpointimage.Restorer, id string, e *CacheEntry) {
	if e == nil {
		return
	}
	if err := r.ReleaseCheckpointDir(ctx, e.Snapshotter, id); err != nil {
		log.G(ctx).WithError(err).WithField("container", id).Warn("failed to release the extracted checkpoint of a failed restore")
		return
	}
	if err := r.Forget(ctx, e.Snapshotter, e.Layer); err != nil {
		log.G(ctx).WithError(err).WithField("container", id).Warnf("failed to drop the cache entry of checkpoint layer %s", e.Layer)
	}
}

// DumpedSpec returns the spec the checkpointed container ran with
// (spec.dump), from the cached extracted checkpoint of checkpoint image
// image that restoreDir names.
func DumpedSpec(restoreDir, image string) (*runtimespec.Spec, error) {
	held, err := os.ReadFile(filepath.Join(restoreDir, CachePathFile))
	if err != nil {
		return nil, err
	}
	dumped, _, err := crmetadata.ReadContainerCheckpointSpecDump(string(held))
	if err != nil {
		return nil, fmt.Errorf("checkpoint image %s: %w", image, err)
	}
	return dumped, nil
}

// ColdSpec returns the spec of a cold start of the checkpointed container's
// process in a container whose spec is current: arguments, working
// directory and environment from dumped (spec.dump), as
// checkpointimage.ColdSpec takes them, with what the container's config
// sets over them (its command and args, working directory and variables),
// as CRI applies the config over an image's, and as a cold start decided at
// CreateContainer has them.
func ColdSpec(ctx context.Context, current, dumped *runtimespec.Spec, config *runtime.ContainerConfig) (*runtimespec.Spec, error) {
	s := checkpointimage.ColdSpec(current, dumped, nil)
	if s.Process != nil {
		p := *s.Process
		if cmd := config.GetCommand(); len(cmd) > 0 {
			p.Args = append(slices.Clone(cmd), config.GetArgs()...)
		} else if args := config.GetArgs(); len(args) > 0 && dumped != nil && dumped.Process != nil {
			p.Args = append(slices.Clone(dumped.Process.Args), args...)
		}
		if wd := config.GetWorkingDir(); wd != "" {
			p.Cwd = wd
		}
		s.Process = &p
	}
	var env []string
	for _, e := range config.GetEnvs() {
		env = append(env, e.GetKey()+"="+string(e.GetValue()))
	}
	if err := oci.WithEnv(env)(ctx, nil, nil, s); err != nil {
		return nil, err
	}
	return s, nil
}

// FinishCold ends container id's restore from a checkpoint image, which
// failed with failure and which the container, on snapshotter, now starts
// cold instead of, as fb says: its view of the extracted checkpoint is
// released, restoreDir removed, and the fallback's warning logged. It
// returns the fallback's reasons, for its event.
func FinishCold(ctx context.Context, r *checkpointimage.Restorer, snapshotter, id, restoreDir string, fb *Fallback, failure error) []string {
	// The container no longer reads the extracted checkpoint.
	if err := r.ReleaseCheckpointDir(ctx, snapshotter, id); err != nil {
		log.G(ctx).WithError(err).WithField("container", id).Warn("failed to release the extracted checkpoint")
	}
	if err := os.RemoveAll(restoreDir); err != nil {
		log.G(ctx).WithError(err).Warnf("failed to remove checkpoint restore dir %s", restoreDir)
	}
	reasons := checkpointimage.RuntimeFailure(failure)
	checkpointimage.LogFallback(ctx, id, fb.CheckpointImage, checkpointimage.FailedInRuntime, reasons, fb.BaseImage)
	return reasons
}
