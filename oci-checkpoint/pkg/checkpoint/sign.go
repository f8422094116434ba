package checkpoint

// Signing a checkpoint image.
//
// A host can require that the checkpoint images it restores are signed by
// a key it trusts (containerd's checkpoint_restore_require_signature and
// checkpoint_restore_keys, containerd-patches/checkpointimage-restore-only-signed-checkpoint-image).
// What a signature covers, its payload and how it is written into the
// manifest are the contract module's package signature, which containerd's
// verification imports too; this file signs and verifies OCI manifests by
// it, and reads the keys.

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"rekindle.local/contract/signature"
	"rekindle.local/oci-checkpoint/pkg/annotations"
)

// SignatureVersion is the payload version this oci-checkpoint signs.
const SignatureVersion = signature.Version

// SignaturePayload returns the bytes a version 1 signature of manifest m
// signs (the contract's signature.Payload).
func SignaturePayload(m ocispec.Manifest) []byte {
	desc := func(d ocispec.Descriptor) signature.Descriptor {
		return signature.Descriptor{MediaType: d.MediaType, Digest: d.Digest.String(), Size: d.Size, Annotations: d.Annotations}
	}
	sm := signature.Manifest{Config: desc(m.Config), Annotations: m.Annotations}
	for _, l := range m.Layers {
		sm.Layers = append(sm.Layers, desc(l))
	}
	return signature.Payload(sm)
}

// KeyID names public key pub: "sha256:" and the hex SHA-256 of its DER.
func KeyID(pub ed25519.PublicKey) string {
	id, err := signature.KeyID(pub)
	if err != nil { // only for a key of the wrong length
		panic(err)
	}
	return id
}

// SignManifest signs m with key, setting its signature annotations (a
// signature it had is replaced), and returns the key's id.
func SignManifest(m *ocispec.Manifest, key ed25519.PrivateKey) string {
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	sig := ed25519.Sign(key, SignaturePayload(*m))
	id := KeyID(key.Public().(ed25519.PublicKey))
	m.Annotations[annotations.Signature] = signature.Encode(sig)
	m.Annotations[annotations.SignatureKey] = id
	return id
}

// VerifyManifest checks m's signature against keys, by key id; it returns
// the id of the key that made it.
func VerifyManifest(m ocispec.Manifest, keys map[string]ed25519.PublicKey) (string, error) {
	value, id := m.Annotations[annotations.Signature], m.Annotations[annotations.SignatureKey]
	if value == "" {
		return "", errors.New("the manifest is not signed (no " + annotations.Signature + " annotation)")
	}
	key, ok := keys[id]
	if !ok {
		return "", fmt.Errorf("the manifest is signed by key %q, which is not one of the keys given", id)
	}
	sig, ok := signature.Decode(value)
	if !ok {
		return "", fmt.Errorf("the manifest's %s is not a %s Ed25519 signature", annotations.Signature, SignatureVersion)
	}
	if !ed25519.Verify(key, SignaturePayload(m), sig) {
		return "", fmt.Errorf("the signature by key %s does not verify: the manifest's descriptors or annotations changed after it was signed", id)
	}
	return id, nil
}

// keygenHint is how to make a key pair that both ends take.
const keygenHint = "make one with 'openssl genpkey -algorithm ed25519 -out KEY' (its public key: 'openssl pkey -in KEY -pubout -out KEY.pub')"

// LoadSigningKey reads an Ed25519 private key from a PEM file in PKCS#8
// form, as 'openssl genpkey -algorithm ed25519' writes it.
func LoadSigningKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("signing key %s is not a PEM file: give an Ed25519 private key in PEM (PKCS#8); %s", path, keygenHint)
	}
	switch block.Type {
	case "PRIVATE KEY":
	case "PUBLIC KEY":
		return nil, fmt.Errorf("signing key %s is a public key: sign with its private key; the public key goes to the hosts that restore (checkpoint_restore_keys)", path)
	case "ENCRYPTED PRIVATE KEY":
		return nil, fmt.Errorf("signing key %s is encrypted: give a decrypted copy ('openssl pkey -in %s -out PLAIN.key'), kept where only the signer reads it", path, path)
	default:
		return nil, fmt.Errorf("signing key %s holds a PEM %q, not a PKCS#8 \"PRIVATE KEY\": give an Ed25519 private key; %s", path, block.Type, keygenHint)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %v; %s", path, err, keygenHint)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("signing key %s is a %s key, not Ed25519: %s", path, keyKind(k), keygenHint)
	}
	return ek, nil
}

// LoadPublicKey reads an Ed25519 public key from a PEM "PUBLIC KEY" file
// (PKIX), as 'openssl pkey -pubout' writes it.
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("public key: %w", err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("public key %s is not a PEM \"PUBLIC KEY\" file ('openssl pkey -in KEY -pubout' writes one)", path)
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("public key %s: %w", path, err)
	}
	ek, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("public key %s is a %s key, not Ed25519", path, keyKind(k))
	}
	return ek, nil
}

// keyKind names the algorithm of a key that is not Ed25519.
func keyKind(k any) string {
	switch k.(type) {
	case *rsa.PrivateKey, *rsa.PublicKey:
		return "RSA"
	case *ecdsa.PrivateKey, *ecdsa.PublicKey:
		return "ECDSA"
	case *ecdh.PrivateKey, *ecdh.PublicKey:
		return "X25519 (ECDH, which cannot sign)"
	default:
		return fmt.Sprintf("%T", k)
	}
}

// SignResult says what Sign did.
type SignResult struct {
	SchemaVersion int    `json:"schema_version"`
	Image         string `json:"image"`
	KeyID         string `json:"key_id"`
	// Previous is the manifest's digest before, Digest after: the image's
	// digest changes when it is signed.
	Previous string `json:"previous_digest"`
	Digest   string `json:"digest"`
	// Replaced is the key id of a signature the image had, now replaced.
	Replaced string `json:"replaced_key_id,omitempty"`
	// Moved are the other records moved to the signed manifest: CRI's
	// record of the image by its ID.
	Moved []string `json:"moved,omitempty"`
}

// Sign signs the checkpoint image called name in the image store with key:
// it writes the manifest again with the signature annotations (all else as
// it was) and points name at it. The manifest's digest changes; config and
// layers stay.
func Sign(ctx context.Context, cs content.Store, is images.Store, name string, key ed25519.PrivateKey) (*SignResult, error) {
	img, err := is.Get(ctx, name)
	if errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("image %s is not in containerd's image store: sign it where it was made, or pull it first ('nerdctl pull %s'), sign, and push it again", name, name)
	} else if err != nil {
		return nil, err
	}
	switch img.Target.MediaType {
	case ocispec.MediaTypeImageManifest, images.MediaTypeDockerSchema2Manifest:
	default:
		return nil, fmt.Errorf("image %s is a %s, not a single manifest: oci-checkpoint signs checkpoint images as 'oci-checkpoint create' stores them, a name pointing at one manifest", name, img.Target.MediaType)
	}
	raw, err := content.ReadBlob(ctx, cs, img.Target)
	if err != nil {
		return nil, fmt.Errorf("manifest of %s: %w", name, err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("manifest of %s: %w", name, err)
	}
	if !annotations.IsCheckpoint(m.Annotations) {
		return nil, fmt.Errorf("image %s is not a checkpoint image (its manifest has no checkpoint annotation): sign the images 'oci-checkpoint create' makes", name)
	}
	res := &SignResult{SchemaVersion: SchemaVersion, Image: name, Previous: img.Target.Digest.String(), Replaced: m.Annotations[annotations.SignatureKey]}
	res.KeyID = SignManifest(&m, key)

	// Only the annotations change: every other field of the manifest is
	// written back as it was read.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fmt.Errorf("manifest of %s: %w", name, err)
	}
	if fields["annotations"], err = json.Marshal(m.Annotations); err != nil {
		return nil, err
	}
	out, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	desc := img.Target
	desc.Digest, desc.Size = digest.FromBytes(out), int64(len(out))
	info, err := cs.Info(ctx, img.Target.Digest)
	if err != nil {
		return nil, fmt.Errorf("manifest of %s: %w", name, err)
	}
	// The old manifest's labels keep config and layers for the new one.
	if err := content.WriteBlob(ctx, cs, "rekindle-sign-"+randomID(), bytes.NewReader(out), desc, content.WithLabels(info.Labels)); err != nil {
		return nil, fmt.Errorf("write the signed manifest of %s: %w", name, err)
	}
	old := img.Target.Digest
	img.Target = desc
	if _, err := is.Update(ctx, img, "target"); err != nil {
		return nil, fmt.Errorf("point %s at its signed manifest: %w", name, err)
	}
	res.Digest = desc.Digest.String()
	// CRI names an image by its ID (its config's digest) too, and a
	// restore through CRI reads the manifest that record points at: it
	// follows the signed manifest, as a pull of it through CRI would move
	// it. Other names of the unsigned manifest are left as they are.
	if id, err := is.Get(ctx, m.Config.Digest.String()); err == nil && id.Target.Digest == old {
		id.Target = desc
		if _, err := is.Update(ctx, id, "target"); err != nil {
			return nil, fmt.Errorf("point CRI's record %s of %s at its signed manifest: %w", id.Name, name, err)
		}
		res.Moved = append(res.Moved, id.Name)
	}
	return res, nil
}
