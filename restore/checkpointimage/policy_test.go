// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"

	"github.com/containerd/containerd/v2/core/containers"
)

func TestPolicyAllows(t *testing.T) {
	p, err := NewPolicy([]string{"rekindle.local", "127.0.0.1:*", "registry.example.com/team/*", "*.example.org", "docker.io/library/busybox"})
	if err != nil {
		t.Fatal(err)
	}
	for ref, want := range map[string]bool{
		"rekindle.local/ckpt:engine":                true,
		"rekindle.local/a/b/c@sha256:" + hex64:      true,
		"rekindle.localhost/ckpt:1":                 false,
		"127.0.0.1:5000/rekindle/ckpt:engine":       true,
		"127.0.0.2:5000/rekindle/ckpt:engine":       false,
		"registry.example.com/team/engine:1":        true,
		"registry.example.com/team/sub/engine:1":    true,
		"registry.example.com/team:1":               false,
		"registry.example.com/other/engine:1":       false,
		"mirror.example.org/engine:1":               true,
		"example.org/engine:1":                      false,
		"busybox:latest":                            true,
		"docker.io/library/busybox@sha256:" + hex64: true,
		"busybox2":                           false,
		"evil.com/docker.io/library/busybox": false,
		"docker.io/library/busybox/x":        true,
		// An image ID names no source; an ID that the reference grammar
		// would read as docker.io/library/sha256 matches nothing either.
		"sha256:" + hex64: false,
		"":                false,
		"Not A Reference": false,
	} {
		if got := p.Allows(ref); got != want {
			t.Errorf("Allows(%q) = %v, want %v", ref, got, want)
		}
	}

	for _, none := range []*Policy{nil, {}} {
		if none.Allows("rekindle.local/ckpt:1") {
			t.Errorf("policy %v allows an image", none)
		}
	}
	all, _ := NewPolicy([]string{"*"})
	if !all.Allows("rekindle.local/ckpt:1") || !all.Allows("busybox") || all.Allows("sha256:"+hex64) {
		t.Error(`"*" should allow every name, and no ID`)
	}
}

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestNewPolicyRefusesBadPatterns(t *testing.T) {
	for _, pat := range []string{"", " ", "/rekindle.local", "rekindle.local/", "a//b", "[a-", "rekindle.local/ckpt@sha256:" + hex64} {
		if _, err := NewPolicy([]string{"rekindle.local", pat}); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "checkpoint_restore_images") {
			t.Errorf("NewPolicy(%q) = %v, want an invalid argument naming the option", pat, err)
		}
	}
}

func TestPolicyCheck(t *testing.T) {
	p, _ := NewPolicy([]string{"rekindle.local"})
	if err := p.Check("sha256:"+hex64, []string{"sha256:" + hex64, "rekindle.local/ckpt:1"}); err != nil {
		t.Errorf("an image one of whose names is allowed: %v", err)
	}
	err := p.Check("ckpt:1", []string{"sha256:" + hex64, "evil.example.com/ckpt:1", "evil.example.com/ckpt@sha256:" + hex64})
	var perr *PolicyError
	if !errors.As(err, &perr) || !errdefs.IsPermissionDenied(err) {
		t.Fatalf("Check = %v, want a PolicyError, permission denied", err)
	}
	for _, want := range []string{
		"checkpoint image ckpt:1 may not be restored on this host",
		"checkpoint_restore_images in [plugins.'io.containerd.service.v1.tasks-service']",
		`["evil.example.com/ckpt"] matches none of its patterns (it holds ["rekindle.local"])`,
		`add "evil.example.com/ckpt", or a pattern that matches it such as "evil.example.com", to that list`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q should contain %q", err, want)
		}
	}
	var none *Policy
	err = none.Check("rekindle.local/ckpt:1", nil)
	if err == nil || !strings.Contains(err.Error(), "it is empty, so no checkpoint image restores") ||
		!strings.Contains(err.Error(), `["rekindle.local/ckpt"]`) {
		t.Errorf("Check with no policy: %v", err)
	}
}

func TestPrepareFollowsThePolicy(t *testing.T) {
	ctx := context.Background()
	c := containers.Container{ID: "c1", Image: "ckpt", Snapshotter: "overlayfs"}

	// Outside the policy: refused before any work, naming the option.
	r := restorerFor(t, nil)
	r.Policy, _ = NewPolicy([]string{"rekindle.local"})
	res, err := r.Prepare(ctx, c)
	var perr *PolicyError
	if res != nil || !errors.As(err, &perr) || !errdefs.IsPermissionDenied(err) {
		t.Fatalf("Prepare = %+v, %v; want a PolicyError", res, err)
	}
	if !strings.Contains(err.Error(), `"docker.io/library/ckpt"`) || !strings.Contains(err.Error(), "checkpoint_restore_images") {
		t.Errorf("error %q should name the image and the option", err)
	}
	if len(r.inFlight.n) != 0 {
		t.Errorf("a refused restore is left in flight: %v", r.inFlight.n)
	}
	// No policy at all restores nothing.
	r.Policy = nil
	if _, err := r.Prepare(ctx, c); !errors.As(err, &perr) {
		t.Fatalf("Prepare with no policy = %v; want a PolicyError", err)
	}

	// An image that asks for a cold start gets one, with the reason.
	r = restorerFor(t, map[string]string{AnnotationFallback: FallbackCold})
	r.Policy = nil
	img, err := r.Images.Get(ctx, "ckpt")
	if err != nil {
		t.Fatal(err)
	}
	ci, err := Detect(ctx, r.Content, img, platforms.Default())
	if err != nil {
		t.Fatal(err)
	}
	reasons, err := r.Check(ci)
	if err != nil || len(reasons) != 1 || !strings.Contains(reasons[0], "checkpoint_restore_images") {
		t.Fatalf("Check of an image outside the policy that asks for a cold start = %q, %v", reasons, err)
	}
	if _, err := r.Prepare(ctx, c); !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "snapshotter") {
		t.Fatalf("Prepare with a cold fallback: %v; want it to get as far as the snapshotter", err)
	}
}
