package weights

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"hash"
	"math/big"
	"os"
	"strings"
	"time"
)

// A pod's service account is not something CRI knows: the kubelet gives
// containerd the pod's namespace, name and uid, and none of its spec. The
// one proof of the service account on the node is the token the kubelet
// mounts at ServiceAccountDir: a JWT the API server signed, bound to the
// pod (its claims name the namespace, the pod's uid and the account).
// Its contents alone prove nothing, since a pod may mount any volume of
// its own at that path, so the service checks the signature against the
// cluster's keys (serve --sa-keys) and the binding against the pod that
// CRI vouches for.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// tokenSkew is how far the node's clock may be from the API server's.
const tokenSkew = time.Minute

// ReadSAKeys reads PEM public keys (PKIX "PUBLIC KEY" or PKCS#1 "RSA
// PUBLIC KEY" blocks: the API server's --service-account-key-file, which
// kubeadm writes to /etc/kubernetes/pki/sa.pub).
func ReadSAKeys(file string) ([]crypto.PublicKey, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("service account keys: %w", err)
	}
	var keys []crypto.PublicKey
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		var k any
		switch blk.Type {
		case "PUBLIC KEY":
			k, err = x509.ParsePKIXPublicKey(blk.Bytes)
		case "RSA PUBLIC KEY":
			k, err = x509.ParsePKCS1PublicKey(blk.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("service account keys in %s: %v", file, err)
		}
		switch k.(type) {
		case *rsa.PublicKey, *ecdsa.PublicKey:
			keys = append(keys, k)
		default:
			return nil, fmt.Errorf("service account keys in %s: a %T key: the API server signs with RSA or ECDSA keys", file, k)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("service account keys: %s holds no PEM public key (want the API server's --service-account-key-file, e.g. /etc/kubernetes/pki/sa.pub)", file)
	}
	return keys, nil
}

// saClaims are the claims of a bound service account token.
type saClaims struct {
	Exp int64 `json:"exp"`
	Nbf int64 `json:"nbf"`
	K8s struct {
		Namespace string `json:"namespace"`
		Pod       struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"pod"`
		ServiceAccount struct {
			Name string `json:"name"`
		} `json:"serviceaccount"`
	} `json:"kubernetes.io"`
}

// verifyToken returns the service account of c's pod from its token:
// signed by one of keys, in date, and bound to c's pod (namespace and
// uid as CRI gave them).
func verifyToken(c Container, keys []crypto.PublicKey, now time.Time) (string, error) {
	if c.Token == "" {
		return "", fmt.Errorf("no token at %s", ServiceAccountDir)
	}
	if len(keys) == 0 {
		return "", fmt.Errorf("the service verifies no tokens: start it with --sa-keys")
	}
	var cl saClaims
	if err := verifyJWT(c.Token, keys, &cl); err != nil {
		return "", fmt.Errorf("token at %s: %v", ServiceAccountDir, err)
	}
	switch {
	case cl.Exp == 0 || now.After(time.Unix(cl.Exp, 0).Add(tokenSkew)):
		return "", fmt.Errorf("token at %s has expired", ServiceAccountDir)
	case cl.Nbf != 0 && now.Add(tokenSkew).Before(time.Unix(cl.Nbf, 0)):
		return "", fmt.Errorf("token at %s is not valid yet", ServiceAccountDir)
	case cl.K8s.Pod.UID == "":
		return "", fmt.Errorf("token at %s is not bound to a pod (a legacy secret token)", ServiceAccountDir)
	case cl.K8s.Namespace != c.PodNamespace || cl.K8s.Pod.UID != c.PodUID:
		return "", fmt.Errorf("token at %s is another pod's (%s/%s, uid %s)", ServiceAccountDir, cl.K8s.Namespace, cl.K8s.Pod.Name, cl.K8s.Pod.UID)
	case cl.K8s.ServiceAccount.Name == "":
		return "", fmt.Errorf("token at %s names no service account", ServiceAccountDir)
	}
	return cl.K8s.ServiceAccount.Name, nil
}

// verifyJWT checks a compact JWS's signature (RS256, ES256, ES384 or
// ES512, as the API server signs) with any of keys and decodes its claims.
func verifyJWT(token string, keys []crypto.PublicKey, claims any) error {
	parts := strings.Split(strings.TrimSpace(token), ".")
	if len(parts) != 3 {
		return fmt.Errorf("not a JWT")
	}
	dec := base64.RawURLEncoding
	var hdr struct {
		Alg string `json:"alg"`
	}
	hb, err := dec.DecodeString(parts[0])
	if err == nil {
		err = json.Unmarshal(hb, &hdr)
	}
	if err != nil {
		return fmt.Errorf("bad JWT header: %v", err)
	}
	sig, err := dec.DecodeString(parts[2])
	if err != nil {
		return fmt.Errorf("bad JWT signature encoding: %v", err)
	}
	var h hash.Hash
	var ch crypto.Hash
	switch hdr.Alg {
	case "RS256", "ES256":
		h, ch = sha256.New(), crypto.SHA256
	case "ES384":
		h, ch = sha512.New384(), crypto.SHA384
	case "ES512":
		h, ch = sha512.New(), crypto.SHA512
	default:
		return fmt.Errorf("signed with %q: only RS256, ES256, ES384 and ES512 are taken", hdr.Alg)
	}
	h.Write([]byte(parts[0] + "." + parts[1]))
	sum := h.Sum(nil)
	ok := false
	for _, k := range keys {
		switch k := k.(type) {
		case *rsa.PublicKey:
			ok = hdr.Alg == "RS256" && rsa.VerifyPKCS1v15(k, ch, sum, sig) == nil
		case *ecdsa.PublicKey:
			n := (k.Curve.Params().BitSize + 7) / 8
			ok = hdr.Alg == map[int]string{32: "ES256", 48: "ES384", 66: "ES512"}[n] && len(sig) == 2*n &&
				ecdsa.Verify(k, sum, new(big.Int).SetBytes(sig[:n]), new(big.Int).SetBytes(sig[n:]))
		}
		if ok {
			break
		}
	}
	if !ok {
		return fmt.Errorf("signature does not verify with the service account keys (--sa-keys)")
	}
	cb, err := dec.DecodeString(parts[1])
	if err == nil {
		err = json.Unmarshal(cb, claims)
	}
	if err != nil {
		return fmt.Errorf("bad JWT claims: %v", err)
	}
	return nil
}
