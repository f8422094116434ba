package checkpoint

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"rekindle.local/oci-checkpoint/pkg/engine"
	"rekindle.local/oci-checkpoint/pkg/hostinfo"
	"rekindle.local/oci-checkpoint/pkg/wake"
)

// The phases of Create before the dump.

func (cr *creation) health() error {
	return waitHealthy(cr.ctx, cr.eng, cr.o.Engine.Health, cr.o.HealthTimeout)
}

// preflight refuses an engine that its profile cannot quiesce, before
// anything is changed: the engine keeps serving.
func (cr *creation) preflight() error {
	ctx, cancel := context.WithTimeout(cr.ctx, cr.o.QuiesceTimeout)
	defer cancel()
	f, err := cr.eng.Preflight(ctx, cr.o.Engine)
	if err != nil {
		return fmt.Errorf("%w; nothing was changed, the engine is left running", err)
	}
	cr.facts = f
	if f.Resume != nil {
		cr.o.Engine.Resume = f.Resume
	}
	return nil
}

func (cr *creation) quiesce() error {
	ctx, cancel := context.WithTimeout(cr.ctx, cr.o.QuiesceTimeout)
	defer cancel()
	for _, call := range cr.o.Engine.Quiesce {
		if err := cr.eng.Do(ctx, call); err != nil {
			return fmt.Errorf("quiesce: %w; the engine is left running", err)
		}
	}
	cr.quiesced = true
	return nil
}

func (cr *creation) injectHelper() error {
	if err := injectHelper(cr.ctx, cr.root, cr.task, cr.spec, cr.o); err != nil {
		return err
	}
	cr.helperUp = true
	return nil
}

// record writes the GPUs the container sees into it, for the helper to
// map them onto the restoring host's.
func (cr *creation) record() error {
	devs, err := cr.root.CharDevices("/dev", "nvidia*")
	if err != nil {
		return fmt.Errorf("list the container's GPU devices: %w", err)
	}
	cr.gpus = hostinfo.DeviceMinors(devs, cr.host.GPUs)
	if cr.gpus == nil {
		cr.gpus = []hostinfo.GPU{}
	}
	b, _ := json.MarshalIndent(cr.gpus, "", "  ")
	return cr.root.WriteFile(wake.DevicesFile, append(b, '\n'), 0o644)
}

func waitHealthy(ctx context.Context, eng *engine.Client, health engine.Call, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		last = eng.Do(cctx, health)
		ccancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the engine did not become healthy within %s: %v (wrong --port or --engine?)", timeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
