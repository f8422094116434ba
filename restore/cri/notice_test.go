// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package cri

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestFallbackNotice(t *testing.T) {
	assert.Empty(t, FallbackNotice(map[string]string{"restored": "true"}), "a restored container has no notice")
	got := FallbackNotice(map[string]string{
		FallbackAnnotation:        "cold",
		CheckpointImageAnnotation: "registry.example/engine:ckpt",
		FallbackReasonAnnotation:  FallbackReason([]string{"this host's CPU lacks avx9000", "another GPU"}),
	})
	assert.Equal(t, "rekindle: checkpoint image registry.example/engine:ckpt was not restored (this host's CPU lacks avx9000; another GPU); the container started cold from its base image (fallback cold)\n", got)
	assert.Contains(t, FallbackNotice(map[string]string{FallbackAnnotation: "cold"}), "no reason recorded")
}
