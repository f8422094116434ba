// Package phase times the steps of a long operation and reports each on
// the terminal as it ends, so a user sees where the time goes.
package phase

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// Timing is one finished phase.
type Timing struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
}

// Timer records phases in order.
type Timer struct {
	Out    io.Writer // progress lines; nil for none
	Phases []Timing
}

// Run times fn as phase name, printing "==> name ..." before and the time after.
func (t *Timer) Run(name string, fn func() error) error {
	if t.Out != nil {
		fmt.Fprintf(t.Out, "==> %s ...\n", name)
	}
	start := time.Now()
	err := fn()
	d := time.Since(start).Seconds()
	t.Phases = append(t.Phases, Timing{Name: name, Seconds: d})
	if t.Out != nil {
		if err != nil {
			fmt.Fprintf(t.Out, "==> %s failed after %.2fs\n", name, d)
		} else {
			fmt.Fprintf(t.Out, "==> %s done in %.2fs\n", name, d)
		}
	}
	return err
}

// Summary is one line: "health 0.01s  quiesce 0.05s ...".
func Summary(ts []Timing) string {
	var parts []string
	for _, p := range ts {
		parts = append(parts, fmt.Sprintf("%s %.2fs", p.Name, p.Seconds))
	}
	return strings.Join(parts, "  ")
}

// Order is the order in which oci-checkpoint create runs its phases;
// resume (--leave-running) and stop (the default) are the last, one or
// neither.
var Order = []string{"health", "preflight", "quiesce", "inject-helper", "record", "dump", "package", "resume", "stop"}

// Parse reads phase times as an image's annotation holds them: an array of
// timings in the order they ran, as create writes it, or the name ->
// seconds object of earlier images, put in Order (names it does not know
// after, by name). Nothing, or anything else, gives none.
func Parse(s string) []Timing {
	ts := []Timing{}
	if json.Unmarshal([]byte(s), &ts) == nil {
		return ts
	}
	var m map[string]float64
	if json.Unmarshal([]byte(s), &m) != nil {
		return []Timing{}
	}
	rank := make(map[string]int, len(Order))
	for i, n := range Order {
		rank[n] = i
	}
	ts = make([]Timing, 0, len(m))
	for n, sec := range m {
		ts = append(ts, Timing{Name: n, Seconds: sec})
	}
	sort.Slice(ts, func(i, j int) bool {
		ri, iok := rank[ts[i].Name]
		rj, jok := rank[ts[j].Name]
		switch {
		case iok && jok:
			return ri < rj
		case iok != jok:
			return iok
		}
		return ts[i].Name < ts[j].Name
	})
	return ts
}
