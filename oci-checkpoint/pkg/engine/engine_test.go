package engine

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseCall(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Call
		err  string
	}{
		{in: "GET /health", want: Call{Method: "GET", Path: "/health"}},
		{in: "post /sleep?level=2", want: Call{Method: "POST", Path: "/sleep?level=2"}},
		{in: `POST /collective_rpc {"method": "reload_weights"}`, want: Call{Method: "POST", Path: "/collective_rpc", Body: `{"method": "reload_weights"}`}},
		{in: "exec kill -USR1 1", want: Call{Method: "exec", Body: "kill -USR1 1"}},
		{in: "exec", err: "needs a command"},
		{in: "POST sleep", err: "must start with /"},
		{in: "FETCH /x", err: `call "FETCH /x": unknown method FETCH`},
		{in: `POST /x {"a": 1, "b": 2}`, want: Call{Method: "POST", Path: "/x", Body: `{"a": 1, "b": 2}`}},
		{in: "PUT /x  [1, 2]", want: Call{Method: "PUT", Path: "/x", Body: "[1, 2]"}},
		{in: "DELETE /cache", want: Call{Method: "DELETE", Path: "/cache"}},
		{in: "GET /health extra", err: `call "GET /health extra": GET takes no body ("extra" follows the path)`},
		{in: "POST /x {a: 1}", err: `call "POST /x {a: 1}": the body is not JSON`},
		{in: `POST /x {"a": 1}, {"b": 2}`, err: "the body is not JSON"},
		{in: "POST /x%zz", err: "bad path"},
		{in: "", err: `call "": no call`},
		{in: "GET", err: `call "GET": the path must start with /`},
	} {
		got, err := ParseCall(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseCall(%q) error %v, want %q", tc.in, err, tc.err)
			} else if !strings.HasSuffix(err.Error(), ": want 'GET /path', 'POST /path [JSON]' or 'exec COMMAND'") {
				t.Errorf("ParseCall(%q) error %q does not end with the forms it reads", tc.in, err)
			}
			continue
		}
		if err != nil || got.Method != tc.want.Method || got.Path != tc.want.Path || got.Body != tc.want.Body {
			t.Errorf("ParseCall(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		// String round-trips.
		if again, _ := ParseCall(got.String()); again.String() != got.String() {
			t.Errorf("%q does not round-trip: %q", got.String(), again.String())
		}
	}
}

func TestLookup(t *testing.T) {
	p, err := Lookup("sglang", 0)
	if err != nil || p.Port != 30000 || p.Quiesce[len(p.Quiesce)-1].Path != "/release_memory_occupation" || p.Resume[0].Path != "/resume_memory_occupation" {
		t.Errorf("sglang: %+v %v", p, err)
	}
	if p, _ := Lookup("vllm", 9000); p.Port != 9000 || p.Quiesce[len(p.Quiesce)-1].Path != "/sleep?level=2" ||
		len(p.Resume) != 3 || p.SleepLevel != 2 {
		t.Errorf("vllm with a port: %+v", p)
	}
	if _, err := Lookup("generic", 0); err == nil || !strings.Contains(err.Error(), "--port") {
		t.Errorf("generic without a port: %v", err)
	}
	if _, err := Lookup("tgi", 0); err == nil || !strings.Contains(err.Error(), "sglang, vllm, generic") {
		t.Errorf("unknown engine: %v", err)
	}
}

func TestWithSleepLevel(t *testing.T) {
	p, _ := Lookup("vllm", 9000)
	if one, err := WithSleepLevel(p, 1); err != nil || one.Port != 9000 || one.Quiesce[len(one.Quiesce)-1].Path != "/sleep?level=1" ||
		len(one.Resume) != 1 || one.Resume[0].Path != "/wake_up" || one.SleepLevel != 1 {
		t.Errorf("level 1: %+v %v", one, err)
	}
	q, err := WithSleepLevel(p, 2)
	if err != nil || q.Port != 9000 || q.Quiesce[len(q.Quiesce)-1].Path != "/sleep?level=2" || q.SleepLevel != 2 {
		t.Fatalf("level 2: %+v %v", q, err)
	}
	var paths []string
	for _, c := range q.Resume {
		paths = append(paths, c.Path+" "+c.Body)
	}
	want := `/wake_up?tags=weights |/collective_rpc {"method":"reload_weights"}|/wake_up?tags=kv_cache `
	if got := strings.Join(paths, "|"); got != want {
		t.Errorf("level 2 resume: %s, want %s", got, want)
	}
	if _, err := WithSleepLevel(p, 3); err == nil || !strings.Contains(err.Error(), "level 1") {
		t.Errorf("level 3: %v", err)
	}
	s, _ := Lookup("sglang", 0)
	if _, err := WithSleepLevel(s, 2); err == nil || !strings.Contains(err.Error(), "no sleep levels") {
		t.Errorf("sglang with a sleep level: %v", err)
	}
}

// vllmServer answers /version and /server_info as vLLM 0.24 does in dev
// mode (devMode false: /server_info is not served), with sleepMode as
// model_config.enable_sleep_mode.
func vllmServer(devMode bool, sleepMode string) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/version":
			w.Write([]byte(`{"version":"0.24.0"}`))
		case r.URL.Path == "/server_info" && devMode && r.URL.Query().Get("config_format") == "json":
			w.Write([]byte(`{"vllm_config":{"model_config":{"model":"/models/model"` + sleepMode + `}},"vllm_env":{},"system_env":{}}`))
		default:
			http.NotFound(w, r)
		}
	}))
}

func TestPreflightVLLM(t *testing.T) {
	p, _ := Lookup("vllm", 0)
	for _, tc := range []struct {
		name      string
		devMode   bool
		sleepMode string
		err       string
	}{
		{"ready", true, `,"enable_sleep_mode":true`, ""},
		{"no dev mode", false, "", "VLLM_SERVER_DEV_MODE=1"},
		{"no sleep mode", true, `,"enable_sleep_mode":false`, "--enable-sleep-mode"},
		{"no such field", true, "", "cannot tell"},
	} {
		srv := vllmServer(tc.devMode, tc.sleepMode)
		f, err := (&Client{Base: srv.URL}).Preflight(context.Background(), p)
		srv.Close()
		if tc.err == "" {
			if err != nil || f.Version != "vllm 0.24.0" {
				t.Errorf("%s: %+v %v", tc.name, f, err)
			}
		} else if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
		}
	}
	// The generic profile has nothing to check.
	g, _ := Lookup("generic", 1)
	if f, err := (&Client{Base: "http://127.0.0.1:1"}).Preflight(context.Background(), g); err != nil || f.Version != "" {
		t.Errorf("generic: %+v %v", f, err)
	}
}

func TestDoNamesMissingEndpoint(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	p, _ := Lookup("vllm", 1)
	c := &Client{Base: srv.URL}
	err := c.Do(context.Background(), p.Quiesce[1])
	if err == nil || !strings.Contains(err.Error(), "answered 404") || !strings.Contains(err.Error(), "VLLM_SERVER_DEV_MODE=1") {
		t.Errorf("404 on /sleep: %v", err)
	}
	// A missing endpoint is final: no retries.
	n, err := c.Retry(context.Background(), p.Quiesce[1])
	if err == nil || n != 1 {
		t.Errorf("Retry on 404: %d attempts, %v", n, err)
	}
}

func TestRetryUntilUp(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/resume_memory_occupation" || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad request", 400)
			return
		}
		if calls.Add(1) < 3 {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
	}))
	defer srv.Close()
	p, _ := Lookup("sglang", 0)
	c := &Client{Base: srv.URL}
	n, err := c.Retry(context.Background(), p.Resume[0])
	if err != nil || n != 3 {
		t.Errorf("Retry: %d attempts, %v; want 3, nil", n, err)
	}
	// A deadline ends the retries with the last error.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	c.Base = "http://127.0.0.1:1"
	if _, err := c.Retry(ctx, p.Resume[0]); err == nil || !strings.Contains(err.Error(), "gave up after") {
		t.Errorf("Retry past its deadline: %v", err)
	}
}

func TestRetryStopsWhenTheCallFails(t *testing.T) {
	var calls atomic.Int32
	code := http.StatusInternalServerError
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, "weight set qwen does not match the model", code)
	}))
	defer srv.Close()
	p, _ := Lookup("vllm", 1)
	c := &Client{Base: srv.URL}
	n, err := c.Retry(context.Background(), p.Resume[1])
	if err == nil || n != FinalAfter || !strings.Contains(err.Error(), "answered 500: weight set qwen does not match") {
		t.Errorf("Retry on 500: %d attempts, %v; want %d and the answer", n, err, FinalAfter)
	}
	code = http.StatusBadRequest
	if n, err := c.Retry(context.Background(), p.Resume[1]); err == nil || n != 1 {
		t.Errorf("Retry on 400: %d attempts, %v; want 1", n, err)
	}
	// Only 500s in a row count: an engine not up yet (503) before them does not.
	calls.Store(0)
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 3 {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		http.Error(w, "failed", http.StatusInternalServerError)
	})
	if n, err := c.Retry(context.Background(), p.Resume[1]); err == nil || n != 3+FinalAfter {
		t.Errorf("Retry on 503 x3 then 500s: %d attempts, %v; want %d", n, err, 3+FinalAfter)
	}
}

func TestExecCall(t *testing.T) {
	c := &Client{}
	if err := c.Do(context.Background(), Call{Method: "exec", Body: "exit 0"}); err != nil {
		t.Error(err)
	}
	err := c.Do(context.Background(), Call{Method: "exec", Body: "echo nope >&2; exit 3"})
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("failing exec: %v", err)
	}
}

func TestOverride(t *testing.T) {
	def := []Call{{Method: "POST", Path: "/wake_up"}}
	got, err := Override(def, nil)
	if err != nil || len(got) != 1 || got[0].Path != "/wake_up" {
		t.Fatalf("no override: got %v, %v; want the profile's calls", got, err)
	}
	got, err = Override(def, []string{"POST /resume {\"a\": 1}", "exec touch /ready"})
	if err != nil || len(got) != 2 || got[0].Path != "/resume" || got[0].Body != `{"a": 1}` || got[1].Method != "exec" {
		t.Fatalf("override: got %v, %v", got, err)
	}
	if _, err := Override(def, []string{"POST resume"}); err == nil || !strings.Contains(err.Error(), "the path must start with /") {
		t.Fatalf("a bad call: got %v", err)
	}
}
