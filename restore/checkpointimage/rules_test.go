// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"slices"
	"testing"

	"rekindle.local/contract/rules"
)

// TestRestoreRulesVector runs the restore rules' vector, which oci-checkpoint
// check runs too: the preflight and check rule a host in or out alike.
func TestRestoreRulesVector(t *testing.T) {
	cases, err := rules.Vector()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			vh := tc.Host
			h := Host{Arch: vh.Arch, CPUVendor: vh.CPUVendor, CPUFlags: map[string]bool{}, CRIU: vh.CRIU, Driver: vh.Driver, GPUModels: vh.GPUs}
			for _, f := range vh.CPUFlags {
				h.CPUFlags[f] = true
			}
			var kinds []string
			for _, r := range preflight(tc.Annotations, h) {
				if !slices.Contains(kinds, r.kind) {
					kinds = append(kinds, r.kind)
				}
			}
			slices.Sort(kinds)
			want := slices.Clone(tc.Refused)
			slices.Sort(want)
			if !slices.Equal(kinds, want) {
				t.Errorf("refused %q, want %q (%v)", kinds, want, preflight(tc.Annotations, h))
			}
		})
	}
}
