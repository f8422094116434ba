// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"cmp"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/opencontainers/selinux/go-selinux"

	aa "github.com/opencontainers/runc/libcontainer/apparmor"
	"github.com/opencontainers/runc/libcontainer/configs"
)

// LsmProfile returns the label, in CRIU's --lsm-profile form, that
// a start of the container's process would run it under: the config's,
// for the LSM this host runs. It is "" where the config names none; CRIU
// then applies each task's label from the images.
func LsmProfile(p *Process, config *configs.Config) string {
	if profile := cmp.Or(p.AppArmorProfile, config.AppArmorProfile); profile != "" && aa.IsEnabled() {
		return "apparmor:" + profile
	}
	if label := cmp.Or(p.Label, config.ProcessLabel); label != "" && selinux.GetEnabled() {
		return "selinux:" + label
	}
	return ""
}

// ownLsmLabel returns runc's own label as CRIU dumps one: the AppArmor
// profile's name ("" for unconfined), or the SELinux context. A process
// that the config gives no label starts under it.
func ownLsmLabel() string {
	switch {
	case aa.IsEnabled():
		b, err := os.ReadFile("/proc/thread-self/attr/apparmor/current")
		if err != nil {
			b, _ = os.ReadFile("/proc/thread-self/attr/current")
		}
		name, _, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
		if name == "unconfined" {
			return ""
		}
		return name
	case selinux.GetEnabled():
		label, _ := selinux.CurrentLabel()
		return label
	}
	return ""
}

// checkLsmLabel refuses a thread's label from the images where CRIU would
// apply it, no --lsm-profile overriding it, and it is not the one a start
// would give.
func (g *grant) checkLsmLabel(label string) error {
	if g.lsmProfile != "" || label == "" || label == g.ownLabel {
		return nil
	}
	own := "no label"
	if g.ownLabel != "" {
		own = strconv.Quote(g.ownLabel)
	}
	return fmt.Errorf("runs under the LSM label %q, the config gives none (a start runs it under %s)", label, own)
}
