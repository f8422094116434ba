package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"rekindle.local/oci-checkpoint/pkg/engine"
	"rekindle.local/oci-checkpoint/pkg/hostinfo"
	"rekindle.local/oci-checkpoint/pkg/wake"
)

// The phases of Create before the dump.

func (cr *creation) health() error {
	w := healthWait{eng: cr.eng, call: cr.o.Engine.Health, Timeout: cr.o.HealthTimeout, Refused: cr.o.RefusedTimeout, Out: cr.o.Progress}
	if w.Refused <= 0 {
		w.Refused = DefaultRefusedTimeout
	}
	if cr.o.URL == "" {
		w.Listening = func() []int { return ListeningPorts(cr.pid) }
	}
	return w.wait(cr.ctx)
}

// DefaultRefusedTimeout is how long create waits for an engine whose port
// refuses connections (--refused-timeout).
const DefaultRefusedTimeout = time.Minute

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

// quiesce makes the profile's calls. A call in flight is not cut short by
// an interruption (the engine would be left half released): the next is
// not made, and the engine is resumed.
func (cr *creation) quiesce() error {
	ctx, cancel := context.WithTimeout(cr.hold(), cr.o.QuiesceTimeout)
	defer cancel()
	for i, call := range cr.o.Engine.Quiesce {
		if cr.sig.Err() != nil {
			cr.quiesced = i > 0
			return context.Cause(cr.sig)
		}
		cr.mark(func(r *record) { r.QuiesceSent = i + 1 })
		if err := cr.eng.Do(ctx, call); err != nil {
			cr.quiesced = cr.sig.Err() != nil // a failure of its own leaves it as it was
			return fmt.Errorf("quiesce: %w; the engine is left running", err)
		}
	}
	cr.quiesced = true
	return nil
}

func (cr *creation) injectHelper() error {
	wrote := func(id fileID) { cr.mark(func(r *record) { r.Helper = &id }) }
	if err := injectHelper(cr.hold(), cr.root, cr.task, cr.spec, cr.o, wrote); err != nil {
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

// healthWait waits for an engine's health call to answer 2xx, saying
// what it waits for. Connections refused mean nothing listens on the
// port: at the first one it says so, with the hint, and refusals that
// last Refused in a row end the wait (an engine opens its port before
// it loads the model, or soon after); any other failure (an answer
// other than 2xx, a timeout) is waited out up to Timeout.
type healthWait struct {
	eng  *engine.Client
	call engine.Call
	// Timeout bounds the whole wait (--health-timeout), Refused the
	// connections refused in a row (--refused-timeout).
	Timeout, Refused time.Duration
	// Out receives what the wait says; nil says nothing.
	Out io.Writer
	// Listening returns the TCP ports the container listens on, for the
	// hint; nil when they are not known (--url).
	Listening func() []int
	// Interval is the time between calls, Every the time between the
	// "still waiting" lines.
	Interval, Every time.Duration
}

func (w healthWait) say(format string, a ...any) {
	if w.Out != nil {
		fmt.Fprintf(w.Out, "    "+format+"\n", a...)
	}
}

// listeningHint is ", and the container listens on PORTS" when known.
func (w healthWait) listeningHint() string {
	if w.Listening == nil {
		return ""
	}
	ports := w.Listening()
	if len(ports) == 0 {
		return "; the container listens on no TCP port yet"
	}
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return "; the container listens on TCP port " + strings.Join(s, ", ")
}

func (w healthWait) wait(ctx context.Context) error {
	if w.Interval == 0 {
		w.Interval = 200 * time.Millisecond
	}
	if w.Every == 0 {
		w.Every = 30 * time.Second
	}
	start, parent := time.Now(), ctx
	ctx, cancel := context.WithTimeout(ctx, w.Timeout)
	defer cancel()
	var last error
	var refusedSince time.Time // zero: the last call was not refused
	saidRefused, lastSaid := false, start
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		err := w.eng.Do(cctx, w.call)
		ccancel()
		// A call the wait's own end cut short says less than the answer
		// before it: the error quotes that one.
		if err == nil || ctx.Err() == nil || last == nil {
			last = err
		}
		if last == nil {
			if saidRefused {
				w.say("%s answered after %s", w.call, time.Since(start).Round(time.Millisecond))
			}
			return nil
		}
		refused := errors.Is(last, syscall.ECONNREFUSED)
		switch {
		case !refused:
			refusedSince = time.Time{}
		case refusedSince.IsZero():
			refusedSince = time.Now()
			if !saidRefused {
				saidRefused, lastSaid = true, time.Now()
				w.say("nothing listens on %s in the container (connection refused)%s: wrong --port or --engine? "+
					"Waiting up to %s for it to listen (--refused-timeout), %s in all (--health-timeout)",
					w.eng.Base, w.listeningHint(), w.Refused, w.Timeout)
			}
		}
		if refused && time.Since(refusedSince) >= w.Refused {
			return fmt.Errorf("nothing listened on %s in the container for %s (connection refused)%s: wrong --port or --engine? "+
				"(--port sets the engine's port, --engine its profile; an engine that opens its port later needs a longer --refused-timeout); "+
				"nothing was changed, the engine is left running", w.eng.Base, w.Refused, w.listeningHint())
		}
		if time.Since(lastSaid) >= w.Every {
			lastSaid = time.Now()
			w.say("still waiting for %s to answer (%s of %s): %v", w.call, time.Since(start).Round(time.Second), w.Timeout, last)
		}
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				return parent.Err()
			}
			return fmt.Errorf("the engine did not become healthy within %s (--health-timeout): %v (an engine still loading needs a longer --health-timeout; "+
				"one that answers with another profile's paths a --engine or --health of its own); nothing was changed, the engine is left running", w.Timeout, last)
		case <-time.After(w.Interval):
		}
	}
}

// ListeningPorts returns the TCP ports listened on in the network
// namespace of pid, from /proc/PID/net/tcp and tcp6, sorted.
func ListeningPorts(pid uint32) []int {
	seen := map[int]bool{}
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			continue
		}
		for _, p := range listeningIn(string(b)) {
			seen[p] = true
		}
	}
	ports := make([]int, 0, len(seen))
	for p := range seen {
		ports = append(ports, p)
	}
	sort.Ints(ports)
	return ports
}

// listeningIn reads the ports in state LISTEN (0A) of a /proc/net/tcp
// table: "sl local_address rem_address st ...", addresses as HEX:PORT.
func listeningIn(table string) []int {
	var ports []int
	for _, line := range strings.Split(table, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "0A" {
			continue
		}
		_, port, ok := strings.Cut(f[1], ":")
		if n, err := strconv.ParseUint(port, 16, 16); ok && err == nil {
			ports = append(ports, int(n))
		}
	}
	return ports
}
