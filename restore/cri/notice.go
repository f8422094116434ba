// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package cri

import (
	"fmt"
	"strings"

	"rekindle.local/restore/checkpointimage"
)

// Annotations of a container made from a checkpoint image that starts
// cold instead (crictl inspect shows them).
const (
	FallbackAnnotation        = "restoreFallback"
	FallbackReasonAnnotation  = "restoreFallbackReason"
	CheckpointImageAnnotation = "checkpointImage"
)

// FallbackNotice is the line a cold-started container's log begins with,
// "" for a container that is not one. A kubelet shows that log (kubectl
// logs), but CRI has no way to add to the pod's events, so this is where
// a Kubernetes user sees that the pod runs without its checkpoint.
func FallbackNotice(annotations map[string]string) string {
	if annotations[FallbackAnnotation] != checkpointimage.FallbackCold {
		return ""
	}
	why := annotations[FallbackReasonAnnotation]
	if why == "" {
		why = "no reason recorded"
	}
	return fmt.Sprintf("rekindle: checkpoint image %s was not restored (%s); the container started cold from its base image (fallback cold)\n",
		annotations[CheckpointImageAnnotation], why)
}

// FallbackReason is reasons as FallbackReasonAnnotation holds them.
func FallbackReason(reasons []string) string {
	return strings.Join(reasons, "; ")
}
