/*
   Copyright The containerd Authors.
   Copyright The Rekindle Authors.

   entryAllowed and ExtractLayer's archive filter derive from containerd's
   internal/cri/server/container_checkpoint_linux.go (v2.3.7:
   checkpointArchiveEntryAllowed and CRImportCheckpoint's filter); the rest
   of this file is Rekindle's.

   Licensed under the Apache License, Version 2.0 (the "License");
   you may not use this file except in compliance with the License.
   You may obtain a copy of the License at

       http://www.apache.org/licenses/LICENSE-2.0

   Unless required by applicable law or agreed to in writing, software
   distributed under the License is distributed on an "AS IS" BASIS,
   WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
   See the License for the specific language governing permissions and
   limitations under the License.
*/

package checkpointimage

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/continuity/fs"
	"github.com/containerd/log"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/pkg/archive"
	"github.com/containerd/containerd/v2/pkg/archive/compression"

	"rekindle.local/restore/zstdframes"
)

// entryAllowed accepts the entry types a checkpoint archive is made of:
// directories and regular files. Links and device nodes are never written by
// checkpointing engines and are not recreated.
func entryAllowed(hdr *tar.Header) bool {
	switch hdr.Typeflag {
	case tar.TypeDir, tar.TypeReg:
	default:
		return false
	}
	for _, part := range strings.Split(filepath.ToSlash(hdr.Name), "/") {
		if part == ".." {
			return false
		}
	}
	return true
}

// extractLayer is ExtractLayer, replaced in tests to count extractions.
var extractLayer = ExtractLayer

// ExtractLayer unpacks the checkpoint layer layer from provider into dir.
func ExtractLayer(ctx context.Context, provider content.Provider, layer ocispec.Descriptor, dir string) error {
	ra, err := provider.ReaderAt(ctx, layer)
	if err != nil {
		return fmt.Errorf("checkpoint layer %s: %w", layer.Digest, err)
	}
	defer ra.Close()
	if ra.Size() != layer.Size {
		return &DamagedLayerError{Layer: layer.Digest, Blob: blobPath(ra),
			Reason: fmt.Sprintf("is %d bytes where the image says %d", ra.Size(), layer.Size)}
	}
	// The blob's digest is checked while it is extracted, on a reader of
	// its own (the second read of each part comes from the page cache),
	// so an entry is never built from a blob damaged since its pull, and
	// the check costs little more than the extraction.
	verified := make(chan error, 1)
	go func() { verified <- VerifyBlob(ctx, provider, layer) }()
	err = extractArchive(ctx, content.NewReader(ra), layer, dir)
	if verr := <-verified; verr != nil {
		// A blob cut short or changed is named as such, not by the
		// decoder's or tar's view of it.
		return verr
	}
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, crmetadata.CheckpointDirectory)); err != nil {
		return fmt.Errorf("checkpoint layer %s holds no %s/ directory of CRIU images: %w", layer.Digest, crmetadata.CheckpointDirectory, err)
	}
	return nil
}

// extractArchive decodes and unpacks the checkpoint layer read from r into dir.
func extractArchive(ctx context.Context, r io.Reader, layer ocispec.Descriptor, dir string) error {
	ds, err := zstdframes.Decompress(r)
	if err != nil {
		return fmt.Errorf("checkpoint layer %s: %w", layer.Digest, err)
	}
	defer ds.Close()
	filter := archive.WithFilter(func(hdr *tar.Header) (bool, error) {
		if !entryAllowed(hdr) {
			log.G(ctx).Warnf("skipping unexpected checkpoint archive entry %q (type %d)", hdr.Name, hdr.Typeflag)
			return false, nil
		}
		return true, nil
	})
	if _, err := archive.Apply(ctx, dir, ds, filter); err != nil {
		return fmt.Errorf("unpack checkpoint layer %s: %w", layer.Digest, err)
	}
	return nil
}

// ApplyRootfsDiff applies the checkpoint's rootfs-diff.tar to the mounted
// root filesystem root and removes the paths listed in deleted.files, both
// read from the extracted checkpoint in dataDir. Either file may be absent.
func ApplyRootfsDiff(ctx context.Context, root, dataDir string) error {
	f, err := os.Open(filepath.Join(dataDir, crmetadata.RootFsDiffTar))
	switch {
	case err == nil:
		defer f.Close()
		ds, err := compression.DecompressStream(f)
		if err != nil {
			return fmt.Errorf("%s: %w", crmetadata.RootFsDiffTar, err)
		}
		defer ds.Close()
		if _, err := archive.Apply(ctx, root, ds); err != nil {
			return fmt.Errorf("apply %s: %w", crmetadata.RootFsDiffTar, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return err
	}

	deleted, _, err := crmetadata.ReadContainerCheckpointDeletedFiles(dataDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("read %s: %w", crmetadata.DeletedFilesFile, err)
	}
	for _, name := range deleted {
		// RootPath resolves symlinks inside root, so a listed path
		// cannot reach outside the container's filesystem.
		p, err := fs.RootPath(root, name)
		if err != nil {
			return fmt.Errorf("%s entry %q: %w", crmetadata.DeletedFilesFile, name, err)
		}
		if p == filepath.Clean(root) {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("%s entry %q: %w", crmetadata.DeletedFilesFile, name, err)
		}
	}
	return nil
}
