// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

// Package shim is what containerd's runc shim does around a restore from a
// checkpoint image (its hook: containerd-patches/, init_state.go): the
// restore's limits read from the restored spec (ReadLimits), compressed
// pages images decoded into a private tmpfs within them (ExpandPages), and
// CRIU and what it restored killed at the restore's deadline
// (RestoreWithin).
package shim
