// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package coldstart

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/containerd/containerd/v2/core/runtime"
)

type task struct{ runtime.Task }

func TestReplacements(t *testing.T) {
	var rs Replacements
	ctx := context.Background()
	c, pid := rs.ReplacedBy(ctx, "ns/c1")
	assert.Nil(t, c, "a task Create did not expect to replace")
	assert.Zero(t, pid)

	rs.Expect("ns/c1")
	cold := &task{}
	got := make(chan runtime.Task, 1)
	go func() { c, _ := rs.ReplacedBy(ctx, "ns/c1"); got <- c }()
	select {
	case <-got:
		t.Fatal("ReplacedBy returned before Start finished")
	case <-time.After(10 * time.Millisecond):
	}
	rs.Finish("ns/c1", cold, 20)
	assert.Same(t, cold, <-got)
	rs.Finish("ns/c1", nil, 0)
	c, pid = rs.ReplacedBy(ctx, "ns/c1")
	assert.Same(t, cold, c, "the first Finish holds")
	assert.Equal(t, uint32(20), pid)

	rs.Delete("ns/c1")
	c, _ = rs.ReplacedBy(ctx, "ns/c1")
	assert.Nil(t, c, "a deleted task is replaced by none")

	rs.Expect("ns/c2")
	rs.Delete("ns/c2")
	rs.Finish("ns/c2", cold, 20)
	c, _ = rs.ReplacedBy(ctx, "ns/c2")
	assert.Nil(t, c, "a task deleted before Start finished")

	rs.Expect("ns/c3")
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	c, _ = rs.ReplacedBy(cctx, "ns/c3")
	assert.Nil(t, c, "a caller that gives up")
}
