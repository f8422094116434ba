// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/containerd/containerd/v2/core/containers"

	"rekindle.local/contract/signature"
)

// The test vector of Rekindle's contract module (signature.Vector), which
// oci-checkpoint's signing runs too: a key pair made by 'openssl genpkey
// -algorithm ed25519', the manifest, and the signature that openssl and
// oci-checkpoint both make of the payload.
var vector = func() signature.TestVector {
	v, err := signature.Vector()
	if err != nil {
		panic(err)
	}
	return v
}()

var (
	vectorPub       = vector.PublicKey
	vectorKeyID     = vector.KeyID
	vectorSignature = vector.Signature
	vectorPayload   = vector.Payload
)

// vectorManifest is the vector's manifest, signed.
func vectorManifest() ocispec.Manifest {
	desc := func(d signature.Descriptor) ocispec.Descriptor {
		return ocispec.Descriptor{MediaType: d.MediaType, Digest: digest.Digest(d.Digest), Size: d.Size,
			Annotations: maps.Clone(d.Annotations)}
	}
	m := ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest, Config: desc(vector.Manifest.Config),
		Annotations: maps.Clone(vector.Manifest.Annotations)}
	for _, l := range vector.Manifest.Layers {
		m.Layers = append(m.Layers, desc(l))
	}
	m.Annotations[AnnotationSignature] = vectorSignature
	m.Annotations[AnnotationSignatureKey] = vectorKeyID
	return m
}

func writeKeyFile(t *testing.T, name, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// pubPEM is pub as a PEM "PUBLIC KEY" file's contents.
func pubPEM(t *testing.T, pub any) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// signingPolicy is a policy allowing every name and requiring a signature
// by one of the keys in files.
func signingPolicy(t *testing.T, files ...string) *Policy {
	t.Helper()
	p, err := NewPolicy([]string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.RequireSignatures(files, true); err != nil {
		t.Fatal(err)
	}
	return p
}

// sign signs m with key as oci-checkpoint does.
func sign(m *ocispec.Manifest, key ed25519.PrivateKey) {
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	id, _ := KeyID(key.Public().(ed25519.PublicKey))
	m.Annotations[AnnotationSignature] = "v1:" + base64.StdEncoding.EncodeToString(ed25519.Sign(key, SignaturePayload(*m)))
	m.Annotations[AnnotationSignatureKey] = id
}

// What oci-checkpoint signs (and openssl: 'openssl pkeyutl -verify -rawin')
// verifies here: both ends build the same payload.
func TestSignatureVector(t *testing.T) {
	m := vectorManifest()
	if got := string(SignaturePayload(m)); got != vectorPayload {
		t.Fatalf("payload:\n%s\nwant:\n%s", got, vectorPayload)
	}
	p := signingPolicy(t, writeKeyFile(t, "vector.pub", vectorPub))
	if _, ok := p.keys[vectorKeyID]; !ok {
		t.Fatalf("key ids %s, want %s", p.keyList(), vectorKeyID)
	}
	if err := p.Verify("rekindle.local/ckpt:1", m); err != nil {
		t.Fatalf("the vector does not verify: %v", err)
	}
}

func TestVerifySignature(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	otherPub, other, _ := ed25519.GenerateKey(rand.Reader)
	keyFile := writeKeyFile(t, "team.pub", pubPEM(t, pub))
	p := signingPolicy(t, keyFile)
	signed := func() ocispec.Manifest {
		m := vectorManifest()
		sign(&m, key)
		return m
	}
	if err := p.Verify("ckpt:1", signed()); err != nil {
		t.Fatalf("a signed manifest: %v", err)
	}
	otherID, _ := KeyID(otherPub)
	for name, tc := range map[string]struct {
		change  func(*ocispec.Manifest)
		problem string
		want    string
	}{
		"unsigned": {func(m *ocispec.Manifest) {
			delete(m.Annotations, AnnotationSignature)
			delete(m.Annotations, AnnotationSignatureKey)
		}, Unsigned, "the image is not signed (its manifest has no org.rekindle.signature annotation); to restore it, sign it with a key whose public key that list holds ('oci-checkpoint sign --key KEY ckpt:1'"},
		"annotation changed": {func(m *ocispec.Manifest) { m.Annotations["org.rekindle.restore.fallback"] = "none" }, BadSignature,
			"does not verify: its manifest's descriptors or annotations changed after it was signed"},
		"annotation added": {func(m *ocispec.Manifest) { m.Annotations["org.rekindle.cpu.flags"] = "" }, BadSignature, "does not verify"},
		"layer digest":     {func(m *ocispec.Manifest) { m.Layers[0].Digest = digest.FromString("other") }, BadSignature, "does not verify"},
		"layer annotation": {func(m *ocispec.Manifest) { delete(m.Layers[0].Annotations, "org.rekindle.layer.in-place") }, BadSignature, "does not verify"},
		"config digest":    {func(m *ocispec.Manifest) { m.Config.Digest = digest.FromString("other") }, BadSignature, "does not verify"},
		"another key":      {func(m *ocispec.Manifest) { sign(m, other) }, UnknownKey, `signed by key "` + otherID + `", which is not one of checkpoint_restore_keys`},
		"another key, our id": {func(m *ocispec.Manifest) {
			id := m.Annotations[AnnotationSignatureKey]
			sign(m, other)
			m.Annotations[AnnotationSignatureKey] = id
		}, BadSignature, "(" + keyFile + ") does not verify"},
		"not a signature": {func(m *ocispec.Manifest) { m.Annotations[AnnotationSignature] = "v1:AAAA" }, MalformedSignature, "is not a v1 Ed25519 signature"},
		"other version": {func(m *ocispec.Manifest) {
			m.Annotations[AnnotationSignature] = "v9:" + m.Annotations[AnnotationSignature][3:]
		}, MalformedSignature, "is not a v1"},
	} {
		m := signed()
		tc.change(&m)
		err := p.Verify("ckpt:1", m)
		var serr *SignatureError
		if !errors.As(err, &serr) || !errdefs.IsPermissionDenied(err) || serr.Problem != tc.problem {
			t.Errorf("%s: Verify = %v, want a SignatureError %q, permission denied", name, err, tc.problem)
			continue
		}
		for _, want := range []string{"checkpoint image ckpt:1 may not be restored on this host", RequireSignatureOption, tc.want} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q should contain %q", name, err, want)
			}
		}
	}

	// Not required: nothing is checked, a signature or not.
	np, _ := NewPolicy([]string{"*"})
	if err := np.RequireSignatures([]string{keyFile}, false); err != nil {
		t.Fatal(err)
	}
	m := vectorManifest()
	delete(m.Annotations, AnnotationSignature)
	if err := np.Verify("ckpt:1", m); err != nil || np.RequiresSignature() {
		t.Errorf("a policy that does not require a signature: %v", err)
	}
	var none *Policy
	if err := none.Verify("ckpt:1", m); err != nil {
		t.Errorf("a nil policy: %v", err)
	}
}

func TestRequireSignaturesReadsTheKeys(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	privDER, _ := x509.MarshalPKCS8PrivateKey(priv)
	for name, tc := range map[string]struct{ data, want string }{
		"not PEM":     {"ssh-ed25519 AAAA\n", `is not a PEM "PUBLIC KEY" file`},
		"private key": {string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER})), `is not a PEM "PUBLIC KEY" file`},
		"ECDSA":       {pubPEM(t, &ec.PublicKey), "not an Ed25519 key"},
		"bad DER":     {"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "public key"},
	} {
		f := writeKeyFile(t, "bad.pub", tc.data)
		p, _ := NewPolicy([]string{"*"})
		for _, require := range []bool{true, false} {
			err := p.RequireSignatures([]string{writeKeyFile(t, "good.pub", vectorPub), f}, require)
			if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), f) ||
				!strings.Contains(err.Error(), KeysOption) {
				t.Errorf("%s (require %v): %v; want an invalid argument naming %s, the option and %q", name, require, err, f, tc.want)
			}
		}
	}
	p, _ := NewPolicy([]string{"*"})
	missing := filepath.Join(t.TempDir(), "missing.pub")
	if err := p.RequireSignatures([]string{missing}, false); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("a missing key file: %v", err)
	}
	if err := p.RequireSignatures(nil, true); !errdefs.IsInvalidArgument(err) ||
		!strings.Contains(err.Error(), "lists no public key, so no checkpoint image could restore") {
		t.Errorf("a signature required with no key: %v", err)
	}
	p = signingPolicy(t, writeKeyFile(t, "a.pub", vectorPub))
	if s := p.String(); !strings.Contains(s, "signed by one of the keys ["+vectorKeyID+" (") {
		t.Errorf("String() = %q", s)
	}
}

func TestPrepareFollowsTheSignaturePolicy(t *testing.T) {
	ctx := context.Background()
	c := containers.Container{ID: "c1", Image: "ckpt", Snapshotter: "overlayfs"}
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	policy := signingPolicy(t, writeKeyFile(t, "team.pub", pubPEM(t, pub)))
	restorer := func(ann map[string]string, edit func(*ocispec.Manifest)) *Restorer {
		r := restorerWith(t, ann, edit)
		r.Policy = policy
		return r
	}
	signed := func(m *ocispec.Manifest) { sign(m, key) }
	// Signed by a trusted key: past the policy, as far as the snapshotter.
	if _, err := restorer(nil, signed).Prepare(ctx, c); !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "snapshotter") {
		t.Fatalf("Prepare of a signed image: %v; want it to get as far as the snapshotter", err)
	}

	for name, edit := range map[string]func(*ocispec.Manifest){
		"unsigned": nil,
		"annotation changed after signing": func(m *ocispec.Manifest) {
			sign(m, key)
			m.Annotations["org.criu.checkpoint.container.name"] = "other"
		},
		"layer digest changed after signing": func(m *ocispec.Manifest) {
			sign(m, key)
			m.Layers[0].Digest = digest.FromString("another layer")
		},
		"signed by another key": func(m *ocispec.Manifest) {
			_, other, _ := ed25519.GenerateKey(rand.Reader)
			sign(m, other)
		},
	} {
		r := restorer(nil, edit)
		res, err := r.Prepare(ctx, c)
		var serr *SignatureError
		if res != nil || !errors.As(err, &serr) || !errdefs.IsPermissionDenied(err) {
			t.Errorf("%s: Prepare = %+v, %v; want a SignatureError", name, res, err)
			continue
		}
		if !strings.Contains(err.Error(), "checkpoint image ckpt may not be restored") || !strings.Contains(err.Error(), "checkpoint_restore_require_signature") {
			t.Errorf("%s: error %q should name the image and the option", name, err)
		}
		if len(r.inFlight.n) != 0 {
			t.Errorf("%s: a refused restore is left in flight: %v", name, r.inFlight.n)
		}
	}

	// The name is checked first: a signed image outside the names is refused by name.
	r := restorer(nil, signed)
	r.Policy, _ = NewPolicy([]string{"rekindle.local"})
	if err := r.Policy.RequireSignatures([]string{writeKeyFile(t, "team.pub", pubPEM(t, pub))}, true); err != nil {
		t.Fatal(err)
	}
	var perr *PolicyError
	if _, err := r.Prepare(ctx, c); !errors.As(err, &perr) {
		t.Errorf("a signed image outside the names: %v; want a PolicyError", err)
	}

	// An unsigned image that asks for a cold start gets one, with the reason.
	r = restorer(map[string]string{AnnotationFallback: FallbackCold}, nil)
	if _, err := r.Prepare(ctx, c); !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "snapshotter") {
		t.Fatalf("Prepare of an unsigned image with a cold fallback: %v; want it to get as far as the snapshotter", err)
	}
	ci := &Image{Name: "ckpt", Manifest: ocispec.Manifest{Annotations: map[string]string{AnnotationFallback: FallbackCold}}}
	reasons, err := r.Check(ci)
	if err != nil || len(reasons) != 1 || !strings.Contains(reasons[0], "the image is not signed") ||
		!strings.Contains(reasons[0], "checkpoint_restore_require_signature") {
		t.Errorf("Check of an unsigned image that asks for a cold start = %q, %v", reasons, err)
	}
}
