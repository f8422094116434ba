package weights

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSize reads a byte count: a plain number or one with a binary suffix
// (K, M, G, T, optionally followed by i and/or B; 64G = 64GiB = 64*2^30).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(strings.ToUpper(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	mult := int64(1)
	if n := len(t); n > 0 {
		if i := strings.IndexByte("KMGT", t[n-1]); i >= 0 {
			mult = int64(1) << (10 * (i + 1))
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("size %q: want bytes or a number with K, M, G or T", s)
	}
	return int64(v * float64(mult)), nil
}

// HumanSize prints n bytes in binary units.
func HumanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// checkQuota refuses a load of need bytes when used bytes are already
// held and the sum would pass quota (0: no quota).
func checkQuota(name string, need, used, quota int64) error {
	if quota <= 0 || need+used <= quota {
		return nil
	}
	return fmt.Errorf("loading weight set %s needs %s, %s of the %s quota is in use (%s free): "+
		"evict a set (rekindle-weights evict NAME) or start the service with a larger --quota",
		name, HumanSize(need), HumanSize(used), HumanSize(quota), HumanSize(max(quota-used, 0)))
}
