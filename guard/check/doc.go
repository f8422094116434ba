// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

// Package check reads a checkpoint's CRIU images before CRIU does and
// refuses any that would give the restored tasks more than the new
// container's config grants, or have CRIU act as root on what the
// container does not own. Every file the image folder may hold is in one
// table (images.go), with the function that reads it.
package check
