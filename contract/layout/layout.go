// Package layout names the files Rekindle's restore keeps on the host for a
// checkpoint image, which containerd's layer applier writes and the restore
// engine (restore/) reads back.
package layout

const (
	// InPlaceIndex is the EROFS image (metadata only) in the snapshot of a
	// checkpoint layer kept in place (annotations.LayerInPlace).
	InPlaceIndex = "layer.erofs"
	// InPlaceBlob is a hard link of the layer's blob in that snapshot: the
	// index's data device.
	InPlaceBlob = "layer.tar"
)
