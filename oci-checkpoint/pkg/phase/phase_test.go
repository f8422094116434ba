package phase

import "testing"

func TestSummary(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []Timing
		want string
	}{
		{"none", nil, ""},
		{"in order", []Timing{{"health", 0.011}, {"quiesce", 0.05}, {"dump", 12.345}}, "health 0.01s  quiesce 0.05s  dump 12.35s"},
		{"from a map, by name", Sorted(map[string]float64{"quiesce": 0.05, "dump": 1, "health": 0}), "dump 1.00s  health 0.00s  quiesce 0.05s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Summary(tc.in); got != tc.want {
				t.Errorf("Summary = %q, want %q", got, tc.want)
			}
		})
	}
}
