package checkpoint

import (
	"encoding/json"
	"reflect"
	"testing"

	"rekindle.local/oci-checkpoint/pkg/annotations"
	"rekindle.local/oci-checkpoint/pkg/hostinfo"
)

func TestStandardAnnotations(t *testing.T) {
	full := Standard{
		ContainerName: "engine", Pod: "llm-0", PodID: "6f1c", PodNamespace: "serving",
		BaseImage: "docker.io/library/sglang:v0.5", BaseDigest: "sha256:abcd",
		Engine: "rekindle-oci-checkpoint", EngineVersion: "v1.2-3-gdeadbee",
		RuntimeName: "runc", RuntimeVersion: "1.5.2+rekindle",
		CRIU: "4.2.1", Kernel: "6.18.0-1-amd64",
		Runtime: hostinfo.Runtime{Arch: "amd64", RuncVersion: "1.5.2+rekindle", CgroupVersion: "v2", Distribution: "debian", DistroVersion: "12"},
	}
	for _, tc := range []struct {
		name string
		in   Standard
		want map[string]string
	}{
		{"every fact", full, map[string]string{
			"org.criu.checkpoint.container.name":            "engine",
			"org.criu.checkpoint.pod.name":                  "llm-0",
			"org.criu.checkpoint.pod.id":                    "6f1c",
			"org.criu.checkpoint.pod.namespace":             "serving",
			"org.criu.checkpoint.engine.name":               "rekindle-oci-checkpoint",
			"org.criu.checkpoint.engine.version":            "v1.2-3-gdeadbee",
			"org.criu.checkpoint.rootfsImageName":           "docker.io/library/sglang:v0.5",
			"org.criu.checkpoint.rootfsImageUserRequested":  "docker.io/library/sglang:v0.5",
			"org.criu.checkpoint.rawImageName":              "docker.io/library/sglang:v0.5",
			"org.criu.checkpoint.rootfsImageID":             "sha256:abcd",
			"org.criu.checkpoint.runtime.name":              "runc",
			"org.criu.checkpoint.runtime.version":           "1.5.2+rekindle",
			"org.criu.checkpoint.criu.version":              "4.2.1",
			"org.criu.checkpoint.host.arch":                 "amd64",
			"org.criu.checkpoint.host.kernel":               "6.18.0-1-amd64",
			"org.criu.checkpoint.cgroup.version":            "v2",
			"org.criu.checkpoint.distribution.name":         "debian",
			"org.criu.checkpoint.distribution.version":      "12",
			"io.podman.annotations.checkpoint.name":         "engine",
			"io.podman.annotations.checkpoint.runtime.name": "runc",
		}},
		// A nerdctl container is in no pod; a host without runc on PATH
		// and an unknown distribution: those keys are left out, not empty.
		{"no pod, unknown runtime", Standard{
			ContainerName: "engine", BaseImage: "rekindle.local/cpu-engine:latest", BaseDigest: "sha256:ef01",
			Engine: "rekindle-oci-checkpoint", RuntimeName: "runc", CRIU: "4.2.1", Kernel: "6.1.0",
			Runtime: hostinfo.Runtime{Arch: "arm64", CgroupVersion: "v1"},
		}, map[string]string{
			"org.criu.checkpoint.container.name":            "engine",
			"org.criu.checkpoint.engine.name":               "rekindle-oci-checkpoint",
			"org.criu.checkpoint.rootfsImageName":           "rekindle.local/cpu-engine:latest",
			"org.criu.checkpoint.rootfsImageUserRequested":  "rekindle.local/cpu-engine:latest",
			"org.criu.checkpoint.rawImageName":              "rekindle.local/cpu-engine:latest",
			"org.criu.checkpoint.rootfsImageID":             "sha256:ef01",
			"org.criu.checkpoint.runtime.name":              "runc",
			"org.criu.checkpoint.criu.version":              "4.2.1",
			"org.criu.checkpoint.host.arch":                 "arm64",
			"org.criu.checkpoint.host.kernel":               "6.1.0",
			"org.criu.checkpoint.cgroup.version":            "v1",
			"io.podman.annotations.checkpoint.name":         "engine",
			"io.podman.annotations.checkpoint.runtime.name": "runc",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.in.Annotations()
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("annotations:\n got  %v\n want %v", got, tc.want)
			}
			// Every key is one restorers recognise as a checkpoint image's.
			if !annotations.IsCheckpoint(got) {
				t.Errorf("IsCheckpoint(%v) = false", got)
			}
		})
	}
}

func TestAnnotateSpecKeepsTheRest(t *testing.T) {
	spec := `{"ociVersion":"1.2.0","process":{"args":["python3","server.py"]},"annotations":{"nerdctl/name":"engine"},"x-unknown":{"kept":true}}`
	out, err := annotateSpec([]byte(spec), map[string]string{"org.criu.checkpoint.criu.version": "4.2.1"})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"ociVersion": "1.2.0",
		"process":    map[string]any{"args": []any{"python3", "server.py"}},
		"annotations": map[string]any{
			"nerdctl/name":                     "engine",
			"org.criu.checkpoint.criu.version": "4.2.1",
		},
		"x-unknown": map[string]any{"kept": true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("annotated spec:\n got  %v\n want %v", got, want)
	}

	// A spec without annotations gets them; one that is not JSON is refused.
	out, err = annotateSpec([]byte(`{"ociVersion":"1.2.0"}`), map[string]string{"k": "v"})
	if err != nil || string(out) != `{"annotations":{"k":"v"},"ociVersion":"1.2.0"}` {
		t.Errorf("annotateSpec without annotations = %s, %v", out, err)
	}
	if _, err := annotateSpec([]byte("not json"), nil); err == nil {
		t.Error("annotateSpec accepted a spec that is not JSON")
	}
}
