// Package signature holds what signs a Rekindle checkpoint image: the
// bytes a signature covers, how a key is named and how a signature is
// written into the manifest's annotations. oci-checkpoint signs with it and
// containerd's restore verifies with it
// (containerd-patches/checkpointimage-restore-only-signed-checkpoint-image).
//
// The signature covers everything a restore trusts in the manifest, and the
// manifest names the rest by digest: the config's and every layer's
// descriptor (media type, digest, size and the descriptor's annotations,
// such as the layer's org.rekindle.layer.in-place) and every manifest
// annotation but the signature's own two. The image's name is not signed:
// a signed image may be pushed, pulled and tagged under any name, and the
// host's name policy judges the name.
//
// The signed bytes, payload version 1, are the lines below, each ended by
// "\n", with one space between fields. A string field is written as its
// length in bytes (decimal), ":" and its bytes, so no value can be read as
// another field; a size is written in decimal.
//
//	rekindle-checkpoint-signature v1
//	config MEDIATYPE DIGEST SIZE
//	config-annotation KEY VALUE          (the config descriptor's, keys sorted)
//	layer MEDIATYPE DIGEST SIZE          (each layer in the manifest's order)
//	layer-annotation KEY VALUE           (that layer descriptor's, keys sorted)
//	annotation KEY VALUE                 (the manifest's, keys sorted, without
//	                                      org.rekindle.signature and
//	                                      org.rekindle.signature.key)
//
// Keys sort by their bytes. The signature is Ed25519 (RFC 8032, no
// pre-hash) over those bytes, stored as the annotation
// org.rekindle.signature = "v1:" + base64 (standard, padded); the key that
// made it is named by org.rekindle.signature.key = "sha256:" + the hex
// SHA-256 of the public key's DER (PKIX SubjectPublicKeyInfo), the same
// DER that a PEM "PUBLIC KEY" file holds:
//
//	openssl genpkey -algorithm ed25519 -out ckpt.key
//	openssl pkey -in ckpt.key -pubout -out ckpt.pub
//	openssl pkey -pubin -in ckpt.pub -outform DER | sha256sum
package signature

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

const (
	// Version is the payload version this package signs and verifies.
	Version = "v1"
	// Annotation holds the signature, AnnotationKey the id of its key.
	Annotation    = "org.rekindle.signature"
	AnnotationKey = "org.rekindle.signature.key"

	header = "rekindle-checkpoint-signature " + Version
)

// Descriptor and Manifest are the parts of an OCI descriptor and image
// manifest that a signature covers.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type Manifest struct {
	Config      Descriptor        `json:"config"`
	Layers      []Descriptor      `json:"layers"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Payload returns the bytes a version 1 signature of m signs.
func Payload(m Manifest) []byte {
	var b bytes.Buffer
	b.WriteString(header + "\n")
	desc := func(kind string, d Descriptor) {
		fmt.Fprintf(&b, "%s %s %s %d\n", kind, field(d.MediaType), field(d.Digest), d.Size)
		writeAnnotations(&b, kind+"-annotation", d.Annotations, nil)
	}
	desc("config", m.Config)
	for _, l := range m.Layers {
		desc("layer", l)
	}
	writeAnnotations(&b, "annotation", m.Annotations, []string{Annotation, AnnotationKey})
	return b.Bytes()
}

func writeAnnotations(b *bytes.Buffer, kind string, ann map[string]string, skip []string) {
	keys := make([]string, 0, len(ann))
	for k := range ann {
		if !slices.Contains(skip, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(b, "%s %s %s\n", kind, field(k), field(ann[k]))
	}
}

// field writes s as its length in bytes, a colon and its bytes.
func field(s string) string { return strconv.Itoa(len(s)) + ":" + s }

// KeyID names public key pub: "sha256:" and the hex SHA-256 of its DER.
func KeyID(pub ed25519.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// Encode writes signature sig as the value of Annotation.
func Encode(sig []byte) string {
	return Version + ":" + base64.StdEncoding.EncodeToString(sig)
}

// Decode reads the value of Annotation; ok is false unless it is a
// version 1 Ed25519 signature.
func Decode(value string) (sig []byte, ok bool) {
	enc, ok := strings.CutPrefix(value, Version+":")
	if !ok {
		return nil, false
	}
	sig, err := base64.StdEncoding.DecodeString(enc)
	return sig, err == nil && len(sig) == ed25519.SignatureSize
}
