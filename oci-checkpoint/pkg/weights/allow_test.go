package weights

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseAllow(t *testing.T) {
	for _, tc := range []struct{ entry, err string }{
		{"*", ""},
		{"k8s:prod", ""},
		{"k8s:team-*", ""},
		{"k8s:prod/engine-sa", ""},
		{"containerd:default", ""},
		{"containerd:default/eng-*", ""},
		// The old form: a bare name glob.
		{"good-*", "a bare container name"},
		{"eng-1", "a bare container name"},
		{"k8s:", "one namespace"},
		{"k8s:/sa", "one namespace"},
		{"k8s:prod/", "one namespace"},
		{"containerd:a/b/c", "one namespace"},
		{"k8s:[", "is not a glob"},
		{"podman:x", "a bare container name"},
	} {
		_, err := parseAllow(tc.entry)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("parseAllow(%q) = %v, want %q", tc.entry, err, tc.err)
		}
	}
	// A service account needs keys to verify tokens with.
	if err := checkAllow([]string{"k8s:prod/sa"}, false); err == nil || !strings.Contains(err.Error(), "--sa-keys") {
		t.Errorf("service account entry without keys: %v", err)
	}
	if err := checkAllow([]string{"k8s:prod/sa", "k8s:dev"}, true); err != nil {
		t.Errorf("with keys: %v", err)
	}
}

func TestAllows(t *testing.T) {
	pod := func(ns, sa string) identity {
		return identity{Container: Container{ID: "c1", CRI: true, PodNamespace: ns, PodName: "p", PodUID: "u", Name: "good-1",
			ContainerdNamespace: "k8s.io"}, serviceAccount: sa}
	}
	nerdctl := func(ns, name string) identity {
		return identity{Container: Container{ID: "0123456789abcdef", ContainerdNamespace: ns, Name: name}}
	}
	for _, tc := range []struct {
		what  string
		allow []string
		id    identity
		want  bool
	}{
		{"pod in the namespace", []string{"k8s:prod"}, pod("prod", ""), true},
		{"pod in another namespace, whatever its container's name", []string{"k8s:prod"}, pod("dev", "default"), false},
		{"namespace glob", []string{"k8s:team-*"}, pod("team-a", ""), true},
		{"service account verified", []string{"k8s:prod/engine"}, pod("prod", "engine"), true},
		{"other service account", []string{"k8s:prod/engine"}, pod("prod", "default"), false},
		{"no verified service account", []string{"k8s:prod/engine"}, pod("prod", ""), false},
		{"service account glob does not match nothing", []string{"k8s:prod/*"}, pod("prod", ""), false},
		{"a pod is no containerd client's container", []string{"containerd:k8s.io"}, pod("prod", ""), false},
		{"a pod is not named by its container name", []string{"containerd:k8s.io/good-*"}, pod("prod", ""), false},
		{"nerdctl in its namespace", []string{"containerd:default"}, nerdctl("default", "x"), true},
		{"nerdctl by name", []string{"containerd:default/good-*"}, nerdctl("default", "good-1"), true},
		{"nerdctl by id", []string{"containerd:default/0123*"}, nerdctl("default", ""), true},
		{"nerdctl by name, other namespace", []string{"containerd:default/good-*"}, nerdctl("other", "good-1"), false},
		{"nerdctl is no pod", []string{"k8s:default"}, nerdctl("default", "good-1"), false},
		{"no containerd bundle", []string{"containerd:*"}, nerdctl("", "good-1"), false},
		{"old bare glob matches nothing", []string{"good-*"}, nerdctl("default", "good-1"), false},
		{"any", []string{"*"}, nerdctl("", ""), true},
		{"empty list", nil, pod("prod", "engine"), false},
		{"second entry", []string{"k8s:dev", "containerd:default"}, nerdctl("default", ""), true},
	} {
		if got := allows(tc.allow, tc.id); got != tc.want {
			t.Errorf("%s: allows(%v, %s) = %v", tc.what, tc.allow, tc.id, got)
		}
	}
}

// bundle makes a containerd-like bundle dir STATE/io.containerd.runtime.v2.task/NS/ID
// with a config.json of spec and returns it.
func bundle(t *testing.T, ns, id string, spec any) string {
	t.Helper()
	b := filepath.Join(t.TempDir(), containerdTaskDir, ns, id)
	if err := os.MkdirAll(b, 0o755); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(b, "config.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestHookContainer(t *testing.T) {
	state := func(id, bundle string, ann map[string]string) string {
		b, _ := json.Marshal(map[string]any{"ociVersion": "1.2.0", "id": id, "status": "creating", "bundle": bundle, "annotations": ann})
		return string(b)
	}
	// A CRI container with the kubelet's service account volume.
	sa := t.TempDir()
	os.WriteFile(filepath.Join(sa, "token"), []byte("a.b.c"), 0o600)
	criBundle := bundle(t, "k8s.io", "abc", map[string]any{"mounts": []map[string]any{
		{"destination": "/etc/hosts", "source": "/x/hosts"},
		{"destination": ServiceAccountDir + "/", "source": sa},
	}})
	criAnn := map[string]string{annCRIType: "container", annCRINamespace: "prod", annCRIPodName: "p", annCRIPodUID: "u1",
		annCRIContainer: "engine", annNerdctlName: "good-1"}
	// A service account volume whose token is a FIFO: not read, not blocked on.
	fifoDir := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(fifoDir, "token"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifoBundle := bundle(t, "k8s.io", "fifo", map[string]any{"mounts": []map[string]any{{"destination": ServiceAccountDir, "source": fifoDir}}})
	nerdBundle := bundle(t, "default", "abc", map[string]any{})

	for _, tc := range []struct {
		name, state string
		want        Container
		err         string
	}{
		{"nerdctl", state("abc", nerdBundle, map[string]string{annNerdctlName: "eng-1"}),
			Container{ID: "abc", ContainerdNamespace: "default", Name: "eng-1"}, ""},
		{"CRI", state("abc", criBundle, criAnn),
			Container{ID: "abc", ContainerdNamespace: "k8s.io", CRI: true, PodNamespace: "prod", PodName: "p", PodUID: "u1", Name: "engine", Token: "a.b.c"}, ""},
		{"CRI, token a FIFO", state("fifo", fifoBundle, criAnn),
			Container{ID: "fifo", ContainerdNamespace: "k8s.io", CRI: true, PodNamespace: "prod", PodName: "p", PodUID: "u1", Name: "engine"}, ""},
		// Not containerd's bundle layout, or the bundle of another id.
		{"podman bundle", state("abc", "/var/lib/containers/storage/overlay-containers/abc/userdata", nil), Container{ID: "abc"}, ""},
		{"other id", state("xyz", nerdBundle, nil), Container{ID: "xyz"}, ""},
		{"no id", `{"annotations":{}}`, Container{}, "names no container id"},
		{"not JSON", `hello`, Container{}, "run by runc as a createRuntime hook"},
	} {
		_, c, err := HookContainer(strings.NewReader(tc.state))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: got %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || c != tc.want {
			t.Errorf("%s: got %+v %v, want %+v", tc.name, c, err, tc.want)
		}
	}
}

// signJWT signs claims with key (RS256 for RSA, ES256 for P-256).
func signJWT(t *testing.T, key crypto.Signer, claims any) string {
	t.Helper()
	alg := "RS256"
	if _, ok := key.(*ecdsa.PrivateKey); ok {
		alg = "ES256"
	}
	enc := base64.RawURLEncoding
	h, _ := json.Marshal(map[string]string{"alg": alg, "kid": "k"})
	c, _ := json.Marshal(claims)
	in := enc.EncodeToString(h) + "." + enc.EncodeToString(c)
	sum := sha256.Sum256([]byte(in))
	var sig []byte
	switch k := key.(type) {
	case *rsa.PrivateKey:
		sig, _ = rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, sum[:])
	case *ecdsa.PrivateKey:
		r, s, err := ecdsa.Sign(rand.Reader, k, sum[:])
		if err != nil {
			t.Fatal(err)
		}
		sig = append(r.FillBytes(make([]byte, 32)), s.FillBytes(make([]byte, 32))...)
	}
	return in + "." + enc.EncodeToString(sig)
}

func saClaimsFor(ns, pod, uid, sa string, exp time.Time) map[string]any {
	k := map[string]any{"namespace": ns, "serviceaccount": map[string]string{"name": sa, "uid": "sa-uid"}}
	if uid != "" {
		k["pod"] = map[string]string{"name": pod, "uid": uid}
	}
	return map[string]any{"iss": "https://kubernetes.default.svc", "sub": "system:serviceaccount:" + ns + ":" + sa,
		"exp": exp.Unix(), "nbf": exp.Add(-time.Hour).Unix(), "kubernetes.io": k}
}

func TestVerifyToken(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	// The keys file as the API server's --service-account-key-file.
	var pemData []byte
	for _, k := range []crypto.PublicKey{&rsaKey.PublicKey, &ecKey.PublicKey} {
		der, _ := x509.MarshalPKIXPublicKey(k)
		pemData = append(pemData, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})...)
	}
	f := filepath.Join(t.TempDir(), "sa.pub")
	os.WriteFile(f, pemData, 0o644)
	keys, err := ReadSAKeys(f)
	if err != nil || len(keys) != 2 {
		t.Fatalf("ReadSAKeys: %d keys, %v", len(keys), err)
	}
	os.WriteFile(f, []byte("not PEM"), 0o644)
	if _, err := ReadSAKeys(f); err == nil || !strings.Contains(err.Error(), "holds no PEM public key") {
		t.Errorf("ReadSAKeys of junk: %v", err)
	}

	now := time.Now()
	later := now.Add(time.Hour)
	c := Container{ID: "c", CRI: true, PodNamespace: "prod", PodName: "p", PodUID: "u1"}
	good := saClaimsFor("prod", "p", "u1", "engine", later)
	for _, tc := range []struct {
		name  string
		token string
		keys  []crypto.PublicKey
		want  string
		err   string
	}{
		{"RS256", signJWT(t, rsaKey, good), keys, "engine", ""},
		{"ES256", signJWT(t, ecKey, good), keys, "engine", ""},
		{"another key", signJWT(t, other, good), keys, "", "does not verify"},
		{"no keys", signJWT(t, rsaKey, good), nil, "", "--sa-keys"},
		{"no token", "", keys, "", "no token"},
		{"unsigned", strings.Join(strings.Split(signJWT(t, rsaKey, good), ".")[:2], ".") + ".", keys, "", "does not verify"},
		{"alg none", base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none"}`)) + ".e30.", keys, "", `"none"`},
		{"claims changed", func() string {
			p := strings.Split(signJWT(t, rsaKey, saClaimsFor("dev", "p", "u1", "engine", later)), ".")
			c, _ := json.Marshal(good)
			return p[0] + "." + base64.RawURLEncoding.EncodeToString(c) + "." + p[2]
		}(), keys, "", "does not verify"},
		{"expired", signJWT(t, rsaKey, saClaimsFor("prod", "p", "u1", "engine", now.Add(-2*time.Minute))), keys, "", "expired"},
		{"another pod's", signJWT(t, rsaKey, saClaimsFor("prod", "q", "u2", "admin", later)), keys, "", "another pod's"},
		{"another namespace's", signJWT(t, rsaKey, saClaimsFor("dev", "p", "u1", "admin", later)), keys, "", "another pod's"},
		{"legacy token", signJWT(t, rsaKey, saClaimsFor("prod", "", "", "admin", later)), keys, "", "not bound to a pod"},
	} {
		c.Token = tc.token
		got, err := verifyToken(c, tc.keys, now)
		if tc.err == "" && (err != nil || got != tc.want) || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: got %q, %v; want %q, %q", tc.name, got, err, tc.want, tc.err)
		}
	}
}

func TestEnsureChecksWhatTheRuntimeVouchesFor(t *testing.T) {
	src := testSet(t, 1, 1000)
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	root := t.TempDir()
	s, err := Open(Config{Root: root, StatePath: filepath.Join(root, "state.json"), SAKeys: []crypto.PublicKey{&key.PublicKey}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(LoadRequest{Name: "m", Paths: []string{src}, Allow: []string{"k8s:prod/engine", "containerd:default/good-*"}, SetAllow: true}); err != nil {
		t.Fatal(err)
	}
	pod := func(ns, uid, sa string) Container {
		c := Container{ID: "c", CRI: true, PodNamespace: ns, PodName: "p", PodUID: uid, Name: "good-1", ContainerdNamespace: "k8s.io"}
		if sa != "" {
			c.Token = signJWT(t, key, saClaimsFor(ns, "p", uid, sa, time.Now().Add(time.Hour)))
		}
		return c
	}
	for _, tc := range []struct {
		what string
		c    Container
		err  string
	}{
		{"the allowed service account", pod("prod", "u1", "engine"), ""},
		{"a nerdctl container by name", Container{ID: "c", ContainerdNamespace: "default", Name: "good-1"}, ""},
		{"a pod whose container has the allowed name", pod("dev", "u1", "engine"),
			"container good-1 of pod dev/p (c, service account engine) may not map weight set m (allowed: k8s:prod/engine containerd:default/good-*): " +
				"run it where the set allows, or allow it with 'rekindle-weights load --allow k8s:prod/engine --allow 'containerd:default/good-*' --allow k8s:dev/engine m'"},
		{"another service account", pod("prod", "u1", "default"), "service account default) may not map"},
		{"a token of another pod", func() Container { c := pod("prod", "u1", "engine"); c.PodUID = "u2"; return c }(),
			"no verified service account (token at /var/run/secrets/kubernetes.io/serviceaccount is another pod's"},
		{"no containerd bundle", Container{ID: "c", Name: "good-1"}, "not made by containerd"},
		{"no id", Container{}, "names no container"},
	} {
		_, err := s.Ensure(EnsureRequest{Name: "m", Container: tc.c, CheckOnly: true})
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v\nwant %q", tc.what, err, tc.err)
		}
	}
	// A new set loaded without --allow allows no container.
	if _, err := s.Load(LoadRequest{Name: "none", Paths: []string{src}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ensure(EnsureRequest{Name: "none", Container: pod("prod", "u1", "engine")}); err == nil || !strings.Contains(err.Error(), "allows no container") {
		t.Errorf("set without --allow: %v", err)
	}
	// A bare name glob is refused at load.
	if _, err := s.Load(LoadRequest{Name: "m", Allow: []string{"good-*"}, SetAllow: true}); err == nil || !strings.Contains(err.Error(), "bad allow entry") {
		t.Errorf("bare glob: %v", err)
	}
}

// The allow list lives in the manifest: a set adopted after its state file
// is lost keeps it; a manifest without one refuses every container until
// it is given one, which the manifest then keeps.
func TestManifestKeepsAllow(t *testing.T) {
	src := testSet(t, 1, 1000)
	root := t.TempDir()
	state := filepath.Join(root, "state.json")
	s := testService(t, root, 0)
	allow := []string{"containerd:default/eng-*"}
	if _, err := s.Load(LoadRequest{Name: "m", Paths: []string{src}, Allow: allow, SetAllow: true}); err != nil {
		t.Fatal(err)
	}
	m, err := readManifest(filepath.Join(root, "sets", "m"))
	if err != nil || !m.allowKnown || strings.Join(m.Allow, " ") != allow[0] {
		t.Fatalf("manifest %+v, %v", m, err)
	}
	// Changed on a loaded set: the manifest follows.
	allow = []string{"k8s:prod", "containerd:default"}
	if _, err := s.Load(LoadRequest{Name: "m", Allow: allow, SetAllow: true}); err != nil {
		t.Fatal(err)
	}
	os.Remove(state)
	s = testService(t, root, 0)
	st, err := s.Status("m")
	if err != nil || !st.AllowKnown || strings.Join(st.Allow, " ") != "k8s:prod containerd:default" || st.State != StateLoaded {
		t.Fatalf("adopted without a state file: %+v, %v", st, err)
	}
	nerd := Container{ID: "c", ContainerdNamespace: "default", Name: "x"}
	if _, err := s.Ensure(EnsureRequest{Name: "m", Container: nerd}); err != nil {
		t.Fatalf("allowed container after adoption: %v", err)
	}
	// A manifest from before: its allow list is not known.
	p := filepath.Join(root, "sets", "m", ManifestName)
	b, _ := os.ReadFile(p)
	var raw map[string]any
	json.Unmarshal(b, &raw)
	delete(raw, "allow")
	b, _ = json.Marshal(raw)
	writeFileAtomic(p, b, 0o444)
	os.Remove(state)
	s = testService(t, root, 0)
	if st, _ := s.Status("m"); st.AllowKnown || st.State != StateLoaded {
		t.Fatalf("old manifest: %+v", st)
	}
	_, err = s.Ensure(EnsureRequest{Name: "m", Container: nerd})
	if err == nil || !strings.Contains(err.Error(), "container x (c) in containerd namespace default may not map weight set m: the set's allow list is not known") ||
		!strings.Contains(err.Error(), "rekindle-weights load --allow ENTRY... m', e.g. --allow containerd:default/x") {
		t.Fatalf("unknown allow list: %v", err)
	}
	// A load without --allow keeps it unknown; the state file says so too.
	if _, err := s.Load(LoadRequest{Name: "m"}); err != nil {
		t.Fatal(err)
	}
	s = testService(t, root, 0)
	if st, _ := s.Status("m"); st.AllowKnown {
		t.Fatalf("unknown list became known: %+v", st)
	}
	// An old state file's bare globs are not taken either.
	s.Evict("m", false)
	os.WriteFile(state, []byte(`{"sets":[{"name":"m","sources":["`+filepath.Join(src, "part-0.safetensors")+`"],"allow":["eng-*"]}]}`), 0o644)
	s = testService(t, root, 0)
	if st, _ := s.Status("m"); st.AllowKnown || st.State != StateKnown {
		t.Fatalf("old state file: %+v", st)
	}
	if _, err := s.Ensure(EnsureRequest{Name: "m", Container: nerd}); err == nil || !strings.Contains(err.Error(), "allow list is not known") {
		t.Fatalf("old state file: %v", err)
	}
	// Given one, and loaded again: the manifest keeps it.
	if _, err := s.Load(LoadRequest{Name: "m", Allow: []string{"containerd:default"}, SetAllow: true}); err != nil {
		t.Fatal(err)
	}
	if m, _ := readManifest(filepath.Join(root, "sets", "m")); m == nil || !m.allowKnown || strings.Join(m.Allow, " ") != "containerd:default" {
		t.Fatalf("manifest after --allow: %+v", m)
	}
	// A state file that knows the list and an old manifest that does not:
	// the manifest is given it at start.
	b, _ = os.ReadFile(p)
	json.Unmarshal(b, &raw)
	raw["allow"] = nil
	b, _ = json.Marshal(raw)
	writeFileAtomic(p, b, 0o444)
	s = testService(t, root, 0)
	if m, _ := readManifest(filepath.Join(root, "sets", "m")); m == nil || !m.allowKnown || strings.Join(m.Allow, " ") != "containerd:default" {
		t.Fatalf("manifest not given the state file's list: %+v", m)
	}
}
