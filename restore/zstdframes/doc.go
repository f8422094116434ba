// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

// Package zstdframes decodes a zstd stream of many independent frames, as
// parallel encoders write it (zstd -T, pzstd, oci-checkpoint's
// --compression zstd), several frames at once: a stream decoder works
// through such frames one after another on about one core. A frame it
// cannot size, or a larger one, is decoded from there on as one stream,
// exactly as a stream decoder would.
//
// Imported into containerd, it registers itself as the stream processor of
// zstd layers (containerd's diff.RegisterProcessor, the extension point
// its stream_processors configuration uses too, which still comes first),
// so every zstd layer containerd unpacks is decoded this way. The restore
// engine calls Decompress for the checkpoint layers it extracts itself.
package zstdframes
