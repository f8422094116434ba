// Package registry resolves image names against registries the way nerdctl
// does: containerd's hosts.toml under the certs.d folders (mirrors, TLS,
// plain HTTP), credentials from the docker CLI's config.json (and the
// credential helpers it names), and plain HTTP for registries on loopback.
package registry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"

	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	dockerconfig "github.com/containerd/containerd/v2/core/remotes/docker/config"
	remoteerrors "github.com/containerd/containerd/v2/core/remotes/errors"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	cliconfig "github.com/docker/cli/cli/config"
	"github.com/docker/cli/cli/config/configfile"
	"github.com/sirupsen/logrus"
)

// DefaultHostsDirs are the folders searched for HOST[:PORT]/hosts.toml when
// none are given: containerd's, then docker's (nerdctl's defaults).
var DefaultHostsDirs = []string{"/etc/containerd/certs.d", "/etc/docker/certs.d"}

// Options says where a resolver's configuration comes from.
type Options struct {
	// HostsDirs are searched in order for HOST[:PORT]/hosts.toml (or a
	// docker-style folder of certificates); the first match wins. nil
	// means DefaultHostsDirs; an empty, non-nil slice means none.
	HostsDirs []string
	// DockerConfigDir holds config.json; "" means $DOCKER_CONFIG, else
	// ~/.docker.
	DockerConfigDir string
}

func (o Options) hostsDirs() []string {
	if o.HostsDirs == nil {
		return DefaultHostsDirs
	}
	return o.HostsDirs
}

// Resolver is containerd's docker resolver configured from Options. It
// remembers which registries asked for credentials, so that Explain can
// say which one refused and what to do about it.
type Resolver struct {
	remotes.Resolver
	refHost string
	opts    Options
	creds   *credentials
}

// New returns a resolver for names on registry refHost (HOST[:PORT], as
// in the image name, e.g. "docker.io" or "127.0.0.1:5000"). A config.json
// that exists but cannot be read is an error; a missing one is not.
func New(ctx context.Context, refHost string, o Options) (*Resolver, error) {
	cf, err := cliconfig.Load(o.DockerConfigDir)
	if err != nil {
		return nil, fmt.Errorf("docker config: %w", err)
	}
	creds := &credentials{file: cf, asked: map[string]bool{}}
	ho := hostOptions(refHost, o, creds.get)
	return &Resolver{
		Resolver: docker.NewResolver(docker.ResolverOptions{Hosts: dockerconfig.ConfigureHosts(ctx, ho)}),
		refHost:  refHost,
		opts:     o,
		creds:    creds,
	}, nil
}

// Quiet returns ctx with a logger that keeps only warnings and errors
// (unless debug logging is on): containerd's resolver logs every host it
// tries and fails at info level, and the error returned says it better.
func Quiet(ctx context.Context) context.Context {
	if log.GetLevel() >= log.DebugLevel {
		return ctx
	}
	l := logrus.New()
	l.SetOutput(os.Stderr)
	l.SetLevel(logrus.WarnLevel)
	return log.WithLogger(ctx, logrus.NewEntry(l))
}

// hostOptions builds what containerd's ConfigureHosts needs: where the
// hosts.toml for a host lives, the credentials, and plain HTTP when the
// image's registry is on loopback (as nerdctl does; hosts.toml entries
// keep their own scheme).
func hostOptions(refHost string, o Options, creds func(string) (string, string, error)) dockerconfig.HostOptions {
	dirs := o.hostsDirs()
	ho := dockerconfig.HostOptions{
		HostDir:     func(host string) (string, error) { return hostDir(dirs, host) },
		Credentials: creds,
	}
	if isLoopback(refHost) {
		ho.DefaultScheme = "http"
	}
	return ho
}

// hostDir finds host's folder under the first of dirs that has one. A
// registry named with the standard port (":443") also matches a folder
// named without it. "" with no error: none, containerd's defaults apply.
func hostDir(dirs []string, host string) (string, error) {
	if host == "index.docker.io" || host == "registry-1.docker.io" {
		host = "docker.io" // hosts.toml for Docker Hub lives under docker.io
	}
	names := []string{host}
	if h, port, err := net.SplitHostPort(host); err == nil && port == "443" {
		names = append(names, h)
	}
	for _, d := range dirs {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			continue
		}
		for _, n := range names {
			dir, err := dockerconfig.HostDirFromRoot(d)(n)
			if err == nil && dir != "" {
				return dir, nil
			}
			if err != nil && !errdefs.IsNotFound(err) {
				return "", fmt.Errorf("hosts dir for %s under %s: %w", n, d, err)
			}
		}
	}
	return "", nil
}

// isLoopback: localhost, or a loopback IP, with or without a port.
func isLoopback(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// dockerHubKey is the key docker login stores Docker Hub's credentials under.
const dockerHubKey = "https://index.docker.io/v1/"

// credentials answers containerd's authorizer from a docker config file and
// records, per registry host asked, whether it had credentials to give.
type credentials struct {
	file *configfile.ConfigFile

	mu    sync.Mutex
	asked map[string]bool // host -> credentials were found
	last  string          // the host asked last
}

func (c *credentials) get(host string) (string, string, error) {
	user, secret, err := lookup(c.file, host)
	c.mu.Lock()
	c.asked[host] = err == nil && secret != ""
	c.last = host
	c.mu.Unlock()
	return user, secret, err
}

// credentialKeys are the config.json keys that may hold host's
// credentials, in the order docker login would have written them.
func credentialKeys(host string) []string {
	switch host {
	case "docker.io", "index.docker.io", "registry-1.docker.io":
		return []string{dockerHubKey}
	}
	keys := []string{host, "https://" + host, "http://" + host}
	if h, port, err := net.SplitHostPort(host); err == nil && port == "443" {
		keys = append(keys, h, "https://"+h)
	}
	return keys
}

// lookup returns host's user and secret (or "" and an identity token) from
// the config file or the credential helper it names; none is no error.
func lookup(cf *configfile.ConfigFile, host string) (string, string, error) {
	for _, k := range credentialKeys(host) {
		ac, err := cf.GetAuthConfig(k)
		if err != nil {
			return "", "", fmt.Errorf("credentials for %s from %s: %w", host, configSource(cf, k), err)
		}
		if ac.IdentityToken != "" {
			return "", ac.IdentityToken, nil
		}
		if ac.Username != "" || ac.Password != "" {
			return strings.TrimSpace(ac.Username), ac.Password, nil
		}
	}
	return "", "", nil
}

// configSource names where credentials for key come from: the config
// file, or the credential helper it names.
func configSource(cf *configfile.ConfigFile, key string) string {
	if h, ok := cf.CredentialHelpers[key]; ok && h != "" {
		return "credential helper docker-credential-" + h + " (named in " + cf.Filename + ")"
	}
	if cf.CredentialsStore != "" {
		return "credential helper docker-credential-" + cf.CredentialsStore + " (named in " + cf.Filename + ")"
	}
	return cf.Filename
}

// IsAuthError: the registry answered 401, or asked for credentials that
// could not be given.
func IsAuthError(err error) bool {
	if errors.Is(err, docker.ErrInvalidAuthorization) {
		return true
	}
	var st remoteerrors.ErrUnexpectedStatus
	return errors.As(err, &st) && st.StatusCode == 401
}

// Explain turns an authorization failure from this resolver into an error
// that names the registry, whether credentials were sent and where they
// came from, and the fix. Other errors come back unchanged. No secret is
// ever part of the message.
func (r *Resolver) Explain(err error) error {
	if err == nil || !IsAuthError(err) {
		return err
	}
	r.creds.mu.Lock()
	host, sent := r.creds.last, r.creds.asked[r.creds.last]
	r.creds.mu.Unlock()
	if host == "" {
		host = r.refHost
	}
	return explain(err, host, sent, configSource(r.creds.file, credentialKeys(host)[0]), r.opts.hostsDirs())
}

func explain(err error, host string, sent bool, source string, hostsDirs []string) error {
	login := "nerdctl login " + host
	if host == "registry-1.docker.io" {
		login = "nerdctl login"
	}
	where := "a hosts.toml under " + strings.Join(hostsDirs, " or ") + " (--hosts-dir)"
	if len(hostsDirs) == 0 {
		where = "a hosts.toml under a --hosts-dir"
	}
	if sent {
		return fmt.Errorf("registry %s refused the credentials from %s: log in again with '%s', "+
			"or route the name to a registry that takes them with %s: %w", host, source, login, where, err)
	}
	return fmt.Errorf("registry %s refused access without credentials, and %s has none for it: "+
		"log in with '%s' (it stores them there; DOCKER_CONFIG names another folder), "+
		"or route the name to a registry you can read with %s (some registries answer the same for a repository "+
		"that does not exist): %w", host, source, login, where, err)
}
