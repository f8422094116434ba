// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"fmt"
	"time"
)

// Timings are the phases of one restore from a checkpoint image.
type Timings struct {
	// Image is the checkpoint image restored.
	Image string
	// Setup is preparing the restore: finding the base image, the
	// checkpoint cache lookup or extraction, the root filesystem.
	Setup time.Duration
	// Create is the runtime's task creation (the shim starts; nothing is
	// restored yet).
	Create time.Duration
	// Restore is the task's start, in which runc restores the process
	// tree with CRIU.
	Restore time.Duration
}

// String is the form logged after each restore, one "name=seconds" pair
// per phase, so that tools can read it back from the log.
func (t Timings) String() string {
	return fmt.Sprintf("container-setup=%.3fs task-create=%.3fs criu-restore=%.3fs total=%.3fs",
		t.Setup.Seconds(), t.Create.Seconds(), t.Restore.Seconds(), (t.Setup + t.Create + t.Restore).Seconds())
}
