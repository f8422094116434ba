// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"strings"
	"testing"

	criucore "github.com/checkpoint-restore/go-criu/v8/crit/images/criu-core"
	"github.com/checkpoint-restore/go-criu/v8/crit/images/rlimit"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/opencontainers/runc/libcontainer/configs"
)

func TestCheckRestorePrivilegesLimits(t *testing.T) {
	own, err := limitsOf(&Process{}, &configs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// rlimits sets the task's limits to runc's own, but for those given.
	rlimits := func(c *criucore.CoreEntry, set map[int]uint64) {
		c.Tc.Rlimits = &criucore.TaskRlimitsEntry{}
		for r, max := range own.hard {
			if v, ok := set[r]; ok {
				max = v
			}
			c.Tc.Rlimits.Rlimits = append(c.Tc.Rlimits.Rlimits, &rlimit.RlimitEntry{Cur: proto.Uint64(max), Max: proto.Uint64(max)})
		}
	}
	for _, tc := range []struct {
		name    string
		core    func(*criucore.CoreEntry)
		process Process
		config  func(*configs.Config)
		err     string // empty: the restore may go on
	}{
		{name: "runc's own limits", core: func(c *criucore.CoreEntry) { rlimits(c, nil) }},
		{
			name: "a leader's core without its task core",
			core: func(c *criucore.CoreEntry) { c.Tc = nil },
			err:  "core-1.img holds no task core",
		},
		{
			name: "limits in the old format",
			core: func(c *criucore.CoreEntry) {}, // and rlimit-1.img, below
			err:  "checkpoint image rlimit-1.img is no image that runc checks",
		},
		{
			name: "a real-time policy",
			config: func(c *configs.Config) {
				c.Rlimits = []configs.Rlimit{{Type: unix.RLIMIT_RTPRIO}, {Type: unix.RLIMIT_NICE}}
			},
			core: func(c *criucore.CoreEntry) { sched(c, unix.SCHED_FIFO, 50, 0) },
			err:  "has real-time scheduling SCHED_FIFO at priority 50, which the config does not give, without CAP_SYS_NICE",
		},
		{
			name: "a real-time policy with CAP_SYS_RESOURCE, which raises RLIMIT_RTPRIO",
			config: func(c *configs.Config) {
				c.Rlimits = []configs.Rlimit{{Type: unix.RLIMIT_RTPRIO}, {Type: unix.RLIMIT_NICE}}
				grantCap(c, "CAP_SYS_RESOURCE")
			},
			core: func(c *criucore.CoreEntry) { sched(c, unix.SCHED_FIFO, 50, 0) },
		},
		{
			name: "SCHED_OTHER from the config's SCHED_IDLE",
			config: func(c *configs.Config) {
				c.Rlimits = []configs.Rlimit{{Type: unix.RLIMIT_RTPRIO}, {Type: unix.RLIMIT_NICE}}
				c.Scheduler = &configs.Scheduler{Policy: specs.SchedIdle}
			},
			core: func(c *criucore.CoreEntry) { sched(c, schedOther, 0, 0) },
			err:  "has SCHED_OTHER, the config gives SCHED_IDLE, without CAP_SYS_NICE",
		},
		{
			name: "SCHED_RESET_ON_FORK dropped",
			config: func(c *configs.Config) {
				c.Scheduler = &configs.Scheduler{Policy: specs.SchedBatch, Flags: []specs.LinuxSchedulerFlag{specs.SchedFlagResetOnFork}}
			},
			core: func(c *criucore.CoreEntry) { sched(c, unix.SCHED_BATCH, 0, 0) },
			err:  "has SCHED_BATCH without SCHED_RESET_ON_FORK",
		},
		{
			name:   "the config's real-time policy",
			config: func(c *configs.Config) { c.Scheduler = &configs.Scheduler{Policy: specs.SchedFIFO, Priority: 50} },
			core:   func(c *criucore.CoreEntry) { sched(c, unix.SCHED_FIFO|unix.SCHED_RESET_ON_FORK, 50, 0) },
		},
		{
			name:   "a real-time priority within RLIMIT_RTPRIO",
			config: func(c *configs.Config) { c.Rlimits = []configs.Rlimit{{Type: unix.RLIMIT_RTPRIO, Hard: 50}} },
			core:   func(c *criucore.CoreEntry) { sched(c, unix.SCHED_RR, 50, 0) },
		},
		{
			name:   "a real-time policy with CAP_SYS_NICE",
			config: func(c *configs.Config) { grantCap(c, "CAP_SYS_NICE") },
			core:   func(c *criucore.CoreEntry) { sched(c, unix.SCHED_FIFO, 99, 0) },
		},
		{
			name: "a lower nice",
			config: func(c *configs.Config) {
				c.Rlimits = []configs.Rlimit{{Type: unix.RLIMIT_RTPRIO}, {Type: unix.RLIMIT_NICE}}
			},
			core: func(c *criucore.CoreEntry) { sched(c, schedOther, 0, own.nice-5) },
			err:  "below the container's",
		},
		{
			name:   "a lower nice within RLIMIT_NICE",
			config: func(c *configs.Config) { c.Rlimits = []configs.Rlimit{{Type: unix.RLIMIT_NICE, Hard: 40}} },
			core:   func(c *criucore.CoreEntry) { sched(c, schedOther, 0, -20) },
		},
		{
			name: "a higher nice",
			core: func(c *criucore.CoreEntry) { sched(c, unix.SCHED_BATCH, 0, own.nice+5) },
		},
		{
			name:   "a deadline policy",
			config: func(c *configs.Config) { c.Scheduler = &configs.Scheduler{Policy: specs.SchedFIFO, Priority: 50} },
			core:   func(c *criucore.CoreEntry) { sched(c, 6, 0, 0) },
			err:    "has scheduling SCHED_DEADLINE",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, config := thread(), defaultConfig()
			if tc.core != nil {
				tc.core(core)
			}
			if tc.config != nil {
				tc.config(config)
			}
			dir := images(t, core)
			if strings.Contains(tc.err, "rlimit-1.img") {
				writeImage(t, dir.Name(), "rlimit-1.img", "RLIMIT", &rlimit.RlimitEntry{Cur: proto.Uint64(0), Max: proto.Uint64(0)})
			}
			err := Restore(dir, &tc.process, config, "")
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

// TestCheckTaskLoginuid checks loginuid against runc's own, set and unset.
func TestCheckTaskLoginuid(t *testing.T) {
	for _, tc := range []struct {
		name       string
		own, image uint32 // invalidUID: unset
		missing    bool   // the image has no loginuid
		audit      bool   // the config grants CAP_AUDIT_CONTROL
		err        string
	}{
		{name: "runc's unset, the image's set", own: invalidUID, image: 1000},
		{name: "runc's unset, the image's unset", own: invalidUID, image: invalidUID},
		{name: "the same", own: 1000, image: 1000},
		{name: "another", own: 1000, image: 0, err: "has loginuid 0, not runc's own 1000, without CAP_AUDIT_CONTROL"},
		{name: "unset, where a start keeps runc's", own: 1000, image: invalidUID, err: "has loginuid (unset), not runc's own 1000"},
		{name: "missing, where a start keeps runc's", own: 1000, missing: true, err: "has loginuid (unset), not runc's own 1000"},
		{name: "another with CAP_AUDIT_CONTROL", own: 1000, image: 0, audit: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			config := defaultConfig()
			if tc.audit {
				grantCap(config, "CAP_AUDIT_CONTROL")
			}
			g, err := grantOf(&Process{}, config)
			must(t, err)
			g.limits.loginuid = tc.own
			task := thread().Tc
			if !tc.missing {
				task.Loginuid = proto.Uint32(tc.image)
			}
			err = g.checkTask(images(t, thread()), 1, task)
			wantErr(t, err, tc.err)
		})
	}
}

func sched(c *criucore.CoreEntry, policy, prio uint32, nice int32) {
	c.ThreadCore.SchedPolicy, c.ThreadCore.SchedPrio, c.ThreadCore.SchedNice = &policy, &prio, &nice
}

// grantCap adds capability name to the config's permitted and effective sets.
func grantCap(c *configs.Config, name string) {
	c.Capabilities.Permitted = append(c.Capabilities.Permitted, name)
	c.Capabilities.Effective = append(c.Capabilities.Effective, name)
}

func intPtr(v int) *int { return &v }
