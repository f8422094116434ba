package checkpoint

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"rekindle.local/oci-checkpoint/pkg/registry"
)

// TestRemoteManifestCutShort: a registry that dies while it sends the
// manifest gives an error naming the registry and the blob, not a bare
// "unexpected EOF".
func TestRemoteManifestCutShort(t *testing.T) {
	body := []byte(`{"schemaVersion": 2, "mediaType": "` + ocispec.MediaTypeImageManifest + `", "config": {}, "layers": []}`)
	dgst := digest.FromBytes(body)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v2/ckpt/manifests/") {
			w.WriteHeader(http.StatusOK) // /v2/
			return
		}
		w.Header().Set("Content-Type", ocispec.MediaTypeImageManifest)
		w.Header().Set("Docker-Content-Digest", dgst.String())
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		if r.Method == http.MethodHead || strings.HasSuffix(r.URL.Path, "/tag") {
			if r.Method != http.MethodHead {
				w.Write(body)
			}
			return
		}
		// By digest: half the bytes, then the connection goes.
		w.Write(body[:len(body)/2])
		w.(http.Flusher).Flush()
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	_, _, err := remoteManifest(context.Background(), host+"/ckpt:tag", registry.Options{HostsDirs: []string{}, DockerConfigDir: t.TempDir()})
	if err == nil {
		t.Fatal("no error from a manifest cut short")
	}
	t.Log(err)
	for _, want := range []string{"registry " + host, "blob " + dgst.String(), "unexpected EOF"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
