// Package phase times the steps of a long operation and reports each on
// the terminal as it ends, so a user sees where the time goes.
package phase

import (
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

// Map returns the phases as name -> seconds.
func (t *Timer) Map() map[string]float64 {
	m := make(map[string]float64, len(t.Phases))
	for _, p := range t.Phases {
		m[p.Name] += p.Seconds
	}
	return m
}

// Summary is one line: "health 0.01s  quiesce 0.05s ...".
func Summary(ts []Timing) string {
	var parts []string
	for _, p := range ts {
		parts = append(parts, fmt.Sprintf("%s %.2fs", p.Name, p.Seconds))
	}
	return strings.Join(parts, "  ")
}

// Sorted turns name -> seconds (as Map gives, or an image's annotation
// holds) back into timings, by name: the order of the phases is lost.
func Sorted(m map[string]float64) []Timing {
	ts := make([]Timing, 0, len(m))
	for n, s := range m {
		ts = append(ts, Timing{Name: n, Seconds: s})
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	return ts
}
