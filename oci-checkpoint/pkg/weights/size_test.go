package weights

import (
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		bad  bool
	}{
		{in: "0", want: 0},
		{in: "4096", want: 4096},
		{in: "64K", want: 64 << 10},
		{in: "1.5G", want: 3 << 29},
		{in: "2GiB", want: 2 << 30},
		{in: "10gb", want: 10 << 30},
		{in: "1T", want: 1 << 40},
		{in: "lots", bad: true},
		{in: "-1G", bad: true},
	} {
		got, err := ParseSize(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

func TestCheckQuota(t *testing.T) {
	const G = 1 << 30
	for _, tc := range []struct {
		name              string
		need, used, quota int64
		want              string // "" = fits
	}{
		{"no quota", 100 * G, 100 * G, 0, ""},
		{"fits", G, 6 * G, 8 * G, ""},
		{"fits exactly", 2 * G, 6 * G, 8 * G, ""},
		{"one byte over", 2*G + 1, 6 * G, 8 * G, "needs 2.0 GiB, 6.0 GiB of the 8.0 GiB quota is in use (2.0 GiB free)"},
		{"alone too big", 9 * G, 0, 8 * G, "needs 9.0 GiB, 0 B of the 8.0 GiB quota is in use (8.0 GiB free)"},
		{"quota already passed", G, 9 * G, 8 * G, "(0 B free)"},
	} {
		err := checkQuota("s", tc.need, tc.used, tc.quota)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--quota") {
			t.Errorf("%s: got %v; want an error with %q and the fix", tc.name, err, tc.want)
		}
	}
}
