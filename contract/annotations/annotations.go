// Package annotations names the annotations of a Rekindle checkpoint image
// that oci-checkpoint writes and containerd's restore reads, beside those
// of packages rules (the host facts) and signature. Their meaning is in
// docs/image-format.md.
package annotations

const (
	// Prefix begins every Rekindle annotation.
	Prefix = "org.rekindle."

	// Fallback, on the manifest, says what a host that cannot restore the
	// image does: FallbackCold starts the base image cold instead;
	// FallbackNone, or no annotation, fails the restore.
	Fallback     = Prefix + "restore.fallback"
	FallbackCold = "cold"
	FallbackNone = "none"

	// LayerInPlace, on the checkpoint layer's descriptor, set to
	// LayerInPlaceEROFS, asks the restorer to keep the layer as it is
	// and read it in place through an EROFS index, not to extract it.
	LayerInPlace      = Prefix + "layer.in-place"
	LayerInPlaceEROFS = "erofs"
)
