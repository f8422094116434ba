// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/plugins/snapshots/native"
)

func nativeRestorer(t *testing.T) (*Restorer, snapshots.Snapshotter) {
	t.Helper()
	sn, err := native.NewSnapshotter(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sn.Close() })
	return &Restorer{Snapshotter: func(name string) snapshots.Snapshotter {
		if name == "native" {
			return sn
		}
		return nil
	}}, sn
}

func TestResetSnapshot(t *testing.T) {
	ctx := context.Background()
	r, sn := nativeRestorer(t)

	// The base image's root filesystem, and a container's snapshot on it
	// that a failed restore wrote the checkpoint's rootfs diff into.
	mounts, err := sn.Prepare(ctx, "base-active", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mounts[0].Source, "base"), []byte("base"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sn.Commit(ctx, "base", "base-active"); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"containerd.io/snapshot/example": "kept"}
	mounts, err = sn.Prepare(ctx, "c1", "base", snapshots.WithLabels(labels))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mounts[0].Source, "from-the-diff"), []byte("diff"), 0o644); err != nil {
		t.Fatal(err)
	}

	if err := r.ResetSnapshot(ctx, "native", "c1"); err != nil {
		t.Fatal(err)
	}
	info, err := sn.Stat(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if info.Kind != snapshots.KindActive || info.Parent != "base" || info.Labels["containerd.io/snapshot/example"] != "kept" {
		t.Errorf("reset snapshot: %+v, want an active snapshot on base with its labels", info)
	}
	mounts, err = sn.Mounts(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(mounts[0].Source, "from-the-diff")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file the failed restore wrote survived the reset: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(mounts[0].Source, "base")); err != nil || string(b) != "base" {
		t.Errorf("the base image's file after the reset: %q, %v", b, err)
	}

	if err := r.ResetSnapshot(ctx, "native", "base"); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("reset of a committed snapshot: %v, want a failed precondition", err)
	}
	if err := r.ResetSnapshot(ctx, "native", "nosuch"); !errdefs.IsNotFound(err) {
		t.Errorf("reset of a missing snapshot: %v, want not found", err)
	}
	if err := r.ResetSnapshot(ctx, "unknown", "c1"); !errdefs.IsNotFound(err) {
		t.Errorf("reset in an unknown snapshotter: %v, want not found", err)
	}
}

func TestReleaseCheckpointDir(t *testing.T) {
	ctx := context.Background()
	r, sn := nativeRestorer(t)
	if _, err := sn.Prepare(ctx, "entry-active", ""); err != nil {
		t.Fatal(err)
	}
	if err := sn.Commit(ctx, "entry", "entry-active"); err != nil {
		t.Fatal(err)
	}
	held := restoreKeyPrefix + "c1/checkpoint"
	if _, err := sn.View(ctx, held, "entry"); err != nil {
		t.Fatal(err)
	}

	if err := r.ReleaseCheckpointDir(ctx, "native", "c1"); err != nil {
		t.Fatal(err)
	}
	if _, err := sn.Stat(ctx, held); !errdefs.IsNotFound(err) {
		t.Errorf("the container's view after the release: %v, want not found", err)
	}
	if _, err := sn.Stat(ctx, "entry"); err != nil {
		t.Errorf("the cache entry went with the container's view: %v", err)
	}
	if err := r.ReleaseCheckpointDir(ctx, "native", "c1"); err != nil {
		t.Errorf("a second release: %v", err)
	}
}

// TestReleaseTask: once a restored container's task is deleted, its root
// filesystem and its hold on the cache entry go at once, not at the
// collector's next run; the entry, another container's snapshots and a
// container that restored nothing are left alone.
func TestReleaseTask(t *testing.T) {
	ctx := context.Background()
	r, sn := nativeRestorer(t)
	for _, entry := range []string{"entry", "entry-rootfs"} {
		if _, err := sn.Prepare(ctx, entry+"-active", ""); err != nil {
			t.Fatal(err)
		}
		if err := sn.Commit(ctx, entry, entry+"-active"); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"c1", "c2"} {
		if _, err := sn.Prepare(ctx, restoreKeyPrefix+id, "entry-rootfs"); err != nil {
			t.Fatal(err)
		}
		if _, err := sn.View(ctx, holdKey(id), "entry"); err != nil {
			t.Fatal(err)
		}
	}
	// A container restored with CRI holds the entry but has no root
	// filesystem of ours.
	if _, err := sn.View(ctx, holdKey("cri"), "entry"); err != nil {
		t.Fatal(err)
	}

	for _, id := range []string{"c1", "cri", "plain"} {
		if err := r.ReleaseTask(ctx, "native", id); err != nil {
			t.Fatalf("release the task of %s: %v", id, err)
		}
	}
	for _, key := range []string{restoreKeyPrefix + "c1", holdKey("c1"), holdKey("cri")} {
		if _, err := sn.Stat(ctx, key); !errdefs.IsNotFound(err) {
			t.Errorf("snapshot %s after its task was deleted: %v, want not found", key, err)
		}
	}
	for _, key := range []string{restoreKeyPrefix + "c2", holdKey("c2"), "entry", "entry-rootfs"} {
		if _, err := sn.Stat(ctx, key); err != nil {
			t.Errorf("snapshot %s went with another container's task: %v", key, err)
		}
	}
	if err := r.ReleaseTask(ctx, "native", "c1"); err != nil {
		t.Errorf("a second release: %v", err)
	}
	if err := r.ReleaseTask(ctx, "unknown", "c2"); err != nil {
		t.Errorf("a container of a snapshotter the restorer does not know: %v", err)
	}
}

func TestRuntimeFailure(t *testing.T) {
	got := RuntimeFailure(errors.New("criu failed: type RESTORE errno 0"))
	if len(got) != 1 || !strings.HasPrefix(got[0], "the runtime failed to restore it: criu failed") {
		t.Errorf("RuntimeFailure = %q", got)
	}
}
