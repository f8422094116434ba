// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/opencontainers/runc/libcontainer/configs"
)

// Process is what runc would start in the container instead of restoring
// it: the fields of runc's libcontainer.Process the checks read. runc fills
// it (the guard cannot import libcontainer, which imports the guard).
type Process struct {
	UID, GID         int
	AdditionalGroups []int
	Capabilities     *configs.Capabilities
	NoNewPrivileges  *bool
	Rlimits          []configs.Rlimit
	Scheduler        *configs.Scheduler
	AppArmorProfile  string
	Label            string
	// SeccompProgram compiles the config's seccomp profile into the program
	// a start would load (runc's seccomp.Program, which needs libseccomp);
	// the checks compare the images' filters with it.
	SeccompProgram func(*configs.Seccomp) ([]unix.SockFilter, error)
}

func (p *Process) program(s *configs.Seccomp) ([]unix.SockFilter, error) {
	if p.SeccompProgram == nil {
		return nil, errors.New("runc gave no seccomp compiler for the config's profile")
	}
	return p.SeccompProgram(s)
}
