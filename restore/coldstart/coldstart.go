/*
   Copyright The containerd Authors.
   Copyright The Rekindle Authors.

   Start's creation and monitoring of the cold task follow containerd's
   plugins/services/tasks/local.go (v2.3.7: Create and Delete); the rest of
   this file is Rekindle's.

   Licensed under the Apache License, Version 2.0 (the "License");
   you may not use this file except in compliance with the License.
   You may obtain a copy of the License at

       http://www.apache.org/licenses/LICENSE-2.0

   Unless required by applicable law or agreed to in writing, software
   distributed under the License is distributed on an "AS IS" BASIS,
   WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
   See the License for the specific language governing permissions and
   limitations under the License.
*/

// Package coldstart is the tasks service's cold start of a container whose
// restore from a checkpoint image failed in the runtime, for an image that
// asks for one (org.rekindle.restore.fallback=cold; its hook:
// containerd-patches/, plugins/services/tasks/local.go): the failed task
// replaced by one that runs the checkpointed container's process afresh
// (Start), and a client's Wait from before Start led to it (Replacements).
package coldstart

import (
	"context"
	"fmt"
	"sync"

	"github.com/containerd/typeurl/v2"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/runtime"
	"rekindle.local/restore/checkpointimage"
)

// Start replaces task t, whose restore from a checkpoint image failed with
// failure, by a cold start of the checkpointed container's process, created
// on rt with opts as t was but for the spec and the root filesystem, and
// monitored by monitor; it returns the cold task and its pid. The image
// asks for that (checkpointimage.WantsColdFallback). getContainer returns
// a container from the tasks service's store; publish publishes the
// fallback's event.
func Start(ctx context.Context, r *checkpointimage.Restorer, rt runtime.PlatformRuntime, monitor runtime.TaskMonitor,
	getContainer func(context.Context, string) (*containers.Container, error),
	publish func(context.Context, string, *checkpointimage.Restore),
	t runtime.Task, opts runtime.CreateOpts, failure error) (runtime.Task, uint32, error) {
	id := t.ID()
	// The failed task goes first: its shim holds the bundle and the
	// restored root filesystem.
	if err := monitor.Stop(t); err != nil {
		return nil, 0, err
	}
	if _, err := rt.Delete(ctx, id); err != nil {
		return nil, 0, fmt.Errorf("delete the task of the failed restore: %w", err)
	}
	container, err := getContainer(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	res, err := r.PrepareCold(ctx, *container, failure)
	if err != nil {
		return nil, 0, err
	}
	defer r.Done(res.Image.Layer.Digest)
	if opts.Spec, err = typeurl.MarshalAnyToProto(res.Fallback.Spec); err != nil {
		return nil, 0, err
	}
	opts.Rootfs, opts.Checkpoint, opts.RestoreFromPath = res.Rootfs, "", false
	c, err := rt.Create(ctx, id, opts)
	if err != nil {
		return nil, 0, err
	}
	if err := monitor.Monitor(c, map[string]string{"runtime": container.Runtime.Name}); err != nil {
		return nil, 0, fmt.Errorf("monitor task: %w", err)
	}
	publish(ctx, id, res)
	if err := c.Start(ctx); err != nil {
		return nil, 0, err
	}
	state, err := c.State(ctx)
	if err != nil {
		return nil, 0, err
	}
	return c, state.Pid, nil
}

// Replacements holds, by namespace/container ID, the tasks whose failed
// restore Start may replace with a cold start, until the task is deleted:
// a Wait on the failed task follows the cold one.
type Replacements struct {
	m sync.Map // of *replacement
}

// replacement is the outcome of a Start that may replace a task.
type replacement struct {
	done chan struct{} // closed once Start has restored, replaced or failed
	once sync.Once
	task runtime.Task // the cold task, if Start replaced the failed one
	pid  uint32       // and its pid
}

func (r *replacement) finish(t runtime.Task, pid uint32) {
	r.once.Do(func() { r.task, r.pid = t, pid; close(r.done) })
}

// Expect records that the task of key may be replaced, until Finish or
// Delete.
func (rs *Replacements) Expect(key string) {
	rs.m.Store(key, &replacement{done: make(chan struct{})})
}

// Finish records how Start ended for key: with task c (pid) started cold
// in place of a failed restore, or (c nil) not.
func (rs *Replacements) Finish(key string, c runtime.Task, pid uint32) {
	if v, ok := rs.m.Load(key); ok {
		v.(*replacement).finish(c, pid)
	}
}

// Delete forgets key, whose task is deleted; a Wait on it returns nil.
func (rs *Replacements) Delete(key string) {
	if v, ok := rs.m.LoadAndDelete(key); ok {
		v.(*replacement).finish(nil, 0)
	}
}

// ReplacedBy returns the cold task that replaced the failed restore of key
// and its pid, once Start has finished, or nil.
func (rs *Replacements) ReplacedBy(ctx context.Context, key string) (runtime.Task, uint32) {
	v, ok := rs.m.Load(key)
	if !ok {
		return nil, 0
	}
	rp := v.(*replacement)
	select {
	case <-rp.done:
	case <-ctx.Done():
		return nil, 0
	}
	return rp.task, rp.pid
}
