package checkpoint

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"rekindle.local/oci-checkpoint/pkg/engine"
)

// freeAddr is a loopback address nothing listens on: connections to it
// are refused.
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// serveAt serves h at addr after delay, at once without one.
func serveAt(t *testing.T, addr string, delay time.Duration, h http.Handler) {
	serve := func() {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
			return
		}
		s := &httptest.Server{Listener: l, Config: &http.Server{Handler: h}}
		s.Start()
		t.Cleanup(s.Close)
	}
	if delay == 0 {
		serve()
		return
	}
	time.AfterFunc(delay, serve)
}

// TestHealthWait: connections refused are said at once with the hint and
// end the wait after the refused bound, not the health timeout; an engine
// that listens later, or answers 503 first, is waited for.
func TestHealthWait(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	var calls atomic.Int32
	unhealthyThenOK := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	never := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	for _, tc := range []struct {
		name      string
		handler   http.Handler // nil: nothing listens
		delay     time.Duration
		timeout   time.Duration
		listening []int
		err       string   // "" for none
		said      []string // in what the wait says
		within    time.Duration
	}{
		{name: "nothing listens", timeout: time.Minute, listening: []int{8000},
			err:    "nothing listened on http://ADDR in the container for 300ms (connection refused); the container listens on TCP port 8000: wrong --port or --engine?",
			said:   []string{"nothing listens on http://ADDR in the container (connection refused); the container listens on TCP port 8000: wrong --port or --engine? Waiting up to 300ms for it to listen (--refused-timeout), 1m0s in all (--health-timeout)"},
			within: 5 * time.Second},
		{name: "listens later", handler: ok, delay: 100 * time.Millisecond, timeout: time.Minute,
			said: []string{"nothing listens on http://ADDR", "answered after"}, within: 5 * time.Second},
		{name: "healthy at once", handler: ok, timeout: time.Minute, within: 5 * time.Second},
		{name: "unhealthy, then healthy", handler: unhealthyThenOK, timeout: time.Minute, within: 5 * time.Second},
		{name: "never healthy", handler: never, timeout: 500 * time.Millisecond,
			err: "the engine did not become healthy within 500ms (--health-timeout): GET /health answered 503", said: []string{"still waiting for GET /health to answer"}, within: 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := freeAddr(t)
			if tc.handler != nil {
				serveAt(t, addr, tc.delay, tc.handler)
			}
			var out bytes.Buffer
			w := healthWait{eng: &engine.Client{HTTP: &http.Client{}, Base: "http://" + addr}, call: engine.Call{Method: "GET", Path: "/health"},
				Timeout: tc.timeout, Refused: 300 * time.Millisecond, Out: &out, Interval: 20 * time.Millisecond, Every: 200 * time.Millisecond}
			if tc.listening != nil {
				w.Listening = func() []int { return tc.listening }
			}
			start := time.Now()
			err := w.wait(context.Background())
			if took := time.Since(start); took > tc.within {
				t.Errorf("waited %s, want at most %s", took, tc.within)
			}
			want := strings.ReplaceAll(tc.err, "ADDR", addr)
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), want)):
				t.Errorf("error %v, want one with %q", err, want)
			}
			for _, s := range tc.said {
				if s = strings.ReplaceAll(s, "ADDR", addr); !strings.Contains(out.String(), s) {
					t.Errorf("said %q, want %q in it", out.String(), s)
				}
			}
			if len(tc.said) == 0 && out.Len() > 0 {
				t.Errorf("said %q, want nothing", out.String())
			}
		})
	}
}

func TestListeningIn(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:D431 0100007F:1F40 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1
   2: 00000000:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000 100 0 0 10 0
`
	if got := listeningIn(table); !slices.Equal(got, []int{8000, 30000}) {
		t.Errorf("listening %v, want [8000 30000]", got)
	}
}
