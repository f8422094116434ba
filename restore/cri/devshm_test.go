// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package cri

import (
	"archive/tar"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimespec "github.com/opencontainers/runtime-spec/specs-go"
)

func writeArchive(t *testing.T, dir string, hdr *tar.Header, data string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "devshm-checkpoint.tar"))
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	hdr.Size = int64(len(data))
	if err := tw.WriteHeader(hdr); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte(data)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func TestRestoreDevShm(t *testing.T) {
	ctx := context.Background()
	held, restoreDir, shm := t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(restoreDir, CachePathFile), []byte(held), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := func(src string) *runtimespec.Spec {
		return &runtimespec.Spec{Mounts: []runtimespec.Mount{{Destination: "/dev/shm", Type: "bind", Source: src}}}
	}
	// No archive: nothing to do.
	if err := RestoreDevShm(ctx, "c", restoreDir, shm, spec(shm)); err != nil {
		t.Fatal(err)
	}
	writeArchive(t, held, &tar.Header{Typeflag: tar.TypeReg, Name: "link_remap.7", Mode: 0o600}, "sem")
	// hostIPC: the host's /dev/shm is not written.
	if err := RestoreDevShm(ctx, "c", restoreDir, shm, spec("/dev/shm")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(shm, "link_remap.7")); err == nil {
		t.Fatal("written through a /dev/shm that is not the sandbox's")
	}
	if err := RestoreDevShm(ctx, "c", restoreDir, shm, spec(shm)); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(shm, "link_remap.7")); err != nil || string(b) != "sem" {
		t.Fatalf("link_remap.7: %q, %v", b, err)
	}
	// A hostile archive is refused, naming the file.
	writeArchive(t, held, &tar.Header{Typeflag: tar.TypeSymlink, Name: "x", Linkname: "/etc"}, "")
	err := RestoreDevShm(ctx, "c", restoreDir, shm, spec(shm))
	if err == nil || !strings.Contains(err.Error(), "devshm-checkpoint.tar entry \"x\"") {
		t.Fatalf("a symbolic link: %v", err)
	}
}
