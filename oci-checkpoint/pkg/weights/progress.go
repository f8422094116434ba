package weights

import (
	"context"
	"fmt"
	"io"
	"time"
)

// Progress prints a load's progress until ctx ends: a line redrawn in
// place on a terminal, a plain line every few seconds otherwise.
func Progress(ctx context.Context, c *Client, name string, out io.Writer, tty bool) {
	every := 5 * time.Second
	if tty {
		every = 250 * time.Millisecond
	}
	start := time.Now()
	t := time.NewTicker(every)
	defer t.Stop()
	drawn := false
	for {
		select {
		case <-ctx.Done():
			if drawn {
				fmt.Fprintln(out)
			}
			return
		case <-t.C:
		}
		st, err := c.Status(ctx, name)
		if err != nil || st.State != StateLoading || st.Bytes == 0 {
			continue
		}
		line := progressLine(st.Name, st.Progress, st.Bytes, time.Since(start))
		if tty {
			fmt.Fprintf(out, "\r\033[K%s", line)
			drawn = true
		} else {
			fmt.Fprintln(out, line)
		}
	}
}

func progressLine(name string, done, total int64, el time.Duration) string {
	rate := float64(done) / max(el.Seconds(), 1e-3)
	eta := "?"
	if rate > 0 {
		eta = fmt.Sprintf("%.0fs", float64(total-done)/rate)
	}
	return fmt.Sprintf("loading %s: %s / %s (%.0f%%), %.2f GB/s, ETA %s",
		name, HumanSize(done), HumanSize(total), 100*float64(done)/float64(total), rate/1e9, eta)
}
