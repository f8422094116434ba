package checkpoint

import (
	"rekindle.local/oci-checkpoint/pkg/hostinfo"
	"rekindle.local/oci-checkpoint/pkg/phase"
)

// SchemaVersion is the version of the JSON documents that create,
// inspect, check, ls and memory print with --json (docs/json.md): each
// is an object whose schema_version field holds it. It changes when a
// field is removed or changes meaning; fields are added without.
const SchemaVersion = 1

// Result describes the image written: what create --json prints.
type Result struct {
	SchemaVersion int            `json:"schema_version"`
	Image         string         `json:"image"`
	Digest        string         `json:"digest"` // the manifest's
	Size          int64          `json:"size"`   // the manifest, config and layers
	OCIArchive    string         `json:"oci_archive,omitempty"`
	Container     string         `json:"container"`
	Engine        string         `json:"engine"`
	Created       string         `json:"created"`
	BaseImage     string         `json:"base_image"`
	BaseDigest    string         `json:"base_digest"`
	GPUs          []hostinfo.GPU `json:"gpus"`
	// Phases, in the order they ran, resume or stop included.
	Phases      []phase.Timing    `json:"phases"`
	Annotations map[string]string `json:"annotations"`
}

// Listing is what ls --json prints.
type Listing struct {
	SchemaVersion int     `json:"schema_version"`
	Images        []Entry `json:"images"`
}

// NewListing wraps List's entries.
func NewListing(entries []Entry) Listing {
	return Listing{SchemaVersion: SchemaVersion, Images: entries}
}
