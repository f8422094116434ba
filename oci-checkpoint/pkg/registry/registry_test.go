package registry

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/remotes/docker"
	dockerconfig "github.com/containerd/containerd/v2/core/remotes/docker/config"
	remoteerrors "github.com/containerd/containerd/v2/core/remotes/errors"
	cliconfig "github.com/docker/cli/cli/config"
)

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestHostDir(t *testing.T) {
	root := t.TempDir()
	containerd, docker, missing := filepath.Join(root, "containerd"), filepath.Join(root, "docker"), filepath.Join(root, "none")
	write(t, filepath.Join(containerd, "reg.example_5000_", "hosts.toml"), `server = "https://reg.example:5000"`)
	write(t, filepath.Join(containerd, "docker.io", "hosts.toml"), `server = "https://registry-1.docker.io"`)
	write(t, filepath.Join(docker, "reg.example_5000_", "hosts.toml"), `server = "https://reg.example:5000"`)
	write(t, filepath.Join(docker, "only.docker:5000", "ca.crt"), "")
	write(t, filepath.Join(docker, "std.example", "hosts.toml"), `server = "https://std.example"`)

	for _, tc := range []struct {
		name string
		dirs []string
		host string
		want string
	}{
		{"first dir wins", []string{containerd, docker}, "reg.example:5000", filepath.Join(containerd, "reg.example_5000_")},
		{"order is the caller's", []string{docker, containerd}, "reg.example:5000", filepath.Join(docker, "reg.example_5000_")},
		{"later dir when the first has none", []string{containerd, docker}, "only.docker:5000", filepath.Join(docker, "only.docker:5000")},
		{"a missing dir is skipped", []string{missing, docker}, "only.docker:5000", filepath.Join(docker, "only.docker:5000")},
		{"none anywhere", []string{containerd, docker}, "other.example", ""},
		{"no dirs", []string{}, "reg.example:5000", ""},
		{":443 also matches the name without port", []string{docker}, "std.example:443", filepath.Join(docker, "std.example")},
		{"another port does not", []string{docker}, "std.example:8443", ""},
		{"Docker Hub's API host reads docker.io", []string{containerd}, "registry-1.docker.io", filepath.Join(containerd, "docker.io")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := hostDir(tc.dirs, tc.host)
			if err != nil || got != tc.want {
				t.Fatalf("hostDir(%v, %q) = %q, %v; want %q", tc.dirs, tc.host, got, err, tc.want)
			}
		})
	}
}

// TestHosts: what containerd's ConfigureHosts makes of our options: the
// endpoints tried, in order, their scheme and what each may do.
func TestHosts(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "registry.example_5000_", "hosts.toml"), `
server = "https://registry.example:5000"

[host."http://127.0.0.1:5001"]
  capabilities = ["pull", "resolve"]
`)
	write(t, filepath.Join(dir, "nomirror.example", "hosts.toml"), `
server = "https://nomirror.example"
[host."https://cache.example"]
  capabilities = ["pull"]
`)
	pull := docker.HostCapabilityPull | docker.HostCapabilityResolve
	all := pull | docker.HostCapabilityPush | docker.HostCapabilityReferrers
	type ep struct {
		scheme, host string
		caps         docker.HostCapabilities
	}
	for _, tc := range []struct {
		name string
		host string
		dirs []string
		want []ep
	}{
		{"loopback is plain HTTP", "127.0.0.1:5000", []string{}, []ep{{"http", "127.0.0.1:5000", all}}},
		{"localhost is plain HTTP", "localhost:5000", []string{}, []ep{{"http", "localhost:5000", all}}},
		{"any other host is HTTPS", "reg.example:5000", []string{}, []ep{{"https", "reg.example:5000", all}}},
		{"Docker Hub", "docker.io", []string{}, []ep{{"https", "registry-1.docker.io", all}}},
		{"mirror first, then the server", "registry.example:5000", []string{dir},
			[]ep{{"http", "127.0.0.1:5001", pull}, {"https", "registry.example:5000", all}}},
		{"the default hosts dirs are not ours", "registry.example:5000", []string{filepath.Join(dir, "none")},
			[]ep{{"https", "registry.example:5000", all}}},
		{"a pull-only host", "nomirror.example", []string{dir},
			[]ep{{"https", "cache.example", docker.HostCapabilityPull}, {"https", "nomirror.example", all}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ho := hostOptions(tc.host, Options{HostsDirs: tc.dirs}, nil)
			hosts, err := dockerconfig.ConfigureHosts(context.Background(), ho)(tc.host)
			if err != nil {
				t.Fatal(err)
			}
			var got []ep
			for _, h := range hosts {
				got = append(got, ep{h.Scheme, h.Host, h.Capabilities})
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("hosts for %s:\n got %v\nwant %v", tc.host, got, tc.want)
			}
		})
	}
}

func TestDefaultHostsDirs(t *testing.T) {
	if got := (Options{}).hostsDirs(); fmt.Sprint(got) != "[/etc/containerd/certs.d /etc/docker/certs.d]" {
		t.Fatalf("default hosts dirs: %v", got)
	}
	if got := (Options{HostsDirs: []string{}}).hostsDirs(); len(got) != 0 {
		t.Fatalf("an empty list must stay empty: %v", got)
	}
}

func auth(user, pw string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + pw))
}

func TestCredentials(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "config.json"), fmt.Sprintf(`{"auths": {
		"127.0.0.1:5000": {"auth": %q},
		"https://index.docker.io/v1/": {"auth": %q},
		"https://scheme.example:5000": {"auth": %q},
		"std.example": {"auth": %q},
		"token.example": {"identitytoken": "tok"}
	}}`, auth("local", "pw1"), auth("hub", "pw2"), auth("scheme", "pw3"), auth("std", "pw4")))
	cf, err := cliconfig.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host, user, secret string
	}{
		{"127.0.0.1:5000", "local", "pw1"},
		{"registry-1.docker.io", "hub", "pw2"},
		{"docker.io", "hub", "pw2"},
		{"scheme.example:5000", "scheme", "pw3"},
		{"std.example:443", "std", "pw4"},
		{"token.example", "", "tok"},
		{"127.0.0.1:5001", "", ""},
		{"std.example:8443", "", ""},
	} {
		t.Run(tc.host, func(t *testing.T) {
			user, secret, err := lookup(cf, tc.host)
			if err != nil || user != tc.user || secret != tc.secret {
				t.Fatalf("lookup(%q) = %q, %q, %v; want %q, %q", tc.host, user, secret, err, tc.user, tc.secret)
			}
		})
	}

	// No config.json at all: no credentials, no error.
	empty, err := cliconfig.Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if u, s, err := lookup(empty, "127.0.0.1:5000"); u != "" || s != "" || err != nil {
		t.Fatalf("no config: %q %q %v", u, s, err)
	}
	// A broken one is an error, not "no credentials".
	bad := t.TempDir()
	write(t, filepath.Join(bad, "config.json"), "{")
	if _, err := New(context.Background(), "127.0.0.1:5000", Options{DockerConfigDir: bad}); err == nil {
		t.Fatal("a malformed config.json gave no error")
	}
}

func TestIsAuthError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("x: %w", docker.ErrInvalidAuthorization), true},
		{fmt.Errorf("x: %w", remoteerrors.ErrUnexpectedStatus{Status: "401 Unauthorized", StatusCode: 401}), true},
		{remoteerrors.ErrUnexpectedStatus{Status: "500 Internal Server Error", StatusCode: 500}, false},
		{errors.New("connection refused"), false},
	} {
		if got := IsAuthError(tc.err); got != tc.want {
			t.Errorf("IsAuthError(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// basicAuthRegistry serves one manifest behind HTTP basic auth, on
// loopback, like docker-registry with an htpasswd file.
func basicAuthRegistry(t *testing.T, user, pw string) *httptest.Server {
	const manifest = `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2},"layers":[]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != pw {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.URL.Path == "/v2/ckpt/manifests/v1" {
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			w.Header().Set("Content-Length", fmt.Sprint(len(manifest)))
			if r.Method == http.MethodGet {
				w.Write([]byte(manifest))
			}
			return
		}
		w.WriteHeader(http.StatusNotFound)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestResolveBasicAuth(t *testing.T) {
	srv := basicAuthRegistry(t, "rk", "s3cret-pw")
	host := strings.TrimPrefix(srv.URL, "http://")
	ref := host + "/ckpt:v1"
	ctx := context.Background()

	for _, tc := range []struct {
		name   string
		config string // config.json; "" none
		want   string // "" resolves, else the error says this
	}{
		{"no credentials", "", "registry " + host + " refused access without credentials, and "},
		{"wrong credentials", fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, host, auth("rk", "bad-pw-x7")),
			"registry " + host + " refused the credentials from "},
		{"the right ones", fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, host, auth("rk", "s3cret-pw")), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.config != "" {
				write(t, filepath.Join(dir, "config.json"), tc.config)
			}
			r, err := New(ctx, host, Options{HostsDirs: []string{}, DockerConfigDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = r.Resolve(ctx, ref)
			err = r.Explain(err)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("resolve with credentials: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
			for _, s := range []string{"nerdctl login " + host, filepath.Join(dir, "config.json"), "hosts.toml"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
			if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "bad-pw-x7") {
				t.Errorf("error %q shows a password", err)
			}
		})
	}
}
