package checkpoint

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

func TestCheckOutput(t *testing.T) {
	ctx := context.Background()
	cs, err := local.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	manifest := func(m ocispec.Manifest) ocispec.Descriptor {
		raw, _ := json.Marshal(m)
		return putBlob(t, cs, ocispec.MediaTypeImageManifest, raw, nil)
	}
	plain := vectorManifest()
	plain.Annotations = map[string]string{"org.opencontainers.image.title": "plain"}
	is := memImages{
		"rekindle.local/ckpt:old":   {Name: "rekindle.local/ckpt:old", Target: manifest(vectorManifest())},
		"docker.io/library/base:1":  {Name: "docker.io/library/base:1", Target: manifest(plain)},
		"rekindle.local/dangling:1": {Name: "rekindle.local/dangling:1", Target: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString("gone"), Size: 4}},
	}

	dir := t.TempDir()
	exists := filepath.Join(dir, "exists.tar")
	if err := os.WriteFile(exists, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	folder := filepath.Join(dir, "ro")
	if err := os.Mkdir(folder, 0o755); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name    string
		image   string
		archive string
		replace bool
		err     []string // what the error says; none: accepted
	}{
		{name: "a new image", image: "rekindle.local/ckpt:new"},
		{name: "an existing checkpoint image", image: "rekindle.local/ckpt:old",
			err: []string{"image rekindle.local/ckpt:old: already exists", "'oci-checkpoint rm rekindle.local/ckpt:old'", "--replace"}},
		{name: "an existing checkpoint image, --replace", image: "rekindle.local/ckpt:old", replace: true},
		{name: "an image that is no checkpoint", image: "docker.io/library/base:1", replace: true,
			err: []string{"image docker.io/library/base:1: already exists and is not a checkpoint image", "--replace replaces only a checkpoint image"}},
		{name: "an image whose manifest is gone", image: "rekindle.local/dangling:1", replace: true,
			err: []string{"is not a checkpoint image"}},
		{name: "a new archive", archive: filepath.Join(dir, "new.tar")},
		{name: "an archive in a folder that does not exist", archive: filepath.Join(dir, "nosuch", "x.tar"),
			err: []string{"folder " + filepath.Join(dir, "nosuch") + " does not exist", "mkdir -p"}},
		{name: "an archive in a file", archive: filepath.Join(exists, "x.tar"), err: []string{exists + " is not a folder"}},
		{name: "an existing archive", archive: exists,
			err: []string{"--output oci-archive:" + exists + ": already exists", "--replace"}},
		{name: "an existing archive, --replace", archive: exists, replace: true},
		{name: "an archive that is a folder", archive: folder, replace: true, err: []string{"is a folder"}},
		// The image store is not looked at for an archive.
		{name: "an archive named as an image that exists", image: "rekindle.local/ckpt:old", archive: filepath.Join(dir, "old.tar")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Image: tc.image, OCIArchive: tc.archive, Replace: tc.replace}
			err := checkOutput(ctx, cs, is, tc.image, o)
			if len(tc.err) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, s := range tc.err {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
	if len(is) != 3 {
		t.Errorf("the image store changed: %v", is)
	}
}
