package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"rekindle.local/oci-checkpoint/pkg/engine"
	"rekindle.local/oci-checkpoint/pkg/phase"
)

// errSignal stands for cliapp.Signal, the cause a signal gives.
var errSignal = errors.New("interrupted by SIGINT")

// TestQuiesceInterrupted: a signal during a quiesce call lets the call end
// (an engine cut off half way through releasing is in no known state),
// makes no further call, and marks the engine quiesced so that Create
// resumes it; one before any call changes nothing.
func TestQuiesceInterrupted(t *testing.T) {
	var mu sync.Mutex
	var got []string
	inCall := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/release" {
			inCall <- struct{}{}
			time.Sleep(300 * time.Millisecond)
		}
		mu.Lock()
		got = append(got, r.URL.Path) // recorded as it ends: the call was not cut
		mu.Unlock()
	}))
	defer srv.Close()
	call := func(s string) engine.Call {
		c, err := engine.ParseCall(s)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	newCr := func(sig context.Context) *creation {
		o := Options{QuiesceTimeout: 10 * time.Second}
		o.Engine.Quiesce = []engine.Call{call("POST /release"), call("POST /after")}
		return &creation{ctx: sig, sig: sig, o: o, eng: &engine.Client{Base: srv.URL}, t: &phase.Timer{}}
	}

	sig, cancel := context.WithCancelCause(context.Background())
	go func() { <-inCall; cancel(errSignal) }()
	cr := newCr(sig)
	err := cr.run("quiesce", cr.quiesce, "no image was written")
	if !errors.Is(err, errSignal) || !strings.Contains(err.Error(), "during quiesce; no image was written") {
		t.Fatalf("error %v, want the signal's, naming the phase", err)
	}
	if !cr.quiesced {
		t.Error("not marked quiesced after a call ran: Create would not resume the engine")
	}
	mu.Lock()
	if strings.Join(got, " ") != "/release" {
		t.Errorf("calls made %q, want /release alone, ended", got)
	}
	mu.Unlock()

	early, cancel2 := context.WithCancelCause(context.Background())
	cancel2(errSignal)
	cr = newCr(early)
	if err := cr.quiesce(); !errors.Is(err, errSignal) || cr.quiesced {
		t.Errorf("before any call: error %v, quiesced %v; want the signal's and false", err, cr.quiesced)
	}
}

// TestCtxWriter: writes fail once the context ends, with its error.
func TestCtxWriter(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var b bytes.Buffer
	w := ctxWriter{ctx, &b}
	if _, err := w.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	cancel()
	if n, err := w.Write([]byte("b")); n != 0 || !errors.Is(err, context.Canceled) {
		t.Errorf("after cancel: %d, %v", n, err)
	}
	if b.String() != "a" {
		t.Errorf("wrote %q", b.String())
	}
}
