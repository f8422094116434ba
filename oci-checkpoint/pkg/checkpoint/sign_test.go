package checkpoint

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"rekindle.local/contract/signature"
	"rekindle.local/oci-checkpoint/pkg/annotations"
)

// The test vector, the contract module's (signature.Vector), which the
// restore engine's TestSignatureVector (restore/checkpointimage) runs too.
var vector = func() signature.TestVector {
	v, err := signature.Vector()
	if err != nil {
		panic(err)
	}
	return v
}()

var (
	vectorKey       = vector.PrivateKey
	vectorPub       = vector.PublicKey
	vectorKeyID     = vector.KeyID
	vectorSignature = vector.Signature
	vectorPayload   = vector.Payload
)

// vectorManifest is the test vector's manifest, as an OCI manifest.
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
	return m
}

func writeFile(t *testing.T, name, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func vectorKeys(t *testing.T) (ed25519.PrivateKey, map[string]ed25519.PublicKey) {
	t.Helper()
	key, err := LoadSigningKey(writeFile(t, "vector.key", vectorKey))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := LoadPublicKey(writeFile(t, "vector.pub", vectorPub))
	if err != nil {
		t.Fatal(err)
	}
	return key, map[string]ed25519.PublicKey{KeyID(pub): pub}
}

// The payload and the signature are those of the documented format, the
// same bytes openssl signs and verifies.
func TestSignatureVector(t *testing.T) {
	key, keys := vectorKeys(t)
	m := vectorManifest()
	if got := string(SignaturePayload(m)); got != vectorPayload {
		t.Fatalf("payload:\n%s\nwant:\n%s", got, vectorPayload)
	}
	if id := SignManifest(&m, key); id != vectorKeyID {
		t.Errorf("key id %s, want %s", id, vectorKeyID)
	}
	if m.Annotations[annotations.Signature] != vectorSignature || m.Annotations[annotations.SignatureKey] != vectorKeyID {
		t.Errorf("signature annotations %q, %q; want %q, %q", m.Annotations[annotations.Signature],
			m.Annotations[annotations.SignatureKey], vectorSignature, vectorKeyID)
	}
	// The signature's own annotations are not signed.
	if got := string(SignaturePayload(m)); got != vectorPayload {
		t.Errorf("payload of the signed manifest:\n%s", got)
	}
	if id, err := VerifyManifest(m, keys); err != nil || id != vectorKeyID {
		t.Errorf("VerifyManifest = %q, %v", id, err)
	}
}

// A field's length prefix keeps a value from being read as other fields.
func TestSignaturePayloadIsUnambiguous(t *testing.T) {
	a, b := vectorManifest(), vectorManifest()
	a.Annotations = map[string]string{"k": "v\nannotation 1:x 1:y"}
	b.Annotations = map[string]string{"k": "v", "x": "y"}
	if bytes.Equal(SignaturePayload(a), SignaturePayload(b)) {
		t.Fatal("two manifests with other annotations have one payload")
	}
	// Moving an annotation from the manifest to a layer changes it.
	a, b = vectorManifest(), vectorManifest()
	a.Layers[0].Annotations = nil
	a.Annotations["org.rekindle.layer.in-place"] = "erofs"
	if bytes.Equal(SignaturePayload(a), SignaturePayload(b)) {
		t.Fatal("a layer's annotation and the manifest's have one payload")
	}
}

func TestVerifyManifestRefuses(t *testing.T) {
	key, keys := vectorKeys(t)
	signed := func() ocispec.Manifest {
		m := vectorManifest()
		SignManifest(&m, key)
		return m
	}
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	for name, tc := range map[string]struct {
		change func(*ocispec.Manifest)
		want   string
	}{
		"unsigned":           {func(m *ocispec.Manifest) { *m = vectorManifest() }, "not signed"},
		"annotation changed": {func(m *ocispec.Manifest) { m.Annotations["org.rekindle.restore.fallback"] = "none" }, "does not verify"},
		"annotation added":   {func(m *ocispec.Manifest) { m.Annotations["org.rekindle.x"] = "" }, "does not verify"},
		"annotation removed": {func(m *ocispec.Manifest) { delete(m.Annotations, "org.rekindle.restore.fallback") }, "does not verify"},
		"layer digest":       {func(m *ocispec.Manifest) { m.Layers[0].Digest = digest.FromString("other") }, "does not verify"},
		"layer size":         {func(m *ocispec.Manifest) { m.Layers[0].Size++ }, "does not verify"},
		"layer annotation":   {func(m *ocispec.Manifest) { m.Layers[0].Annotations = nil }, "does not verify"},
		"config digest":      {func(m *ocispec.Manifest) { m.Config.Digest = digest.FromString("other") }, "does not verify"},
		"config media type":  {func(m *ocispec.Manifest) { m.Config.MediaType = "application/json" }, "does not verify"},
		"layer added":        {func(m *ocispec.Manifest) { m.Layers = append(m.Layers, m.Layers[0]) }, "does not verify"},
		"another key's id": {func(m *ocispec.Manifest) {
			m.Annotations[annotations.SignatureKey] = KeyID(other.Public().(ed25519.PublicKey))
		}, "not one of the keys"},
		"signed by other key": {func(m *ocispec.Manifest) { SignManifest(m, other) }, "not one of the keys"},
		"garbage signature":   {func(m *ocispec.Manifest) { m.Annotations[annotations.Signature] = "v1:AAAA" }, "not a v1 Ed25519 signature"},
		"another version": {func(m *ocispec.Manifest) {
			m.Annotations[annotations.Signature] = "v2:" + m.Annotations[annotations.Signature][3:]
		}, "not a v1 Ed25519 signature"},
	} {
		m := signed()
		tc.change(&m)
		if _, err := VerifyManifest(m, keys); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: VerifyManifest = %v, want an error with %q", name, err, tc.want)
		}
	}
}

func TestLoadSigningKeyErrors(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalPKCS8PrivateKey(ec)
	ecPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER}))
	for name, tc := range map[string]struct{ data, want string }{
		"not PEM":    {"hello\n", "is not a PEM file: give an Ed25519 private key in PEM (PKCS#8); make one with 'openssl genpkey -algorithm ed25519"},
		"public key": {vectorPub, "is a public key: sign with its private key"},
		"ECDSA":      {ecPEM, "is a ECDSA key, not Ed25519: make one with 'openssl genpkey -algorithm ed25519"},
		"encrypted":  {"-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n", "is encrypted"},
		"PKCS#1":     {"-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n", `holds a PEM "RSA PRIVATE KEY", not a PKCS#8 "PRIVATE KEY"`},
		"bad DER":    {"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "make one with"},
	} {
		p := writeFile(t, "key.pem", tc.data)
		_, err := LoadSigningKey(p)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: LoadSigningKey = %v, want an error naming %s with %q", name, err, p, tc.want)
		}
	}
	if _, err := LoadSigningKey(filepath.Join(t.TempDir(), "missing.key")); err == nil || !strings.Contains(err.Error(), "missing.key") {
		t.Errorf("a missing key file: %v", err)
	}
}

// memImages is an image store in memory.
type memImages map[string]images.Image

func (s memImages) Get(_ context.Context, name string) (images.Image, error) {
	img, ok := s[name]
	if !ok {
		return img, errdefs.ErrNotFound
	}
	return img, nil
}
func (s memImages) List(context.Context, ...string) ([]images.Image, error) { return nil, nil }
func (s memImages) Create(_ context.Context, img images.Image) (images.Image, error) {
	s[img.Name] = img
	return img, nil
}
func (s memImages) Update(_ context.Context, img images.Image, _ ...string) (images.Image, error) {
	s[img.Name] = img
	return img, nil
}
func (s memImages) Delete(_ context.Context, name string, _ ...images.DeleteOpt) error {
	delete(s, name)
	return nil
}

func putBlob(t *testing.T, cs content.Store, mt string, b []byte, labels map[string]string) ocispec.Descriptor {
	t.Helper()
	d := ocispec.Descriptor{MediaType: mt, Digest: digest.FromBytes(b), Size: int64(len(b))}
	if err := content.WriteBlob(context.Background(), cs, d.Digest.String(), bytes.NewReader(b), d, content.WithLabels(labels)); err != nil {
		t.Fatal(err)
	}
	return d
}

// memLabels keeps a local content store's labels in memory.
type memLabels map[digest.Digest]map[string]string

func (l memLabels) Get(d digest.Digest) (map[string]string, error) { return l[d], nil }
func (l memLabels) Set(d digest.Digest, m map[string]string) error {
	l[d] = m
	return nil
}
func (l memLabels) Update(d digest.Digest, m map[string]string) (map[string]string, error) {
	if l[d] == nil {
		l[d] = map[string]string{}
	}
	for k, v := range m {
		if v == "" {
			delete(l[d], k)
		} else {
			l[d][k] = v
		}
	}
	return l[d], nil
}

func TestSignStoredImage(t *testing.T) {
	ctx := context.Background()
	cs, err := local.NewLabeledStore(t.TempDir(), memLabels{})
	if err != nil {
		t.Fatal(err)
	}
	key, keys := vectorKeys(t)
	is := memImages{}
	m := vectorManifest()
	raw, _ := json.Marshal(m)
	// A field that ocispec.Manifest does not know is kept as it was.
	raw = append(raw[:len(raw)-1], []byte(`,"x-extra":{"b":1,"a":2}}`)...)
	labels := map[string]string{"containerd.io/gc.ref.content.config": m.Config.Digest.String()}
	desc := putBlob(t, cs, ocispec.MediaTypeImageManifest, raw, labels)
	is["rekindle.local/ckpt:1"] = images.Image{Name: "rekindle.local/ckpt:1", Target: desc, Labels: map[string]string{"l": "v"}}
	// CRI's records: by ID (moved with the name), by the old digest (kept).
	id, pinned := m.Config.Digest.String(), "rekindle.local/ckpt@"+desc.Digest.String()
	is[id] = images.Image{Name: id, Target: desc}
	is[pinned] = images.Image{Name: pinned, Target: desc}

	res, err := Sign(ctx, cs, is, "rekindle.local/ckpt:1", key)
	if err != nil {
		t.Fatal(err)
	}
	img := is["rekindle.local/ckpt:1"]
	if res.KeyID != vectorKeyID || res.Previous != desc.Digest.String() || res.Digest != img.Target.Digest.String() ||
		res.Digest == res.Previous || res.Replaced != "" {
		t.Errorf("result %+v; image target %s", res, img.Target.Digest)
	}
	if img.Labels["l"] != "v" || img.Target.MediaType != ocispec.MediaTypeImageManifest {
		t.Errorf("image record changed beyond its target: %+v", img)
	}
	if is[id].Target.Digest != img.Target.Digest || len(res.Moved) != 1 || res.Moved[0] != id {
		t.Errorf("CRI's record by ID points at %s (moved %v), want the signed manifest", is[id].Target.Digest, res.Moved)
	}
	if is[pinned].Target.Digest != desc.Digest {
		t.Errorf("the record by the old digest was moved")
	}
	got, err := content.ReadBlob(ctx, cs, img.Target)
	if err != nil {
		t.Fatal(err)
	}
	var signed ocispec.Manifest
	if err := json.Unmarshal(got, &signed); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyManifest(signed, keys); err != nil {
		t.Errorf("the stored manifest does not verify: %v", err)
	}
	if !bytes.Contains(got, []byte(`"x-extra":{"b":1,"a":2}`)) {
		t.Errorf("an unknown field was not kept: %s", got)
	}
	info, err := cs.Info(ctx, img.Target.Digest)
	if err != nil || info.Labels["containerd.io/gc.ref.content.config"] != m.Config.Digest.String() {
		t.Errorf("the signed manifest's labels %v (%v): want the old manifest's gc references", info.Labels, err)
	}

	// Signing again replaces the signature.
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	res, err = Sign(ctx, cs, is, "rekindle.local/ckpt:1", other)
	if err != nil || res.Replaced != vectorKeyID || res.KeyID != KeyID(other.Public().(ed25519.PublicKey)) {
		t.Errorf("re-sign: %+v, %v", res, err)
	}
}

func TestSignRefuses(t *testing.T) {
	ctx := context.Background()
	cs, err := local.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	key, _ := vectorKeys(t)
	is := memImages{}
	plain := vectorManifest()
	plain.Annotations = map[string]string{"org.opencontainers.image.title": "plain"}
	raw, _ := json.Marshal(plain)
	is["docker.io/library/plain:1"] = images.Image{Name: "docker.io/library/plain:1", Target: putBlob(t, cs, ocispec.MediaTypeImageManifest, raw, nil)}
	idx, _ := json.Marshal(ocispec.Index{MediaType: ocispec.MediaTypeImageIndex})
	is["rekindle.local/index:1"] = images.Image{Name: "rekindle.local/index:1", Target: putBlob(t, cs, ocispec.MediaTypeImageIndex, idx, nil)}
	for name, want := range map[string]string{
		"docker.io/library/plain:1": "is not a checkpoint image",
		"rekindle.local/index:1":    "not a single manifest",
		"rekindle.local/missing:1":  "is not in containerd's image store",
	} {
		before := is[name]
		if _, err := Sign(ctx, cs, is, name, key); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), name) {
			t.Errorf("Sign(%s) = %v, want an error naming it with %q", name, err, want)
		}
		if is[name].Target.Digest != before.Target.Digest {
			t.Errorf("Sign(%s) failed but changed the image", name)
		}
	}
}

// create --sign-key: the manifest it writes is signed with the annotations
// it stores.
func TestWriteManifestSigns(t *testing.T) {
	ctx := context.Background()
	cs, err := local.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	key, keys := vectorKeys(t)
	v := vectorManifest()
	desc, err := writeManifest(ctx, cs, v.Config, v.Layers[0], v.Annotations, key)
	if err != nil {
		t.Fatal(err)
	}
	b, err := content.ReadBlob(ctx, cs, desc)
	if err != nil {
		t.Fatal(err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if id, err := VerifyManifest(m, keys); err != nil || id != vectorKeyID {
		t.Fatalf("the written manifest: %q, %v", id, err)
	}
	if m.Annotations[annotations.Signature] != vectorSignature {
		t.Errorf("signature %q, want the vector's %q", m.Annotations[annotations.Signature], vectorSignature)
	}
	// Without a key, nothing is signed.
	v = vectorManifest()
	if desc, err = writeManifest(ctx, cs, v.Config, v.Layers[0], v.Annotations, nil); err != nil {
		t.Fatal(err)
	}
	b, _ = content.ReadBlob(ctx, cs, desc)
	if bytes.Contains(b, []byte(annotations.Signature)) {
		t.Errorf("an unsigned manifest has a signature: %s", b)
	}
}
