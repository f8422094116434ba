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
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Summary(tc.in); got != tc.want {
				t.Errorf("Summary = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []Timing
	}{
		{"an array, in the order it ran", `[{"name":"health","seconds":0.5},{"name":"dump","seconds":1},{"name":"package","seconds":2},{"name":"stop","seconds":0.25}]`,
			[]Timing{{"health", 0.5}, {"dump", 1}, {"package", 2}, {"stop", 0.25}}},
		{"an earlier image's object, in create's order, not by name", `{"record":0.1,"dump":1,"health":0,"quiesce":0.05,"inject-helper":0.2,"preflight":0.3}`,
			[]Timing{{"health", 0}, {"preflight", 0.3}, {"quiesce", 0.05}, {"inject-helper", 0.2}, {"record", 0.1}, {"dump", 1}}},
		{"unknown names last, by name", `{"zz":1,"dump":2,"aa":3}`, []Timing{{"dump", 2}, {"aa", 3}, {"zz", 1}}},
		{"absent", "", []Timing{}},
		{"bad", "banana", []Timing{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Parse(tc.in)
			if len(got) != len(tc.want) {
				t.Fatalf("Parse = %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("Parse = %v, want %v", got, tc.want)
				}
			}
		})
	}
}
