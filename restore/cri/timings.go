// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package cri

import (
	"time"

	"rekindle.local/restore/checkpointimage"
)

// SetupFile, in a container's checkpoint restore directory, keeps how long
// CreateContainer took to set the restore up, for StartContainer's log of
// the restore's phases: the two are separate requests, and containerd may
// restart between them.
const SetupFile = "restore-setup.json"

type setup struct {
	Image string        `json:"image"`
	Setup time.Duration `json:"setupNanoseconds"`
}

// WriteSetup records that setting up the restore of image took d.
func WriteSetup(restoreDir, image string, d time.Duration) error {
	return writeJSON(restoreDir, SetupFile, setup{Image: image, Setup: d})
}

// RestoreTimings returns the phases of a CRI restore whose task creation
// (in which the shim has runc restore the process tree) took restore, with
// the setup restoreDir records. Under CRI the shim starts inside that task
// creation, so the restore holds what the tasks service times as
// task-create, and Create stays zero.
func RestoreTimings(restoreDir string, restore time.Duration) (checkpointimage.Timings, error) {
	t := checkpointimage.Timings{Restore: restore}
	s, err := readJSON[setup](restoreDir, SetupFile)
	if s != nil {
		t.Image, t.Setup = s.Image, s.Setup
	}
	return t, err
}
