package hostinfo

import (
	"os"
	"slices"
	"testing"

	"rekindle.local/contract/rules"
)

// TestRestoreRulesVector runs the restore rules' vector (the contract
// module's), which containerd's restore preflight runs too.
func TestRestoreRulesVector(t *testing.T) {
	cases, err := rules.Vector()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			vh := tc.Host
			h := Host{arch: vh.Arch, CPUVendor: vh.CPUVendor, CPUFlags: vh.CPUFlags, CRIU: vh.CRIU, Driver: vh.Driver}
			for _, m := range vh.GPUs {
				h.GPUs = append(h.GPUs, GPU{Model: m})
			}
			problems, _ := Check(tc.Annotations, h)
			var kinds []string
			for _, p := range problems {
				if !slices.Contains(kinds, p.What) {
					kinds = append(kinds, p.What)
				}
			}
			slices.Sort(kinds)
			want := slices.Clone(tc.Refused)
			slices.Sort(want)
			if !slices.Equal(kinds, want) {
				t.Errorf("refused %q, want %q (problems: %v)", kinds, want, problems)
			}
		})
	}
}

// TestCheckLooksAtAllFlags: a flag recorded by another tool than this
// oci-checkpoint (not in ISAFlags) is looked for among all of the host's,
// as containerd's preflight does.
func TestCheckLooksAtAllFlags(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/cpuinfo", []byte("vendor_id\t: GenuineIntel\nmodel name\t: X\nflags\t\t: fpu avx2 rekindle_test_isa\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := Proc
	Proc = dir
	t.Cleanup(func() { Proc = old })
	here := Read()
	if p, _ := Check(map[string]string{"org.rekindle.cpu.flags": "avx2,rekindle_test_isa"}, here); len(p) != 0 {
		t.Errorf("refused a flag the host has: %v", p)
	}
	if p, _ := Check(map[string]string{"org.rekindle.cpu.flags": "avx2,rekindle_other_isa"}, here); len(p) != 1 {
		t.Errorf("want the missing flag refused, got %v", p)
	}
}
