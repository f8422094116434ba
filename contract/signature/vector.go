package signature

import (
	_ "embed"
	"encoding/json"
	"fmt"
)

//go:embed testdata/vector.json
var vectorJSON []byte

// TestVector is a key pair, a manifest, its payload and its signature,
// which oci-checkpoint's signing and containerd's verification both run
// (testdata/vector.json: the commands that made each value are there).
type TestVector struct {
	PrivateKey string   `json:"private_key"` // PEM, PKCS#8
	PublicKey  string   `json:"public_key"`  // PEM, PKIX
	KeyID      string   `json:"key_id"`
	Signature  string   `json:"signature"` // the value of Annotation
	Manifest   Manifest `json:"manifest"`  // unsigned
	Payload    string   `json:"payload"`
}

// Vector returns the test vector.
func Vector() (TestVector, error) {
	var v TestVector
	if err := json.Unmarshal(vectorJSON, &v); err != nil {
		return v, fmt.Errorf("testdata/vector.json: %w", err)
	}
	return v, nil
}
