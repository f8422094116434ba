package weights

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

type credKey struct{}

// Handler serves the API: load, list, status, evict, forget, and ensure
// (the container hook's request). Only root peers are served.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/load", func(w http.ResponseWriter, r *http.Request) {
		var req LoadRequest
		if !decode(w, r, &req) {
			return
		}
		st, err := s.Load(req)
		reply(w, st, err)
	})
	mux.HandleFunc("GET /v1/sets", func(w http.ResponseWriter, r *http.Request) {
		reply(w, s.List(), nil)
	})
	mux.HandleFunc("GET /v1/sets/{name}", func(w http.ResponseWriter, r *http.Request) {
		st, err := s.Status(r.PathValue("name"))
		reply(w, st, err)
	})
	mux.HandleFunc("POST /v1/evict", func(w http.ResponseWriter, r *http.Request) {
		var req nameRequest
		if !decode(w, r, &req) {
			return
		}
		st, err := s.Evict(req.Name, req.Force)
		reply(w, st, err)
	})
	mux.HandleFunc("POST /v1/forget", func(w http.ResponseWriter, r *http.Request) {
		var req nameRequest
		if !decode(w, r, &req) {
			return
		}
		reply(w, struct{}{}, s.Forget(req.Name, req.Force))
	})
	mux.HandleFunc("POST /v1/ensure", func(w http.ResponseWriter, r *http.Request) {
		var req EnsureRequest
		if !decode(w, r, &req) {
			return
		}
		res, err := s.Ensure(req)
		reply(w, res, err)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cred, _ := r.Context().Value(credKey{}).(*unix.Ucred)
		if cred == nil || cred.Uid != 0 {
			uid := "unknown"
			if cred != nil {
				uid = fmt.Sprint(cred.Uid)
			}
			reply(w, nil, errf(403, "rekindle-weights serves root only and the caller runs as uid %s: run the command as root (sudo)", uid))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

type nameRequest struct {
	Name  string `json:"name"`
	Force bool   `json:"force,omitempty"`
}

// EnsureRequest is the hook's: Container may map set Name, and the set
// is loaded (CheckOnly: only the check, and the set's state).
type EnsureRequest struct {
	Name      string    `json:"name"`
	Container Container `json:"container"`
	CheckOnly bool      `json:"check_only,omitempty"`
}

type errorReply struct {
	Error string `json:"error"`
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(v); err != nil {
		reply(w, nil, errf(400, "bad request body: %v", err))
		return false
	}
	return true
}

func reply(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		code := 500
		var e *Error
		if errors.As(err, &e) {
			code = e.Code
		}
		w.WriteHeader(code)
		v = errorReply{Error: err.Error()}
	}
	json.NewEncoder(w).Encode(v)
}

// Listen opens the API socket (0600), refusing one another service still
// answers on.
func Listen(path string) (net.Listener, error) {
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("another rekindle-weights serves %s: stop it first", path)
	}
	os.Remove(path)
	old := unix.Umask(0o177)
	l, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Server wraps Handler with the peer credentials of each connection.
func (s *Service) Server() *http.Server {
	return &http.Server{
		Handler: s.Handler(),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			uc, ok := c.(*net.UnixConn)
			if !ok {
				return ctx
			}
			raw, err := uc.SyscallConn()
			if err != nil {
				return ctx
			}
			var cred *unix.Ucred
			raw.Control(func(fd uintptr) {
				cred, _ = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
			})
			return context.WithValue(ctx, credKey{}, cred)
		},
	}
}

// Client calls a service over its socket.
type Client struct {
	Socket string
	http   *http.Client
}

// NewClient returns a client of the service on socket.
func NewClient(socket string) *Client {
	return &Client{Socket: socket, http: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}}
}

// Do sends body (nil: GET) to path and decodes the reply into out.
func (c *Client) Do(ctx context.Context, path string, body, out any) error {
	method, rd := "GET", strings.NewReader("")
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		method, rd = "POST", strings.NewReader(string(b))
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://rekindle-weights"+path, rd)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if _, serr := os.Stat(c.Socket); serr != nil {
			return fmt.Errorf("no rekindle-weights service on %s: start it (systemctl start rekindle-weights, or rekindle-weights serve)", c.Socket)
		}
		return fmt.Errorf("rekindle-weights on %s: %w", c.Socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e errorReply
		if json.NewDecoder(resp.Body).Decode(&e) != nil || e.Error == "" {
			return fmt.Errorf("rekindle-weights answered %s", resp.Status)
		}
		return errors.New(e.Error)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
