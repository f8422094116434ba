// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

// Package cri is what containerd's CRI plugin keeps of a restore from a
// checkpoint image between CreateContainer and StartContainer, in the
// container's checkpoint restore directory (its hooks: containerd-patches/,
// internal/cri/server/container_checkpoint_linux.go and
// container_checkpoint_fallback_linux.go): the cached extracted checkpoint
// the container holds (CachePathFile, CacheEntryFile), whether its image
// asks to start cold when the runtime fails to restore it (FallbackFile),
// and the cold start's spec (ColdSpec).
package cri
