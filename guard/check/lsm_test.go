// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"strings"
	"testing"

	"github.com/opencontainers/selinux/go-selinux"
	"google.golang.org/protobuf/proto"

	aa "github.com/opencontainers/runc/libcontainer/apparmor"
	"github.com/opencontainers/runc/libcontainer/configs"
)

func TestCheckRestorePrivilegesLsmLabel(t *testing.T) {
	other := ownLsmLabel() + "rekindle-test-other"
	for _, tc := range []struct {
		name, label, lsmProfile string
		err                     string
	}{
		{name: "no label"},
		{name: "runc's own label", label: ownLsmLabel()},
		{name: "a label the config does not give", label: other, err: `runs under the LSM label "` + other + `"`},
		{name: "a label CRIU is told to replace", label: other, lsmProfile: "apparmor:container-default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core := thread()
			if tc.label != "" {
				core.ThreadCore.Creds.LsmProfile = proto.String(tc.label)
			}
			err := Restore(images(t, core), &Process{}, defaultConfig(), tc.lsmProfile)
			if tc.err == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			t.Log(err)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("want an error with %q, got %v", tc.err, err)
			}
		})
	}
}

func TestRestoreLsmProfile(t *testing.T) {
	if got := LsmProfile(&Process{}, &configs.Config{}); got != "" {
		t.Fatalf("LsmProfile of a config without a label = %q, want none", got)
	}
	config := &configs.Config{AppArmorProfile: "container-default", ProcessLabel: "system_u:system_r:container_t:s0"}
	var want string
	switch {
	case aa.IsEnabled():
		want = "apparmor:engine" // the process's own takes precedence, as on start
	case selinux.GetEnabled():
		want = "selinux:system_u:system_r:engine_t:s0"
	default:
		t.Skip("neither AppArmor nor SELinux is enabled here: a label cannot be applied, nothing to compare")
	}
	p := &Process{AppArmorProfile: "engine", Label: "system_u:system_r:engine_t:s0"}
	if got := LsmProfile(p, config); got != want {
		t.Fatalf("LsmProfile = %q, want %q", got, want)
	}
}
