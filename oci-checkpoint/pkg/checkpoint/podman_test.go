package checkpoint

import (
	"encoding/json"
	"testing"
	"time"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/opencontainers/go-digest"
)

func TestConfigDumpReadsAsBoth(t *testing.T) {
	at := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	spec := []byte(`{"mounts":[{"destination":"/dev/shm","type":"tmpfs","options":["nosuid","size=131072k"]}]}`)
	cfg := digest.Digest("sha256:5e9961496767ae4083875a53392226211d00562e46cf20f775057ec1f2719964")
	out, err := json.Marshal(&configDump{
		ContainerConfig: crmetadata.ContainerConfig{
			ID: "e9bb", Name: "engine", RootfsImage: "rekindle.local/cpu-engine:latest",
			RootfsImageName: "rekindle.local/cpu-engine:latest", OCIRuntime: "io.containerd.runc.v2", CheckpointedAt: at,
		},
		podmanConfig: newPodmanConfig(spec, "rekindle.local/cpu-engine:latest", cfg),
	})
	if err != nil {
		t.Fatal(err)
	}

	// checkpointctl (and containerd's restore) read their fields as before.
	var cc crmetadata.ContainerConfig
	if err := json.Unmarshal(out, &cc); err != nil {
		t.Fatal(err)
	}
	if cc.ID != "e9bb" || cc.Name != "engine" || cc.RootfsImageName != "rekindle.local/cpu-engine:latest" || !cc.CheckpointedAt.Equal(at) {
		t.Errorf("checkpointctl's view of config.dump: %+v", cc)
	}

	// Podman's keys, by the JSON names of libpod's ContainerConfig.
	var pc map[string]any
	if err := json.Unmarshal(out, &pc); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{
		"id":              "e9bb",
		"name":            "engine",
		"rootfsImageName": "rekindle.local/cpu-engine:latest",
		"rootfsImageID":   "5e9961496767ae4083875a53392226211d00562e46cf20f775057ec1f2719964",
		"RawImageName":    "rekindle.local/cpu-engine:latest",
		"createNetNS":     true,
		"networkMode":     "none",
		"shmSize":         float64(128 << 20),
		"passwd":          false,
	} {
		if pc[k] != want {
			t.Errorf("config.dump %q = %v, want %v", k, pc[k], want)
		}
	}
}

func TestShmSize(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want int64
	}{
		{`{"mounts":[{"destination":"/dev/shm","options":["size=65536k"]}]}`, 64 << 20},
		{`{"mounts":[{"destination":"/dev/shm","options":["nosuid","size=1G"]}]}`, 1 << 30},
		{`{"mounts":[{"destination":"/dev/shm","options":["size=4096"]}]}`, 4096},
		{`{"mounts":[{"destination":"/dev/shm","options":["size=50%"]}]}`, defaultShmSize},
		{`{"mounts":[{"destination":"/tmp","options":["size=1m"]}]}`, defaultShmSize},
		{`not json`, defaultShmSize},
	} {
		if got := shmSize([]byte(tc.spec)); got != tc.want {
			t.Errorf("shmSize(%s) = %d, want %d", tc.spec, got, tc.want)
		}
	}
}

func TestWithoutHooks(t *testing.T) {
	out, err := withoutHooks([]byte(`{"ociVersion":"1.2.0","hooks":{"createRuntime":[{"path":"/usr/local/bin/nerdctl"}]},"x-unknown":1}`))
	if err != nil || string(out) != `{"ociVersion":"1.2.0","x-unknown":1}` {
		t.Errorf("withoutHooks = %s, %v", out, err)
	}
	in := `{"ociVersion":"1.2.0"}`
	if out, err := withoutHooks([]byte(in)); err != nil || string(out) != in {
		t.Errorf("withoutHooks of a spec without hooks = %s, %v", out, err)
	}
	if _, err := withoutHooks([]byte("not json")); err == nil {
		t.Error("withoutHooks accepted a spec that is not JSON")
	}
}
