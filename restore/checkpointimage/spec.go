// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"fmt"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// isBind reports whether m is a bind mount: CRIU treats those as external
// mounts that the restoring runtime has to provide again.
func isBind(m specs.Mount) bool {
	if m.Type == "bind" || m.Type == "rbind" {
		return true
	}
	return slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind")
}

// CheckMounts checks that the new container spec provides every bind mount
// the checkpointed container had. CRIU cannot restore a process whose mount
// namespace refers to a bind mount the new container lacks, and it reports
// that only deep in its restore log; this names the mount up front.
func CheckMounts(dumped, current *specs.Spec) error {
	if dumped == nil || current == nil {
		return nil
	}
	have := make(map[string]bool, len(current.Mounts))
	for _, m := range current.Mounts {
		have[m.Destination] = true
	}
	var missing []string
	for _, m := range dumped.Mounts {
		if !isBind(m) || have[m.Destination] {
			continue
		}
		missing = append(missing, fmt.Sprintf("%s (was bound from %s)", m.Destination, m.Source))
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("checkpoint was taken with bind mount(s) the new container lacks: %s; "+
		"add the same mount(s) to the container (e.g. nerdctl run -v SRC:DEST) and retry: %w",
		strings.Join(missing, ", "), errdefs.ErrFailedPrecondition)
}

// ColdSpec returns a copy of the new container's spec current that runs
// the checkpointed container's process afresh: its arguments, working
// directory and environment come from dumped, the spec it ran with, as the
// base image's entrypoint and command and the user's settings made them,
// with what the user asked of the new container on top, as CRI's cold
// start has it.
//
// image is the config of the image the new container was made from, whose
// defaults current holds where the user set nothing: arguments other than
// its entrypoint and command are the user's command, and run instead of
// dumped's; a working directory other than its own is the user's; a
// variable that current sets to another value than image does (nerdctl run
// -e) is the user's, and overrides dumped's. Variables that only current
// sets are kept; everything else (devices, mounts, namespaces, resources)
// is the new container's. With image nil, nothing of current's process is
// taken for the user's but the variables dumped lacks.
func ColdSpec(current, dumped *specs.Spec, image *ocispec.ImageConfig) *specs.Spec {
	s := *current
	if dumped == nil || dumped.Process == nil {
		return &s
	}
	p := specs.Process{}
	if current.Process != nil {
		p = *current.Process
	}
	imageEnv := map[string]string{}
	userArgs, userCwd := false, false
	if image != nil {
		userArgs = !slices.Equal(p.Args, append(slices.Clone(image.Entrypoint), image.Cmd...))
		cwd := image.WorkingDir
		if cwd == "" {
			cwd = "/"
		}
		userCwd = p.Cwd != "" && p.Cwd != cwd
		for _, e := range image.Env {
			k, v, _ := strings.Cut(e, "=")
			imageEnv[k] = v
		}
	}
	if !userArgs {
		p.Args = slices.Clone(dumped.Process.Args)
		p.CommandLine = dumped.Process.CommandLine
	}
	if dumped.Process.Cwd != "" && !userCwd {
		p.Cwd = dumped.Process.Cwd
	}
	env := slices.Clone(dumped.Process.Env)
	at := make(map[string]int, len(env))
	for i, e := range env {
		k, _, _ := strings.Cut(e, "=")
		at[k] = i
	}
	for _, e := range p.Env {
		k, v, _ := strings.Cut(e, "=")
		i, dumpedSets := at[k]
		switch iv, imageSets := imageEnv[k]; {
		case !dumpedSets:
			at[k] = len(env)
			env = append(env, e)
		case image != nil && (!imageSets || iv != v):
			env[i] = e
		}
	}
	p.Env = env
	s.Process = &p
	return &s
}
