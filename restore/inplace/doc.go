// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

// Package inplace keeps a checkpoint image's layer in place when containerd
// unpacks it: an EROFS tar index beside a hard link of the layer's blob, in
// the snapshot, instead of the layer's files (Apply). containerd's layer
// applier calls it first (its hook: containerd-patches/, core/diff/apply);
// the restore engine (package checkpointimage) mounts the index. The
// annotation that asks for it and the snapshot's file names are the
// contract module's (annotations.LayerInPlace, package layout).
package inplace
