package checkpoint

import (
	"encoding/json"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"rekindle.local/oci-checkpoint/pkg/hostinfo"
	"rekindle.local/oci-checkpoint/pkg/memory"
	"rekindle.local/oci-checkpoint/pkg/phase"
)

// TestJSONSchema: what create, inspect and check, ls and memory print with
// --json is docs/json.md's schema: an object with schema_version, the same
// names for the same things, phases an array everywhere; every field is
// documented there.
func TestJSONSchema(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/json.md")
	if err != nil {
		t.Fatal(err)
	}
	phases := []phase.Timing{{Name: "dump", Seconds: 1}, {Name: "package", Seconds: 2}}
	full := Entry{GPUModel: "m", Driver: "d", CUDA: "c", CPUVendor: "v", CPUModel: "m", Kernel: "k", CRIU: "c", BaseDigest: "sha256:0"}
	for _, tc := range []struct {
		name string
		v    any
		keys string // the document's, sorted
	}{{
		name: "create",
		v:    Result{SchemaVersion: SchemaVersion, OCIArchive: "x.tar", GPUs: []hostinfo.GPU{{UUID: "GPU-1"}}, Phases: phases},
		keys: "annotations base_digest base_image container created digest engine gpus image oci_archive phases schema_version size",
	}, {
		name: "inspect and check",
		v: Report{SchemaVersion: SchemaVersion, Engine: "e", BaseImage: "b", BaseDigest: "sha256:0", Created: "t",
			GPUs: []RecordedGPU{{UUID: "GPU-1", Model: "m"}}, Phases: phases},
		keys: "annotations base_digest base_image checkpoint compression created digest engine gpus image layer_digest layer_size local notes phases problems restorable_here schema_version size",
	}, {
		name: "ls",
		v:    NewListing([]Entry{full}),
		keys: "images schema_version",
	}, {
		name: "ls: an image",
		v:    full,
		keys: "base_digest base_image cpu_model cpu_vendor created criu_version cuda_version digest engine gpu_count gpu_model image kernel nvidia_driver size",
	}, {
		name: "sign",
		v:    SignResult{SchemaVersion: SchemaVersion, Replaced: "k", Moved: []string{"sha256:0"}},
		keys: "digest image key_id moved previous_digest replaced_key_id schema_version",
	}, {
		name: "memory",
		v:    memory.Report{SchemaVersion: SchemaVersion, Processes: []memory.Process{{Mappings: []memory.Mapping{{}}}}},
		keys: "image other_images pages_files_bytes pages_files_zero_bytes processes schema_version",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			var keys []string
			for k := range m {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			if got := strings.Join(keys, " "); got != tc.keys {
				t.Errorf("fields:\n got %s\nwant %s", got, tc.keys)
			}
			if v, ok := m["schema_version"]; ok && v != float64(1) {
				t.Errorf("schema_version = %v, want 1", v)
			}
			if p, ok := m["phases"]; ok && !reflect.DeepEqual(p, []any{
				map[string]any{"name": "dump", "seconds": float64(1)}, map[string]any{"name": "package", "seconds": float64(2)}}) {
				t.Errorf("phases = %v, want an array of {name, seconds} in order", p)
			}
			if g, ok := m["gpus"].([]any); ok {
				if u := g[0].(map[string]any)["uuid"]; u != "GPU-1" {
					t.Errorf("gpus[0].uuid = %v", u)
				}
			}
			for _, k := range keys {
				if !strings.Contains(string(doc), "`"+k+"`") {
					t.Errorf("docs/json.md does not document %s's field %s", tc.name, k)
				}
			}
		})
	}
}
