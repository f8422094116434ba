// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
)

// PolicyOption is the containerd configuration option that holds the
// restore policy: a key of the tasks service's plugin configuration.
const PolicyOption = `checkpoint_restore_images in [plugins.'io.containerd.service.v1.tasks-service']`

// Policy says which checkpoint images this host restores. A checkpoint
// image hands CRIU the restored process's credentials, capabilities and
// seccomp filters, so a host restores only images from sources it trusts.
// The zero Policy, and a nil one, restore no image.
type Policy struct {
	patterns []string
	// keys are the public keys a signature is checked against, by key
	// id; requireSignature makes one required (RequireSignatures).
	keys             map[string]trustedKey
	requireSignature bool
}

// NewPolicy returns the policy that restores the checkpoint images whose
// repository name matches one of patterns.
//
// A name is the image's reference normalized as the Docker reference
// grammar has it (github.com/distribution/reference), without its tag or
// digest: busybox:1 is docker.io/library/busybox, 127.0.0.1:5000/ckpt:1 is
// 127.0.0.1:5000/ckpt. A pattern is a glob (path.Match: * and ? stop at a
// slash) over such a name, and matches the name or any part of it that
// ends before a slash: "registry.example.com" (a registry), "registry.example.com/team"
// (a namespace in it), "*.example.com" (any host of a domain),
// "127.0.0.1:*" (a host on any port), "docker.io/library/busybox" (one
// repository). There are no tags in patterns.
func NewPolicy(patterns []string) (*Policy, error) {
	p := &Policy{}
	for _, pat := range patterns {
		pat = strings.TrimSpace(pat)
		if pat == "" || strings.HasPrefix(pat, "/") || strings.HasSuffix(pat, "/") || strings.Contains(pat, "//") {
			return nil, fmt.Errorf("%s: pattern %q is not an image name pattern such as \"registry.example.com\" or \"registry.example.com/team/*\": %w",
				PolicyOption, pat, errdefs.ErrInvalidArgument)
		}
		if _, err := path.Match(pat, ""); err != nil {
			return nil, fmt.Errorf("%s: pattern %q: %v: %w", PolicyOption, pat, err, errdefs.ErrInvalidArgument)
		}
		if strings.Contains(pat, "@") {
			return nil, fmt.Errorf("%s: pattern %q names a digest; patterns match repository names, without tag or digest: %w",
				PolicyOption, pat, errdefs.ErrInvalidArgument)
		}
		p.patterns = append(p.patterns, pat)
	}
	return p, nil
}

// Patterns returns the policy's patterns.
func (p *Policy) Patterns() []string {
	if p == nil {
		return nil
	}
	return append([]string(nil), p.patterns...)
}

// String says what the policy restores, for logs.
func (p *Policy) String() string {
	if len(p.Patterns()) == 0 {
		return "no checkpoint image restores (" + PolicyOption + " is empty)"
	}
	s := "checkpoint images restore when their name matches " + quoteAll(p.patterns)
	if p.RequiresSignature() {
		s += " and they are signed by one of the keys " + p.keyList()
	}
	return s
}

// CheckImage returns nil when p restores checkpoint image ci: its name is
// allowed (Check) and, where p requires one, its signature verifies
// (Verify). Otherwise it returns a PolicyError or a SignatureError, each a
// Refusal.
func (p *Policy) CheckImage(ci *Image) error {
	if err := p.Check(ci.Name, ci.References); err != nil {
		return err
	}
	return p.Verify(ci.Name, ci.Manifest)
}

// Refusal is an error of the host's policy, with the reason a cold start
// gives instead.
type Refusal interface {
	error
	Reason() string
}

// Allows reports whether image name ref, as an image store names it (a
// reference with a tag or a digest, or a bare image ID), is one that p
// restores. An image ID, or a name the reference grammar does not take,
// matches nothing.
func (p *Policy) Allows(ref string) bool {
	name, ok := RepositoryName(ref)
	if !ok || p == nil {
		return false
	}
	for _, pat := range p.patterns {
		if matchPrefix(pat, name) {
			return true
		}
	}
	return false
}

// Check returns nil when p restores the checkpoint image called image in
// messages, whose names in the image store are names (image alone when
// there are none), and a PolicyError otherwise.
func (p *Policy) Check(image string, names []string) error {
	if len(names) == 0 {
		names = []string{image}
	}
	for _, n := range names {
		if p.Allows(n) {
			return nil
		}
	}
	e := &PolicyError{Image: image, Patterns: p.Patterns()}
	for _, n := range names {
		if name, ok := RepositoryName(n); ok && !slices.Contains(e.Names, name) {
			e.Names = append(e.Names, name)
		}
	}
	return e
}

// RepositoryName returns the normalized repository name of image name
// ref, and false for an image ID or a name that is not a reference.
func RepositoryName(ref string) (string, bool) {
	if _, err := digest.Parse(ref); err == nil {
		return "", false
	}
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", false
	}
	return named.Name(), true
}

// matchPrefix reports whether pattern matches name or a part of it that
// ends before a slash.
func matchPrefix(pattern, name string) bool {
	for i := len(name); i > 0; i = strings.LastIndex(name[:i], "/") {
		if ok, _ := path.Match(pattern, name[:i]); ok {
			return true
		}
	}
	return false
}

// PolicyError is a checkpoint image that the host's policy does not restore.
type PolicyError struct {
	// Image is the checkpoint image, as the client named it.
	Image string
	// Names are its normalized repository names, those the policy matched.
	Names []string
	// Patterns are the policy's.
	Patterns []string
}

// Reason says why the image is not restored, as a preflight reason.
func (e *PolicyError) Reason() string {
	now := "it is empty, so no checkpoint image restores"
	if len(e.Patterns) > 0 {
		now = "it holds " + quoteAll(e.Patterns)
	}
	name := "its name"
	if len(e.Names) > 0 {
		name = quoteAll(e.Names)
	}
	return fmt.Sprintf("this host restores only the checkpoint images that %s allows, and %s matches none of its patterns (%s)",
		PolicyOption, name, now)
}

func (e *PolicyError) Error() string {
	fix := "name the image by a registry listed there"
	if len(e.Names) > 0 {
		fix = fmt.Sprintf("add %q, or a pattern that matches it such as %q, to that list", e.Names[0], strings.SplitN(e.Names[0], "/", 2)[0])
	}
	return fmt.Sprintf("checkpoint image %s may not be restored on this host: %s; to restore it, %s and restart containerd",
		e.Image, e.Reason(), fix)
}

// Unwrap makes a PolicyError a permission denied.
func (e *PolicyError) Unwrap() error { return errdefs.ErrPermissionDenied }

func quoteAll(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = strconv.Quote(v)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
