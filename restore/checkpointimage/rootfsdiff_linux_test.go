// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"archive/tar"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"golang.org/x/sys/unix"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/testutil"
)

func TestApplyToOverlayUpper(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	lower, upper, work, data, merged := filepath.Join(dir, "lower"), filepath.Join(dir, "upper"),
		filepath.Join(dir, "work"), filepath.Join(dir, "data"), filepath.Join(dir, "merged")
	for _, d := range []string{lower + "/a", lower + "/b", upper, work, data, merged} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"a/keep", "a/gone", "b/x"} {
		if err := os.WriteFile(filepath.Join(lower, f), []byte("lower"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The rootfs diff adds a file in a directory only the lower layer has,
	// and one that deleted.files then removes again.
	f, err := os.Create(filepath.Join(data, crmetadata.RootFsDiffTar))
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	for name, body := range map[string]string{"a/new": "diff", "c": "diff"} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	f.Close()
	b, _ := json.Marshal([]string{"a/gone", "/b", "c", "/"})
	if err := os.WriteFile(filepath.Join(data, crmetadata.DeletedFilesFile), b, 0o644); err != nil {
		t.Fatal(err)
	}

	mounts := []mount.Mount{{Type: "overlay", Source: "overlay",
		Options: []string{"workdir=" + work, "upperdir=" + upper, "lowerdir=" + lower}}}
	done, err := applyToOverlayUpper(ctx, mounts, data)
	if !done || err != nil {
		t.Fatalf("applyToOverlayUpper = %v, %v; want true, nil", done, err)
	}
	for _, wh := range []string{"a/gone", "b", "c"} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(upper, wh), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
			t.Errorf("%s in the upper dir is not a whiteout (%v, mode %o)", wh, err, st.Mode)
		}
	}
	if _, err := os.Stat(filepath.Join(lower, "a/gone")); err != nil {
		t.Errorf("the lower layer was changed: %v", err)
	}

	if err := mount.All(mounts, merged); err != nil {
		t.Fatal(err)
	}
	defer mount.UnmountAll(merged, 0)
	for name, want := range map[string]bool{"a/keep": true, "a/new": true, "a/gone": false, "b": false, "c": false} {
		_, err := os.Lstat(filepath.Join(merged, name))
		if got := err == nil; got != want {
			t.Errorf("%s present in the merged view: %v, want %v", name, got, want)
		}
	}

	if done, _ := applyToOverlayUpper(ctx, []mount.Mount{{Type: "bind", Source: dir}}, data); done {
		t.Error("a bind mount was taken for an overlay snapshot")
	}
}
