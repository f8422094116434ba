package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestLine(t *testing.T) {
	for _, tc := range []struct {
		n, total int64
		elapsed  time.Duration
		want     string
	}{
		{0, 0, 0, "package 0 B  0 B/s"},
		{1 << 30, 4 << 30, 2 * time.Second, "package [======>                 ] 1.0 GiB of 4.0 GiB  512.0 MiB/s  ETA 6s"},
		{4 << 30, 4 << 30, 4 * time.Second, "package [========================] 4.0 GiB of 4.0 GiB  1.0 GiB/s"},
		{3 << 20, 0, time.Second, "package 3.0 MiB  3.0 MiB/s"},
	} {
		if got := Line("package", tc.n, tc.total, tc.elapsed); got != tc.want {
			t.Errorf("Line(%d, %d, %s) = %q, want %q", tc.n, tc.total, tc.elapsed, got, tc.want)
		}
	}
}

func TestQuietPrintsNothing(t *testing.T) {
	var out bytes.Buffer
	var c Counter
	stop := Start(&out, Quiet, "dump", 10, &c)
	c.Add(5)
	stop()
	if out.Len() != 0 {
		t.Fatalf("quiet mode printed %q", out.String())
	}
}

func TestCounterWriter(t *testing.T) {
	var c Counter
	var buf bytes.Buffer
	w := c.Writer(&buf)
	w.Write([]byte("hello"))
	w.Write([]byte(" world"))
	if c.Load() != 11 || buf.String() != "hello world" {
		t.Fatalf("counted %d, wrote %q", c.Load(), buf.String())
	}
	if !strings.Contains(Bytes(1536), "1.5 KiB") {
		t.Fatalf("Bytes(1536) = %q", Bytes(1536))
	}
}
