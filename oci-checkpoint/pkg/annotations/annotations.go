// Package annotations names the manifest annotations of a Rekindle
// checkpoint image: Rekindle's own org.rekindle.* keys, which other
// runtimes ignore and `oci-checkpoint check` reads to refuse a host before
// any layer is pulled, and the keys restorers look for to tell a
// checkpoint image from any other.
package annotations

import (
	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"

	keys "rekindle.local/contract/annotations"
	"rekindle.local/contract/rules"
	"rekindle.local/contract/signature"
)

const (
	Prefix = keys.Prefix
	// The keys of the host facts and the format, which the restore rules
	// read, are defined with the rules (the contract module's rules
	// package), which containerd's preflight imports too.
	Format     = rules.AnnotationFormat
	Engine     = Prefix + "engine"
	EnginePort = Prefix + "engine.port"
	// EngineVersion is the checkpointed engine's own, e.g. "vllm 0.24.0":
	// a restore maps the engine's files again and needs the same ones.
	EngineVersion = Prefix + "engine.version"
	Created       = Prefix + "checkpoint.created"
	Phases        = Prefix + "checkpoint.phases"
	SourceImage   = Prefix + "checkpoint.base-image"
	CPUVendor     = rules.AnnotationCPUVendor
	CPUModel      = rules.AnnotationCPUModel
	CPUFlags      = rules.AnnotationCPUFlags
	Kernel        = rules.AnnotationKernel
	CRIU          = rules.AnnotationCRIU
	Driver        = rules.AnnotationDriver
	CUDA          = Prefix + "cuda.version"
	GPUCount      = rules.AnnotationGPUCount
	GPUModel      = rules.AnnotationGPUModel
	GPUUUIDs      = Prefix + "gpu.uuids"

	// Source says what made the checkpoint when oci-checkpoint create did
	// not: SourceCRIArchive for a CRI checkpoint archive (the kubelet's
	// checkpoint API, crictl checkpoint) that oci-checkpoint import
	// packaged. Quiesced "false" says the engine was dumped as it ran,
	// with no release and no wake helper to resume it.
	Source           = Prefix + "checkpoint.source"
	SourceCRIArchive = "cri-archive"
	Quiesced         = Prefix + "checkpoint.quiesced"

	// Fallback says what a restorer does on a host that cannot restore
	// the image (its facts rule the host out): FallbackCold starts the
	// checkpointed container's process afresh from the base image, with
	// its original entrypoint, command and environment; without the
	// annotation (FallbackNone) the restore fails with the reasons.
	Fallback     = keys.Fallback
	FallbackCold = keys.FallbackCold
	FallbackNone = keys.FallbackNone

	// LayerInPlace, on the checkpoint layer's descriptor, asks a patched
	// containerd (containerd-patches/diff-apply-keep-a-layer-that-asks-for-it-as-an-EROFS) to keep the uncompressed layer as
	// an EROFS tar index over its blob rather than extract it, so the restore
	// reads the memory pages from the blob once. Other runtimes ignore it.
	LayerInPlace      = keys.LayerInPlace
	LayerInPlaceEROFS = keys.LayerInPlaceEROFS
	// LayerPages, on the checkpoint layer's descriptor, says that the
	// layer's pages images are compressed (pages-N.img.zst, zstd's seekable
	// format): only a runtime that decodes them restores it.
	LayerPages     = Prefix + "layer.pages"
	LayerPagesZstd = "zstd"

	// Signature and SignatureKey sign the manifest (oci-checkpoint create
	// --sign-key, oci-checkpoint sign): Signature is "v1:" and the base64 of
	// an Ed25519 signature of the v1 payload (the contract module's
	// signature package: the config's and layers' descriptors and every
	// other annotation),
	// SignatureKey the key id, "sha256:" and the hex SHA-256 of the public
	// key's DER (PKIX). A containerd whose policy requires a signature
	// (checkpoint_restore_require_signature) restores only images signed by
	// one of its keys.
	Signature    = signature.Annotation
	SignatureKey = signature.AnnotationKey

	// FormatVersion changes when the image layout changes incompatibly.
	FormatVersion = rules.FormatVersion

	// ImageLabel marks a checkpoint image in containerd's image store (a
	// label on the image, not a manifest annotation).
	ImageLabel = Prefix + "checkpoint"

	// LegacyCheckpoint is what CRI-O wrote before checkpointctl's lib
	// named the annotations; older restorers look only for it.
	LegacyCheckpoint = "io.kubernetes.cri-o.annotations.checkpoint.name"
)

// IsCheckpoint reports whether manifest annotations mark a checkpoint
// image, by either name restorers look for.
func IsCheckpoint(ann map[string]string) bool {
	_, named := ann[crmetadata.CheckpointAnnotationName]
	_, legacy := ann[LegacyCheckpoint]
	return named || legacy
}
