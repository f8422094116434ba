// Package progress shows how far a long copy has got: a live bar (bytes,
// rate, ETA) on a terminal, a plain line every few seconds otherwise.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Counter counts bytes; safe for concurrent use.
type Counter struct{ n atomic.Int64 }

// Add counts n more bytes.
func (c *Counter) Add(n int64) { c.n.Add(n) }

// Load returns the bytes counted so far.
func (c *Counter) Load() int64 { return c.n.Load() }

// Writer wraps w, counting what is written through it into c.
func (c *Counter) Writer(w io.Writer) io.Writer { return &countingWriter{w: w, c: c} }

type countingWriter struct {
	w io.Writer
	c *Counter
}

func (cw *countingWriter) Write(p []byte) (int, error) {
	n, err := cw.w.Write(p)
	cw.c.Add(int64(n))
	return n, err
}

// Mode says how progress is shown.
type Mode int

const (
	Auto  Mode = iota // a bar on a terminal, lines otherwise
	Lines             // plain lines every few seconds
	Quiet             // nothing
)

// Start shows the progress of what c counts towards total (0: unknown)
// on out, labelled what, until the returned stop is called. stop leaves a
// final line with the total and the mean rate.
func Start(out io.Writer, mode Mode, what string, total int64, c *Counter) (stop func()) {
	if out == nil || mode == Quiet {
		return func() {}
	}
	bar := mode == Auto && isTerminal(out)
	every := 5 * time.Second
	if bar {
		every = 200 * time.Millisecond
	}
	done, finished := make(chan struct{}), make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				if bar {
					fmt.Fprint(out, "\r\033[K")
				}
				return
			case <-t.C:
				line := Line(what, c.Load(), total, time.Since(start))
				if bar {
					fmt.Fprint(out, "\r\033[K"+line)
				} else {
					fmt.Fprintln(out, "    "+line)
				}
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// Line renders one progress report: "package [=====>    ] 1.2 GiB of 4.0
// GiB  310 MiB/s  ETA 9s".
func Line(what string, n, total int64, elapsed time.Duration) string {
	var rate float64
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(n) / s
	}
	var b strings.Builder
	b.WriteString(what)
	if total > 0 {
		const width = 24
		frac := min(float64(n)/float64(total), 1)
		fill := int(frac * width)
		b.WriteString(" [" + strings.Repeat("=", fill))
		if fill < width {
			b.WriteString(">" + strings.Repeat(" ", width-fill-1))
		}
		fmt.Fprintf(&b, "] %s of %s  %s/s", Bytes(n), Bytes(total), Bytes(int64(rate)))
		if rate > 0 && n < total {
			eta := time.Duration(float64(total-n) / rate * float64(time.Second))
			fmt.Fprintf(&b, "  ETA %s", eta.Round(time.Second))
		}
	} else {
		fmt.Fprintf(&b, " %s  %s/s", Bytes(n), Bytes(int64(rate)))
	}
	return b.String()
}

// Bytes formats n in binary units: "1.5 GiB".
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
