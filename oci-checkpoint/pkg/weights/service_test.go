package weights

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// testSet writes n safetensors files of size data bytes each into a
// temporary directory and returns it.
func testSet(t *testing.T, n, data int) string {
	t.Helper()
	dir := t.TempDir()
	for i := range n {
		b := safetensors(fmt.Sprintf(`{"w":{"dtype":"U8","shape":[%d],"data_offsets":[0,%d]}}`, data, data), data)
		for j := range data {
			b[len(b)-data+j] = byte(i + j*7)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("part-%d.safetensors", i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func testService(t *testing.T, root string, quota int64) *Service {
	t.Helper()
	s, err := Open(Config{Root: root, StatePath: filepath.Join(root, "state.json"), CDIDir: filepath.Join(root, "cdi"),
		Hook: []string{"/usr/local/bin/rekindle-weights"}, Quota: quota, ChunkSize: 64 << 10, Readers: 4})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestLoadFillsInPlace(t *testing.T) {
	src := testSet(t, 3, 300_000) // not a multiple of the chunk or the alignment
	root := t.TempDir()
	s := testService(t, root, 0)
	dir := filepath.Join(root, "sets", "m")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var before unix.Stat_t
	unix.Stat(dir, &before)
	st, err := s.Load(LoadRequest{Name: "m", Paths: []string{src}})
	if err != nil {
		t.Fatal(err)
	}
	if st.State != StateLoaded || len(st.Manifest.Files) != 3 || st.Loads != 1 {
		t.Fatalf("status %+v", st)
	}
	for _, f := range st.Manifest.Files {
		a, _ := os.ReadFile(filepath.Join(src, f.Name))
		b, _ := os.ReadFile(filepath.Join(dir, f.Name))
		if string(a) != string(b) {
			t.Errorf("%s differs from its source", f.Name)
		}
		if fi, _ := os.Stat(filepath.Join(dir, f.Name)); fi.Mode().Perm() != 0o444 {
			t.Errorf("%s has mode %v", f.Name, fi.Mode())
		}
	}
	var after unix.Stat_t
	unix.Stat(dir, &after)
	if before.Ino != after.Ino {
		t.Error("the set's directory was replaced: bind mounts of it would go stale")
	}
	// The CDI spec names the set and passes the library's validation.
	spec, err := cdi.ReadSpec(filepath.Join(root, "cdi", CDISpecName), 0)
	if err != nil {
		t.Fatal(err)
	}
	d := spec.GetDevice("m")
	if d == nil || d.ContainerEdits.Mounts[0].HostPath != dir || d.ContainerEdits.Hooks[0].Args[len(d.ContainerEdits.Hooks[0].Args)-1] != "m" {
		t.Fatalf("CDI device for m: %+v", d)
	}
}

func TestOpenAdoptsLoadedSets(t *testing.T) {
	src := testSet(t, 2, 10_000)
	root := t.TempDir()
	s := testService(t, root, 0)
	for _, n := range []string{"kept", "half"} {
		if _, err := s.Load(LoadRequest{Name: n, Paths: []string{src}, Allow: []string{"containerd:default/eng-*"}, SetAllow: true}); err != nil {
			t.Fatal(err)
		}
	}
	sets := filepath.Join(root, "sets")
	// "half": a load killed before its manifest; a stray partial file in "kept".
	os.Remove(filepath.Join(sets, "half", ManifestName))
	os.WriteFile(filepath.Join(sets, "kept", partialPrefix+"x"), []byte("x"), 0o600)
	// "orphan": loaded by a run whose state file is lost.
	os.MkdirAll(filepath.Join(sets, "orphan"), 0o755)
	writeFileAtomic(filepath.Join(sets, "orphan", ManifestName), []byte(`{"name":"orphan","files":[],"sources":["/x"]}`), 0o444)

	s2 := testService(t, root, 0)
	for _, tc := range []struct {
		name, state string
		files       int
		allow       string
		allowKnown  bool
	}{
		{"kept", StateLoaded, 3, "containerd:default/eng-*", true},
		{"half", StateKnown, 0, "containerd:default/eng-*", true},
		// Its manifest keeps no allow list: not known, so it refuses all.
		{"orphan", StateLoaded, 1, "", false},
	} {
		st, err := s2.Status(tc.name)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		ents, _ := os.ReadDir(st.Dir)
		if st.State != tc.state || st.Loads != 0 || len(ents) != tc.files || strings.Join(st.Allow, ",") != tc.allow || st.AllowKnown != tc.allowKnown {
			t.Errorf("%s: state %s loads %d files %d allow %v (known %v); want %s 0 %d %s (%v)", tc.name, st.State, st.Loads, len(ents), st.Allow, st.AllowKnown,
				tc.state, tc.files, tc.allow, tc.allowKnown)
		}
	}
}

func TestConcurrentLoadsReadOnce(t *testing.T) {
	src := testSet(t, 2, 100_000)
	s := testService(t, t.TempDir(), 0)
	var reads atomic.Int32
	s.readHook = func(string) {
		reads.Add(1)
		time.Sleep(200 * time.Millisecond) // the others arrive while it loads
	}
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = s.Load(LoadRequest{Name: "m", Paths: []string{src}})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("load %d: %v", i, err)
		}
	}
	st, _ := s.Status("m")
	if reads.Load() != 1 || st.Loads != 1 || st.State != StateLoaded {
		t.Fatalf("%d reads, load counter %d, state %s; want 1, 1, loaded", reads.Load(), st.Loads, st.State)
	}
	// A load from other files while loaded is refused, not coalesced.
	other := testSet(t, 1, 10)
	if _, err := s.Load(LoadRequest{Name: "m", Paths: []string{other}}); err == nil || !strings.Contains(err.Error(), "evict it first") {
		t.Fatalf("load from other files: %v", err)
	}
}

func TestQuotaAndBadFilesLeaveNothing(t *testing.T) {
	src := testSet(t, 2, 1000)
	root := t.TempDir()
	s := testService(t, root, 3000)
	if _, err := s.Load(LoadRequest{Name: "a", Paths: []string{filepath.Join(src, "part-0.safetensors")}}); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.safetensors")
	os.WriteFile(bad, []byte("not weights at all"), 0o644)
	for _, tc := range []struct {
		name  string
		paths []string
		want  string
	}{
		{"over quota", []string{src}, "of the 2.9 KiB quota is in use"},
		{"not safetensors", []string{bad}, "bad.safetensors is not a valid safetensors file"},
		{"missing file", []string{"/no/such.safetensors"}, "/no/such.safetensors"},
		{"unknown set without files", nil, "not known on this host"},
	} {
		_, err := s.Load(LoadRequest{Name: "b", Paths: tc.paths})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
		if _, err := os.Stat(filepath.Join(root, "sets", "b")); err == nil {
			t.Errorf("%s: left the set's directory", tc.name)
		}
		if _, err := s.Status("b"); err == nil {
			t.Errorf("%s: left the set known", tc.name)
		}
	}
}

func TestEvictRefusedWhileMapped(t *testing.T) {
	src := testSet(t, 1, 50_000)
	s := testService(t, t.TempDir(), 0)
	st, err := s.Load(LoadRequest{Name: "m", Paths: []string{src}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(st.Dir, "part-0.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ, unix.MAP_SHARED)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	st, _ = s.Status("m")
	if len(st.MappedBy) != 1 || st.MappedBy[0] != os.Getpid() {
		t.Errorf("mapped by %v, want this process %d", st.MappedBy, os.Getpid())
	}
	_, err = s.Evict("m", false)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("mapped by pid(s) %d", os.Getpid())) {
		t.Fatalf("evict while mapped: %v", err)
	}
	if st, _ := s.Status("m"); st.State != StateLoaded {
		t.Fatalf("refused evict changed the state to %s", st.State)
	}
	unix.Munmap(m)
	if _, err := s.Evict("m", false); err != nil {
		t.Fatalf("evict after unmap: %v", err)
	}
	ents, _ := os.ReadDir(st.Dir)
	if st, _ := s.Status("m"); st.State != StateKnown || len(ents) != 0 {
		t.Fatalf("after evict: state %s, %d files", st.State, len(ents))
	}
}
