// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"rekindle.local/contract/signature"
)

const (
	// KeysOption and RequireSignatureOption are the containerd options,
	// beside PolicyOption, that make the policy require a signature.
	KeysOption             = `checkpoint_restore_keys in [plugins.'io.containerd.service.v1.tasks-service']`
	RequireSignatureOption = `checkpoint_restore_require_signature in [plugins.'io.containerd.service.v1.tasks-service']`

	// AnnotationSignature is the manifest's signature: "v1:" and the
	// base64 (standard, padded) of an Ed25519 signature of the version 1
	// payload (SignaturePayload).
	AnnotationSignature = signature.Annotation
	// AnnotationSignatureKey names the key that made it: "sha256:" and the
	// hex SHA-256 of the public key's DER (PKIX), as KeyID.
	AnnotationSignatureKey = signature.AnnotationKey
)

// SignaturePayload returns the bytes that a version 1 signature of
// checkpoint manifest m signs, by package signature of Rekindle's contract
// module, which oci-checkpoint signs with: what a restore trusts of the
// manifest, which names all else by digest (the format is described there).
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
func KeyID(pub ed25519.PublicKey) (string, error) { return signature.KeyID(pub) }

// trustedKey is a public key of the policy and the file it was read from.
type trustedKey struct {
	key  ed25519.PublicKey
	file string
}

// RequireSignatures makes p restore only the checkpoint images signed by
// one of the Ed25519 public keys in files (PEM "PUBLIC KEY", as 'openssl
// pkey -pubout' writes them) when require is set. The files are read when
// given, required or not: a file that is not such a key is an error naming
// it and the option. require with no key is an error too: no image could
// restore.
func (p *Policy) RequireSignatures(files []string, require bool) error {
	keys := map[string]trustedKey{}
	for _, f := range files {
		k, err := readPublicKey(f)
		if err != nil {
			return fmt.Errorf("%s: %w: %w", KeysOption, err, errdefs.ErrInvalidArgument)
		}
		id, err := KeyID(k)
		if err != nil {
			return fmt.Errorf("%s: public key %s: %w: %w", KeysOption, f, err, errdefs.ErrInvalidArgument)
		}
		if _, ok := keys[id]; !ok {
			keys[id] = trustedKey{key: k, file: f}
		}
	}
	if require && len(keys) == 0 {
		return fmt.Errorf("%s is true but %s lists no public key, so no checkpoint image could restore: list the signers' public keys (PEM files), or set it false: %w",
			RequireSignatureOption, KeysOption, errdefs.ErrInvalidArgument)
	}
	p.keys, p.requireSignature = keys, require
	return nil
}

func readPublicKey(file string) (ed25519.PublicKey, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("public key: %w", err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("public key %s is not a PEM \"PUBLIC KEY\" file (make one from the signing key with 'openssl pkey -in KEY -pubout -out %s')", file, file)
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("public key %s: %w", file, err)
	}
	ek, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("public key %s is a %T, not an Ed25519 key (checkpoint images are signed with 'openssl genpkey -algorithm ed25519' keys)", file, k)
	}
	return ek, nil
}

// RequiresSignature reports whether p restores only signed images.
func (p *Policy) RequiresSignature() bool { return p != nil && p.requireSignature }

// keyList names p's keys, with their files, for messages.
func (p *Policy) keyList() string {
	if p == nil || len(p.keys) == 0 {
		return "[]"
	}
	var s []string
	for id, k := range p.keys {
		s = append(s, fmt.Sprintf("%s (%s)", id, k.file))
	}
	slices.Sort(s)
	return "[" + strings.Join(s, ", ") + "]"
}

// Verify returns nil when p does not require a signature or when manifest
// m of the checkpoint image called image in messages is signed by one of
// p's keys, and a SignatureError otherwise.
func (p *Policy) Verify(image string, m ocispec.Manifest) error {
	if !p.RequiresSignature() {
		return nil
	}
	e := &SignatureError{Image: image, KeyID: m.Annotations[AnnotationSignatureKey], Keys: p.keyList()}
	value, ok := m.Annotations[AnnotationSignature]
	if !ok {
		e.Problem = Unsigned
		return e
	}
	k, ok := p.keys[e.KeyID]
	if !ok {
		e.Problem = UnknownKey
		return e
	}
	e.KeyFile = k.file
	sig, ok := signature.Decode(value)
	if !ok {
		e.Problem = MalformedSignature
		return e
	}
	if !ed25519.Verify(k.key, SignaturePayload(m), sig) {
		e.Problem = BadSignature
		return e
	}
	return nil
}

// What is wrong with a checkpoint image's signature.
const (
	Unsigned           = "unsigned"
	UnknownKey         = "unknown key"
	MalformedSignature = "malformed signature"
	BadSignature       = "bad signature"
)

// SignatureError is a checkpoint image that a policy requiring a signature
// does not restore.
type SignatureError struct {
	// Image is the checkpoint image, as the client named it.
	Image string
	// Problem is Unsigned, UnknownKey, MalformedSignature or BadSignature.
	Problem string
	// KeyID is the key the image says signed it, KeyFile the policy's file
	// of that key.
	KeyID, KeyFile string
	// Keys lists the policy's keys.
	Keys string
}

// Reason says why the image is not restored, as a preflight reason.
func (e *SignatureError) Reason() string {
	var what string
	switch e.Problem {
	case Unsigned:
		what = "the image is not signed (its manifest has no " + AnnotationSignature + " annotation)"
	case UnknownKey:
		what = fmt.Sprintf("the image is signed by key %q, which is not one of %s (it holds %s)", e.KeyID, KeysOption, e.Keys)
	case MalformedSignature:
		what = fmt.Sprintf("its %s is not a %s Ed25519 signature", AnnotationSignature, signature.Version)
	default:
		what = fmt.Sprintf("its signature by key %s (%s) does not verify: its manifest's descriptors or annotations changed after it was signed", e.KeyID, e.KeyFile)
	}
	return fmt.Sprintf("this host restores only checkpoint images signed by a key of %s (%s is true), and %s", KeysOption, RequireSignatureOption, what)
}

func (e *SignatureError) Error() string {
	var fix string
	switch e.Problem {
	case Unsigned:
		fix = "sign it with a key whose public key that list holds ('oci-checkpoint sign --key KEY " + e.Image + "' where it was made, then push it again)"
	case UnknownKey:
		fix = "add the public key of " + e.KeyID + " to " + KeysOption + " and restart containerd, or sign the image with a key listed there"
	default:
		fix = "take it from its source again, or sign it again where it was made; this is not the image that was signed"
	}
	return fmt.Sprintf("checkpoint image %s may not be restored on this host: %s; to restore it, %s", e.Image, e.Reason(), fix)
}

// Unwrap makes a SignatureError a permission denied.
func (e *SignatureError) Unwrap() error { return errdefs.ErrPermissionDenied }
