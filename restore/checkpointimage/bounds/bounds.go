// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

// Package bounds carries the host's bounds on a restore from the tasks
// service, which reads them from its configuration, to the runtime shim,
// which applies them: as annotations of the spec of the task it restores.
// It is kept small: the shim imports it.
package bounds

import (
	"cmp"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/docker/go-units"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

const (
	// MaxDecodedPagesAnnotation holds the most bytes a restore's
	// compressed pages images may decode to, in decimal.
	MaxDecodedPagesAnnotation = "org.rekindle.restore.max-decoded-pages"

	// MaxDecodedPagesOption is the configuration option it comes from.
	MaxDecodedPagesOption = `checkpoint_restore_max_decoded_pages in [plugins.'io.containerd.service.v1.tasks-service']`

	// TimeoutAnnotation holds how long a restore may take, as a Go
	// duration.
	TimeoutAnnotation = "org.rekindle.restore.timeout"

	// TimeoutOption is the configuration option it comes from.
	TimeoutOption = `checkpoint_restore_timeout in [plugins.'io.containerd.service.v1.tasks-service']`

	// DefaultTimeout is generous: a restore of an engine holding tens
	// of GB takes tens of seconds.
	DefaultTimeout = 10 * time.Minute
)

// Config is the tasks service's configuration of the bounds.
type Config struct {
	// MaxDecodedPages is the most a restore's compressed pages images
	// may take decoded, in memory: a size ("64GiB"), or empty for half
	// the host's memory.
	MaxDecodedPages string
	// Timeout is how long a restore may take before CRIU is killed and
	// the restore fails: a Go duration ("10m"), or empty for
	// DefaultTimeout.
	Timeout string
}

// Bounds are the bounds a restore runs under.
type Bounds struct {
	// MaxDecodedPages in bytes; 0 for none beyond the container's and the
	// host's memory.
	MaxDecodedPages int64
	// Timeout of the restore, never 0.
	Timeout time.Duration
}

// Parse reads c, filling in the defaults.
func (c Config) Parse() (Bounds, error) {
	var b Bounds
	if c.MaxDecodedPages == "" {
		// A restore holds the decoded pages and the memory CRIU restores
		// from them at once: more than half the host cannot restore.
		b.MaxDecodedPages = memTotal() / 2
	} else {
		n, err := units.RAMInBytes(c.MaxDecodedPages)
		if err != nil || n <= 0 {
			return b, fmt.Errorf("%s: %q is not a size such as \"64GiB\"", MaxDecodedPagesOption, c.MaxDecodedPages)
		}
		b.MaxDecodedPages = n
	}
	b.Timeout = DefaultTimeout
	if c.Timeout != "" {
		d, err := time.ParseDuration(c.Timeout)
		if err != nil || d <= 0 {
			return b, fmt.Errorf("%s: %q is not a duration such as \"10m\"", TimeoutOption, c.Timeout)
		}
		b.Timeout = d
	}
	return b, nil
}

// Set writes b into spec's annotations, replacing what the container's
// creator may have put there: the bounds are the host's, not a client's
// or an image's.
func (b Bounds) Set(spec *specs.Spec) {
	if spec.Annotations == nil {
		spec.Annotations = map[string]string{}
	}
	delete(spec.Annotations, MaxDecodedPagesAnnotation)
	if b.MaxDecodedPages > 0 {
		spec.Annotations[MaxDecodedPagesAnnotation] = strconv.FormatInt(b.MaxDecodedPages, 10)
	}
	spec.Annotations[TimeoutAnnotation] = cmp.Or(b.Timeout, DefaultTimeout).String()
}

// FromAnnotations reads the bounds that Set wrote; a bound missing or
// unreadable is the default's.
func FromAnnotations(annotations map[string]string) Bounds {
	var b Bounds
	if n, err := strconv.ParseInt(annotations[MaxDecodedPagesAnnotation], 10, 64); err == nil && n > 0 {
		b.MaxDecodedPages = n
	} else {
		b.MaxDecodedPages = memTotal() / 2
	}
	b.Timeout = DefaultTimeout
	if d, err := time.ParseDuration(annotations[TimeoutAnnotation]); err == nil && d > 0 {
		b.Timeout = d
	}
	return b
}

// MemTotal is the host's memory (MemTotal in /proc/meminfo) in bytes, or
// 0 if unknown.
func MemTotal() int64 { return memTotal() }

func memTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		var kb int64
		if n, _ := fmt.Sscanf(l, "MemTotal: %d kB", &kb); n == 1 {
			return kb << 10
		}
	}
	return 0
}
