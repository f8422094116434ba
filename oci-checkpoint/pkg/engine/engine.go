// Package engine describes how to quiesce and resume an inference engine:
// the HTTP calls (or commands) of each engine profile. It is shared by
// oci-checkpoint, which quiesces before the dump, and the rekindle-wake
// helper, which resumes after a restore, so it imports nothing heavy.
package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"time"
)

// Call is one step of a profile: an HTTP request to the engine, or a
// command run inside the container (Method "exec").
type Call struct {
	Method string `json:"method"`
	Path   string `json:"path,omitempty"`
	Body   string `json:"body,omitempty"`
	// Hint is added to the error when the engine answers 404, to say what
	// the engine must be started with for this call to exist.
	Hint string `json:"-"`
}

func (c Call) String() string {
	if c.Method == "exec" {
		return "exec " + c.Body
	}
	s := c.Method + " " + c.Path
	if c.Body != "" {
		s += " " + c.Body
	}
	return s
}

// Profile is an engine's health, quiesce and resume calls.
type Profile struct {
	Name    string `json:"name"`
	Port    int    `json:"port"`
	Health  Call   `json:"health"`
	Quiesce []Call `json:"quiesce"`
	Resume  []Call `json:"resume"`
	// SleepLevel is vLLM's: 1 offloads the weights to host memory, which
	// the checkpoint carries; 2 drops them, and the wake reloads them.
	SleepLevel int `json:"sleep_level,omitempty"`
	// ResumeGiven: the user chose the resume calls (--resume), and the
	// preflight keeps them.
	ResumeGiven bool `json:"-"`
}

// Names lists the known profiles.
var Names = []string{"sglang", "vllm", "generic"}

const vllmHint = "start vLLM with --enable-sleep-mode and VLLM_SERVER_DEV_MODE=1 so it serves the sleep API"
const sglangHint = "start SGLang with --enable-memory-saver so it serves the memory API"

// Lookup returns the named profile. port 0 keeps the profile's default.
// generic has no calls of its own: add them with Quiesce/Resume options.
func Lookup(name string, port int) (Profile, error) {
	var p Profile
	switch name {
	case "sglang":
		p = Profile{Name: name, Port: 30000, Health: Call{Method: "GET", Path: "/health"},
			Quiesce: []Call{
				{Method: "POST", Path: "/flush_cache"},
				{Method: "POST", Path: "/release_memory_occupation", Body: "{}", Hint: sglangHint},
			},
			Resume: []Call{{Method: "POST", Path: "/resume_memory_occupation", Body: "{}", Hint: sglangHint}},
		}
	case "vllm":
		p = vllm(DefaultVLLMSleepLevel)
		p.Port = 8000
	case "generic":
		p = Profile{Name: name, Health: Call{Method: "GET", Path: "/health"}}
	default:
		return p, fmt.Errorf("unknown engine %q: want one of %s", name, strings.Join(Names, ", "))
	}
	if port != 0 {
		p.Port = port
	}
	if p.Port <= 0 || p.Port > 65535 {
		return p, fmt.Errorf("engine %s has no port: pass --port", name)
	}
	return p, nil
}

// DefaultVLLMSleepLevel is the level --engine vllm sleeps at. Measured on an
// H100 host with a 1.2 B model (docs/benchmarks-history.md, vLLM): level 2 restores
// cached to its first token in 2.1 s, level 1 in 3.6 s. Level 1's offloaded
// weights ride in the checkpoint (7.0 GB against 3.6 GB) and CRIU must
// fill them back; level 2 reloads them from the model's files, already in
// the page cache, at the wake.
const DefaultVLLMSleepLevel = 2

// vllm is vLLM's profile at a sleep level (vLLM docs, "Sleep Mode"). The
// prefix cache is reset first: the KV cache's contents do not survive sleep.
func vllm(level int) Profile {
	p := Profile{Name: "vllm", Health: Call{Method: "GET", Path: "/health"}, SleepLevel: level,
		Quiesce: []Call{
			{Method: "POST", Path: "/reset_prefix_cache", Hint: vllmHint},
			{Method: "POST", Path: fmt.Sprintf("/sleep?level=%d", level), Hint: vllmHint},
		},
		Resume: []Call{{Method: "POST", Path: "/wake_up", Hint: vllmHint}},
	}
	if level == 2 {
		// Weights first, reloaded from the model's files, then the KV cache.
		p.Resume = []Call{
			{Method: "POST", Path: "/wake_up?tags=weights", Hint: vllmHint},
			{Method: "POST", Path: "/collective_rpc", Body: `{"method":"reload_weights"}`, Hint: vllmHint},
			{Method: "POST", Path: "/wake_up?tags=kv_cache", Hint: vllmHint},
		}
	}
	return p
}

// WithSleepLevel returns the vllm profile p at another sleep level, keeping
// its port.
func WithSleepLevel(p Profile, level int) (Profile, error) {
	if p.Name != "vllm" {
		return p, fmt.Errorf("--sleep-level is vLLM's: engine %s has no sleep levels", p.Name)
	}
	if level != 1 && level != 2 {
		return p, fmt.Errorf("--sleep-level %d: vLLM sleeps at level 1 (weights kept in host memory) or 2 (weights dropped, reloaded on wake)", level)
	}
	q := vllm(level)
	q.Port = p.Port
	return q, nil
}

// callForms is what ParseCall reads, for its errors.
const callForms = "want 'GET /path', 'POST /path [JSON]' or 'exec COMMAND'"

// ParseCall reads one call, strictly: "GET /path", "POST /path [JSON]"
// (PUT and DELETE as POST) or "exec COMMAND". A path is one word; what
// follows it is the body, which must be JSON; a GET has none.
func ParseCall(s string) (Call, error) {
	c, err := parseCall(strings.TrimSpace(s))
	if err != nil {
		return Call{}, fmt.Errorf("call %q: %w: %s", s, err, callForms)
	}
	return c, nil
}

func parseCall(s string) (Call, error) {
	method, rest, _ := strings.Cut(s, " ")
	rest = strings.TrimSpace(rest)
	switch method = strings.ToUpper(method); method {
	case "EXEC":
		if rest == "" {
			return Call{}, errors.New("exec needs a command")
		}
		return Call{Method: "exec", Body: rest}, nil
	case "GET", "POST", "PUT", "DELETE":
	case "":
		return Call{}, errors.New("no call")
	default:
		return Call{}, fmt.Errorf("unknown method %s", method)
	}
	path, body, _ := strings.Cut(rest, " ")
	body = strings.TrimSpace(body)
	if !strings.HasPrefix(path, "/") {
		return Call{}, errors.New("the path must start with /")
	}
	if _, err := url.ParseRequestURI(path); err != nil {
		return Call{}, fmt.Errorf("bad path %q", path)
	}
	switch {
	case body == "":
	case method == "GET":
		return Call{}, fmt.Errorf("GET takes no body (%q follows the path)", body)
	case !json.Valid([]byte(body)):
		return Call{}, fmt.Errorf("the body is not JSON (%s)", body)
	}
	return Call{Method: method, Path: path, Body: body}, nil
}

// Override returns the calls ss names (ParseCall's forms), or def where ss
// is empty: a user's --quiesce or --resume replaces the profile's, at
// checkpoint and in the wake helper alike.
func Override(def []Call, ss []string) ([]Call, error) {
	if len(ss) == 0 {
		return def, nil
	}
	out := make([]Call, 0, len(ss))
	for _, s := range ss {
		c, err := ParseCall(s)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// StatusError is an HTTP answer other than 2xx.
type StatusError struct {
	Call   Call
	Code   int
	Answer string
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("%s answered %d", e.Call, e.Code)
	if e.Answer != "" {
		msg += ": " + e.Answer
	}
	if e.Code == http.StatusNotFound && e.Call.Hint != "" {
		msg += " (the endpoint is missing: " + e.Call.Hint + ")"
	}
	return msg
}

// Client runs calls against one engine.
type Client struct {
	HTTP *http.Client
	Base string // e.g. http://127.0.0.1:30000
	// Exec runs a command call; nil runs it here with /bin/sh -c.
	Exec func(ctx context.Context, command string) error
}

// Do runs one call once.
func (c *Client) Do(ctx context.Context, call Call) error {
	if call.Method == "exec" {
		if c.Exec != nil {
			return c.Exec(ctx, call.Body)
		}
		out, err := exec.CommandContext(ctx, "/bin/sh", "-c", call.Body).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %w: %s", call, err, bytes.TrimSpace(out))
		}
		return nil
	}
	resp, err := c.send(ctx, call)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// send makes an HTTP call; an answer other than 2xx is a StatusError, its
// body read and closed.
func (c *Client) send(ctx context.Context, call Call) (*http.Response, error) {
	var body io.Reader
	if call.Body != "" {
		body = strings.NewReader(call.Body)
	}
	req, err := http.NewRequestWithContext(ctx, call.Method, c.Base+call.Path, body)
	if err != nil {
		return nil, err
	}
	if call.Body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", call, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		answer, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, &StatusError{Call: call, Code: resp.StatusCode, Answer: strings.TrimSpace(string(answer))}
	}
	return resp, nil
}

// Retry runs call until it succeeds or ctx ends, backing off from 50 ms to
// 2 s. An HTTP answer of 404 or 405 is final: retrying will not add the
// endpoint. So is another 4xx but 408 and 429, and a 500 given
// FinalAfter times: the engine ran the call and it failed (a weight set
// that does not match the model fails every reload the same way), where a
// 502-504 or no answer at all is an engine not up yet. It returns the
// attempts made.
func (c *Client) Retry(ctx context.Context, call Call) (int, error) {
	wait := 50 * time.Millisecond
	fails := 0 // 500s in a row
	for n := 1; ; n++ {
		err := c.Do(ctx, call)
		if err == nil {
			return n, nil
		}
		var se *StatusError
		if errors.As(err, &se) && se.Code == http.StatusInternalServerError {
			fails++
		} else {
			fails = 0
		}
		if se != nil && final(se.Code, fails) {
			return n, err
		}
		select {
		case <-ctx.Done():
			return n, fmt.Errorf("%w (gave up after %d attempts: %v)", err, n, ctx.Err())
		case <-time.After(wait):
		}
		if wait *= 2; wait > 2*time.Second {
			wait = 2 * time.Second
		}
	}
}

// FinalAfter is how many 500 answers in a row end Retry.
const FinalAfter = 3

// final: whether an answer ends Retry; fails counts the 500s in a row.
func final(code, fails int) bool {
	switch {
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests:
		return false
	case code >= 400 && code < 500:
		return true
	case code == http.StatusInternalServerError:
		return fails >= FinalAfter
	}
	return false
}
