package rules

import (
	_ "embed"
	"encoding/json"
	"fmt"
)

// restoreVector is the restore rules' test vector: annotations and host
// facts, each case giving the kinds of fact that rule the host out.
// oci-checkpoint check and containerd's restore preflight each run every
// case through their own reading of a host (Vector).
//
//go:embed testdata/restore-rules.json
var restoreVector []byte

// VectorHost is a host's facts as the vector gives them.
type VectorHost struct {
	Arch      string   `json:"arch"`
	CPUVendor string   `json:"cpu_vendor"`
	CPUFlags  []string `json:"cpu_flags"`
	CRIU      string   `json:"criu"`
	Driver    string   `json:"driver"`
	GPUs      []string `json:"gpus"`
}

// VectorCase is one case of the vector: its host is the vector's, with the
// fields the case sets over it; Refused lists the kinds of fact (format,
// arch, cpu, criu, gpu, driver) that rule the host out, none when it restores.
type VectorCase struct {
	Name        string
	Host        VectorHost
	Annotations map[string]string
	Refused     []string
}

// Vector returns the vector's cases.
func Vector() ([]VectorCase, error) {
	var v struct {
		Host  VectorHost `json:"host"`
		Cases []struct {
			Name        string            `json:"name"`
			Host        *VectorHost       `json:"host"`
			Annotations map[string]string `json:"annotations"`
			Refused     []string          `json:"refused"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(restoreVector, &v); err != nil {
		return nil, fmt.Errorf("testdata/restore-rules.json: %w", err)
	}
	out := make([]VectorCase, 0, len(v.Cases))
	for _, c := range v.Cases {
		h := v.Host
		if o := c.Host; o != nil {
			if o.Arch != "" {
				h.Arch = o.Arch
			}
			if o.CPUVendor != "" {
				h.CPUVendor = o.CPUVendor
			}
			if o.CPUFlags != nil {
				h.CPUFlags = o.CPUFlags
			}
			if o.CRIU != "" {
				h.CRIU = o.CRIU
			}
			if o.Driver != "" {
				h.Driver = o.Driver
			}
			if o.GPUs != nil {
				h.GPUs = o.GPUs
			}
		}
		out = append(out, VectorCase{Name: c.Name, Host: h, Annotations: c.Annotations, Refused: c.Refused})
	}
	return out, nil
}
