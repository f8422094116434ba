// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/snapshots"
)

func TestReadHost(t *testing.T) {
	proc := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		p := filepath.Join(proc, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cpuinfo", "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu sse4_2 avx2\n\n"+
		"processor\t: 1\nvendor_id\t: GenuineIntel\nflags\t\t: fpu sse4_2 avx2 avx512f\n")
	write("driver/nvidia/version", "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build\n")
	write("driver/nvidia/gpus/0000:01:00.0/information", "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\nDevice Minor: \t 0\n")
	write("driver/nvidia/gpus/0000:02:00.0/information", "Model: \t\t NVIDIA H100 80GB HBM3\nDevice Minor: \t 1\n")

	h := ReadHost(proc)
	if h.CPUVendor != "GenuineIntel" || !h.CPUFlags["avx2"] || h.CPUFlags["avx512f"] {
		t.Errorf("CPU %q flags %v: want the first processor's", h.CPUVendor, h.CPUFlags)
	}
	if h.Driver != "580.95.05" {
		t.Errorf("driver = %q", h.Driver)
	}
	if want := []string{"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"}; !slices.Equal(h.GPUModels, want) {
		t.Errorf("GPUs = %q, want %q", h.GPUModels, want)
	}
	if h.GPUMinors[0] != "NVIDIA H100 80GB HBM3" || h.GPUMinors[1] != "NVIDIA H100 80GB HBM3" || len(h.GPUMinors) != 2 {
		t.Errorf("GPU minors = %v, want 0 and 1", h.GPUMinors)
	}

	if h := ReadHost(t.TempDir()); h.CPUVendor != "" || len(h.CPUFlags) != 0 || h.GPUModels != nil || h.Driver != "" {
		t.Errorf("empty proc: %+v", h)
	}
}

func TestPreflight(t *testing.T) {
	host := Host{
		CPUVendor: "GenuineIntel",
		CPUFlags:  map[string]bool{"sse4_2": true, "avx2": true},
		GPUModels: []string{"NVIDIA H100"},
		Driver:    "580.95.05",
	}
	for _, tc := range []struct {
		name string
		ann  map[string]string
		want []string // one substring per reason
	}{
		{name: "nothing recorded"},
		{name: "same host", ann: map[string]string{AnnotationCPUVendor: "GenuineIntel", AnnotationCPUFlags: "sse4_2,avx2",
			AnnotationGPUCount: "1", AnnotationGPUModel: "NVIDIA H100", AnnotationDriver: "580.95.05"}},
		{name: "newer driver here", ann: map[string]string{AnnotationGPUCount: "1", AnnotationDriver: "580.9"}},
		{name: "missing CPU flags", ann: map[string]string{AnnotationCPUFlags: "sse4_2,avx512f,avx9000"},
			want: []string{"lacks avx512f, avx9000"}},
		{name: "other CPU vendor", ann: map[string]string{AnnotationCPUVendor: "AuthenticAMD"},
			want: []string{"AuthenticAMD CPU, this host has a GenuineIntel CPU"}},
		{name: "too few GPUs", ann: map[string]string{AnnotationGPUCount: "2"},
			want: []string{"state of 2 GPU(s), this host has 1"}},
		{name: "other GPU model", ann: map[string]string{AnnotationGPUCount: "1", AnnotationGPUModel: "NVIDIA B200"},
			want: []string{"checkpointed on NVIDIA B200, this host has NVIDIA H100"}},
		{name: "older driver here", ann: map[string]string{AnnotationGPUCount: "1", AnnotationDriver: "580.159.04"},
			want: []string{"driver 580.95.05 here is older than 580.159.04"}},
		{name: "GPU facts without GPU state", ann: map[string]string{AnnotationGPUCount: "0", AnnotationGPUModel: "NVIDIA B200"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Preflight(tc.ann, host)
			if len(got) != len(tc.want) {
				t.Fatalf("reasons %q, want %d", got, len(tc.want))
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("reason %q should contain %q", got[i], tc.want[i])
				}
			}
		})
	}
	if got := Preflight(map[string]string{AnnotationGPUCount: "1"}, Host{}); len(got) != 1 {
		t.Errorf("GPU state on a host without GPUs: reasons %q", got)
	}
}

func TestPreflightError(t *testing.T) {
	err := error(&PreflightError{Image: "ckpt:1", Reasons: []string{"a", "b"}})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("%v is not a failed precondition", err)
	}
	if want := "checkpoint image ckpt:1 cannot be restored on this host: a; b"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if !WantsColdFallback(map[string]string{AnnotationFallback: "cold"}) || WantsColdFallback(map[string]string{AnnotationFallback: "none"}) || WantsColdFallback(nil) {
		t.Error("WantsColdFallback")
	}
	e := FallbackEvent("c1", "base:1", "ckpt:1", []string{"a", "b"})
	if e.ID != "c1" || e.Image != "base:1" || e.Labels["checkpoint.image"] != "ckpt:1" || e.Labels["fallback"] != "cold" || e.Labels["reasons"] != "a; b" {
		t.Errorf("fallback event %+v", e)
	}
}

// fakeImages is an image store holding images by name, for Get.
type fakeImages struct {
	images.Store
	byName map[string]images.Image
}

func (f fakeImages) Get(_ context.Context, name string) (images.Image, error) {
	if img, ok := f.byName[name]; ok {
		return img, nil
	}
	return images.Image{}, errdefs.ErrNotFound
}

// restorerFor returns a Restorer over one checkpoint image named "ckpt"
// with manifest annotations ann, on a host whose CPU has no flags, and whose
// snapshotters are unknown: a restore that gets past the preflight fails
// with ErrNotFound when it asks for one.
func restorerFor(t *testing.T, ann map[string]string) *Restorer {
	t.Helper()
	return restorerWith(t, ann, nil)
}

// restorerWith is restorerFor with edit applied to the manifest before it
// is stored (signing it, say).
func restorerWith(t *testing.T, ann map[string]string, edit func(*ocispec.Manifest)) *Restorer {
	t.Helper()
	cs := newStore(t)
	cfg := putJSON(t, cs, ocispec.MediaTypeImageConfig, ocispec.Image{
		Platform: platforms.DefaultSpec(),
		RootFS:   ocispec.RootFS{Type: "layers"},
	})
	layer := putBlob(t, cs, ocispec.MediaTypeImageLayer, makeTar(t, nil))
	a := map[string]string{"org.criu.checkpoint.container.name": "engine"}
	maps.Copy(a, ann)
	manifest := ocispec.Manifest{
		MediaType: ocispec.MediaTypeImageManifest, Config: cfg, Layers: []ocispec.Descriptor{layer}, Annotations: a,
	}
	if edit != nil {
		edit(&manifest)
	}
	m := putJSON(t, cs, ocispec.MediaTypeImageManifest, manifest)
	return &Restorer{
		Images:      fakeImages{byName: map[string]images.Image{"ckpt": {Name: "ckpt", Target: m}}},
		Content:     cs,
		Host:        func() Host { return Host{CPUFlags: map[string]bool{}} },
		Snapshotter: func(string) snapshots.Snapshotter { return nil },
		Policy:      &Policy{patterns: []string{"docker.io/library/ckpt"}},
	}
}

func TestPrepareRefusesBeforeAnyWork(t *testing.T) {
	ctx := context.Background()
	c := containers.Container{ID: "c1", Image: "ckpt", Snapshotter: "overlayfs"}

	r := restorerFor(t, map[string]string{AnnotationCPUFlags: "avx9000"})
	res, err := r.Prepare(ctx, c)
	var perr *PreflightError
	if res != nil || !errors.As(err, &perr) || !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Prepare = %+v, %v; want a PreflightError", res, err)
	}
	for _, want := range []string{"ckpt cannot be restored on this host", "lacks avx9000", AnnotationFallback + "=cold"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q should contain %q", err, want)
		}
	}
	if len(r.inFlight.n) != 0 {
		t.Errorf("a refused restore is left in flight: %v", r.inFlight.n)
	}

	// With the fallback, Prepare goes on to set up the cold start, as far
	// as the snapshotter this test lacks.
	r = restorerFor(t, map[string]string{AnnotationCPUFlags: "avx9000", AnnotationFallback: FallbackCold})
	if _, err := r.Prepare(ctx, c); !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "snapshotter") {
		t.Fatalf("Prepare with a cold fallback: %v; want it to get as far as the snapshotter", err)
	}
	if len(r.inFlight.n) != 0 {
		t.Errorf("a failed cold start is left in flight: %v", r.inFlight.n)
	}
}

func TestPrepareColdAfterAFailedRestore(t *testing.T) {
	ctx := context.Background()
	c := containers.Container{ID: "c1", Image: "ckpt", Snapshotter: "overlayfs"}
	failure := errors.New("criu failed: type RESTORE errno 0")

	r := restorerFor(t, nil)
	if _, err := r.PrepareCold(ctx, c, failure); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "does not ask for a cold start") {
		t.Fatalf("PrepareCold of an image without the fallback: %v", err)
	}
	r = restorerFor(t, map[string]string{AnnotationFallback: FallbackCold})
	if _, err := r.PrepareCold(ctx, c, failure); !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "snapshotter") {
		t.Fatalf("PrepareCold: %v; want it to get as far as the snapshotter", err)
	}
	if len(r.inFlight.n) != 0 {
		t.Errorf("a failed cold start is left in flight: %v", r.inFlight.n)
	}
	c.Image = "plain"
	if _, err := r.PrepareCold(ctx, c, failure); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("PrepareCold of a container whose image is unknown: %v", err)
	}
}
