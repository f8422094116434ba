// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestCheckMounts(t *testing.T) {
	bind := func(dst, src string) specs.Mount {
		return specs.Mount{Destination: dst, Source: src, Type: "bind", Options: []string{"rbind", "ro"}}
	}
	proc := specs.Mount{Destination: "/proc", Type: "proc", Source: "proc"}
	for _, tc := range []struct {
		name    string
		dumped  []specs.Mount
		current []specs.Mount
		missing string
	}{
		{name: "same mounts", dumped: []specs.Mount{proc, bind("/models", "/srv/models")}, current: []specs.Mount{proc, bind("/models", "/data/models")}},
		{name: "extra mount in new spec", dumped: []specs.Mount{proc}, current: []specs.Mount{proc, bind("/cache", "/c")}},
		{name: "missing bind mount", dumped: []specs.Mount{proc, bind("/models", "/srv/models")}, current: []specs.Mount{proc}, missing: "/models (was bound from /srv/models)"},
		{name: "bind by option only", dumped: []specs.Mount{{Destination: "/etc/hosts", Source: "/x/hosts", Type: "none", Options: []string{"bind"}}}, missing: "/etc/hosts"},
		{name: "kernel mounts are recreated", dumped: []specs.Mount{proc, {Destination: "/dev/shm", Type: "tmpfs", Source: "shm"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckMounts(&specs.Spec{Mounts: tc.dumped}, &specs.Spec{Mounts: tc.current})
			if tc.missing == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.missing) {
				t.Fatalf("error %v should name %q", err, tc.missing)
			}
			if !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Fatalf("error %v should be a failed precondition", err)
			}
		})
	}
}

func TestColdSpec(t *testing.T) {
	current := &specs.Spec{
		Hostname: "new",
		Process: &specs.Process{
			Args: []string{"/bin/sh", "-c", "checkpoint archive entrypoint"},
			Env:  []string{"PATH=/usr/bin", "ONLY_NEW=1"},
			Cwd:  "/",
		},
		Mounts: []specs.Mount{{Destination: "/data", Source: "/srv/data", Type: "bind"}},
	}
	dumped := &specs.Spec{
		Hostname: "old",
		Process: &specs.Process{
			Args: []string{"python3", "-m", "engine", "--port", "30000"},
			Env:  []string{"PATH=/opt/venv/bin:/usr/bin", "MODEL=tiny"},
			Cwd:  "/srv/engine",
		},
	}
	got := ColdSpec(current, dumped, nil)
	if want := []string{"python3", "-m", "engine", "--port", "30000"}; !slices.Equal(got.Process.Args, want) {
		t.Errorf("args = %q, want %q", got.Process.Args, want)
	}
	if want := []string{"PATH=/opt/venv/bin:/usr/bin", "MODEL=tiny", "ONLY_NEW=1"}; !slices.Equal(got.Process.Env, want) {
		t.Errorf("env = %q, want %q", got.Process.Env, want)
	}
	if got.Process.Cwd != "/srv/engine" || got.Hostname != "new" || len(got.Mounts) != 1 {
		t.Errorf("cwd %q hostname %q mounts %v: want the checkpoint's cwd and the new container's hostname and mounts", got.Process.Cwd, got.Hostname, got.Mounts)
	}
	if current.Process.Args[0] != "/bin/sh" {
		t.Errorf("the new container's spec was changed: %q", current.Process.Args)
	}
	if got := ColdSpec(current, nil, nil); !slices.Equal(got.Process.Args, current.Process.Args) {
		t.Errorf("without a dumped spec: args = %q", got.Process.Args)
	}
}

// TestColdSpecTakesTheUsersSettings: what the user asked of the new
// container (a command, -w, -e), found by comparing its spec with the
// image's config, goes over the checkpointed process's.
func TestColdSpecTakesTheUsersSettings(t *testing.T) {
	image := &ocispec.ImageConfig{
		Entrypoint: []string{"python3"},
		Cmd:        []string{"-m", "engine"},
		Env:        []string{"PATH=/opt/venv/bin:/usr/bin", "MODEL=tiny", "PORT=30000"},
		WorkingDir: "/srv/engine",
	}
	dumped := &specs.Spec{Process: &specs.Process{
		Args: []string{"python3", "-m", "engine", "--dumped"},
		Env:  []string{"PATH=/opt/venv/bin:/usr/bin", "MODEL=large", "PORT=30000", "DUMPED=1"},
		Cwd:  "/srv/dumped",
	}}
	for _, tc := range []struct {
		name      string
		args, env []string
		cwd       string
		wantArgs  []string
		wantEnv   []string
		wantCwd   string
	}{
		{
			name:     "nothing set: the checkpointed process as it was",
			args:     []string{"python3", "-m", "engine"},
			env:      image.Env,
			cwd:      "/srv/engine",
			wantArgs: dumped.Process.Args,
			wantEnv:  dumped.Process.Env,
			wantCwd:  "/srv/dumped",
		},
		{
			name:     "-e over the dumped and the image's values, a new variable kept",
			args:     []string{"python3", "-m", "engine"},
			env:      []string{"PATH=/opt/venv/bin:/usr/bin", "MODEL=tiny", "PORT=30001", "DUMPED=0", "NEW=1"},
			cwd:      "/srv/engine",
			wantArgs: dumped.Process.Args,
			wantEnv:  []string{"PATH=/opt/venv/bin:/usr/bin", "MODEL=large", "PORT=30001", "DUMPED=0", "NEW=1"},
			wantCwd:  "/srv/dumped",
		},
		{
			name:     "a command and -w of the user's",
			args:     []string{"python3", "-m", "engine", "--user"},
			env:      image.Env,
			cwd:      "/tmp",
			wantArgs: []string{"python3", "-m", "engine", "--user"},
			wantEnv:  dumped.Process.Env,
			wantCwd:  "/tmp",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			current := &specs.Spec{Process: &specs.Process{Args: tc.args, Env: tc.env, Cwd: tc.cwd}}
			got := ColdSpec(current, dumped, image)
			if !slices.Equal(got.Process.Args, tc.wantArgs) {
				t.Errorf("args = %q, want %q", got.Process.Args, tc.wantArgs)
			}
			if !slices.Equal(got.Process.Env, tc.wantEnv) {
				t.Errorf("env = %q, want %q", got.Process.Env, tc.wantEnv)
			}
			if got.Process.Cwd != tc.wantCwd {
				t.Errorf("cwd = %q, want %q", got.Process.Cwd, tc.wantCwd)
			}
		})
	}
}
