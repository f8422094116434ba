package signature

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"testing"
)

// The vector's payload and signature are those of the documented format,
// the bytes openssl signs and verifies.
func TestTheVectorSignsAndVerifies(t *testing.T) {
	v, err := Vector()
	if err != nil {
		t.Fatal(err)
	}
	if got := string(Payload(v.Manifest)); got != v.Payload {
		t.Fatalf("payload:\n%s\nwant:\n%s", got, v.Payload)
	}
	blk, _ := pem.Decode([]byte(v.PrivateKey))
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key := k.(ed25519.PrivateKey)
	if got := Encode(ed25519.Sign(key, Payload(v.Manifest))); got != v.Signature {
		t.Errorf("signature %s, want %s", got, v.Signature)
	}
	if id, err := KeyID(key.Public().(ed25519.PublicKey)); err != nil || id != v.KeyID {
		t.Errorf("key id %s (%v), want %s", id, err, v.KeyID)
	}
	// The signature's own annotations are not signed.
	signed := v.Manifest
	signed.Annotations = map[string]string{Annotation: v.Signature, AnnotationKey: v.KeyID}
	for k, val := range v.Manifest.Annotations {
		signed.Annotations[k] = val
	}
	if string(Payload(signed)) != v.Payload {
		t.Error("the signature's annotations changed the payload")
	}
}

func TestDecode(t *testing.T) {
	v, _ := Vector()
	if sig, ok := Decode(v.Signature); !ok || len(sig) != ed25519.SignatureSize {
		t.Errorf("Decode(%q) = %d bytes, %v", v.Signature, len(sig), ok)
	}
	for _, bad := range []string{"", "v2:" + v.Signature[3:], "v1:AAAA", "v1:not base64!"} {
		if _, ok := Decode(bad); ok {
			t.Errorf("Decode(%q) accepted", bad)
		}
	}
}

// A field's length prefix keeps one value from reading as two.
func TestFieldsCannotRunTogether(t *testing.T) {
	a := Manifest{Annotations: map[string]string{"k": "v\nannotation 1:x 1:y"}}
	b := Manifest{Annotations: map[string]string{"k": "v", "x": "y"}}
	if string(Payload(a)) == string(Payload(b)) {
		t.Error("two manifests share a payload")
	}
}
