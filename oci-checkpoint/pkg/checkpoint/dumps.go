package checkpoint

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/diff"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/rootfs"
	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// The files of the checkpoint archive besides CRIU's images, in the
// layout CRI-O and checkpointctl use.

// diffReadSize is how much of the rootfs diff one content read fetches.
const diffReadSize = 8 << 20

// writeRootfsDiff writes the container's changes to its image as
// rootfs-diff.tar and deleted.files, through containerd's differ.
// lower is the snapshot to compare against ("": the snapshot's parent).
func writeRootfsDiff(ctx context.Context, c *client.Client, info containers.Container, lower, dir string, extra []ExtraFile) error {
	sn := c.SnapshotService(info.Snapshotter)
	ref := "rekindle-rootfs-diff-" + randomID()
	desc, err := compareRootfs(ctx, sn, c.DiffService(), info.SnapshotKey, lower,
		diff.WithMediaType(ocispec.MediaTypeImageLayer), diff.WithReference(ref))
	if err != nil {
		// The differ may leave its partial ingest (a full disk): drop it.
		if aerr := c.ContentStore().Abort(context.WithoutCancel(ctx), ref); aerr != nil && !errdefs.IsNotFound(aerr) {
			err = fmt.Errorf("%w (and its partial content %s stays: %v)", err, ref, aerr)
		}
		return err
	}
	ra, err := c.ContentStore().ReaderAt(ctx, desc)
	if err != nil {
		return err
	}
	defer ra.Close()
	f, err := os.Create(filepath.Join(dir, crmetadata.RootFsDiffTar))
	if err != nil {
		return err
	}
	defer f.Close()
	// Large reads: through containerd's content API each ReadAt is a round
	// trip (the server opens, reads and closes the blob), and the tar reader
	// asks for 32 KiB at a time: 26 MB/s for a compiled engine's caches.
	deleted, err := ConvertDiff(bufio.NewReaderSize(content.NewReader(ra), diffReadSize), f, extra)
	if err != nil {
		return err
	}
	if len(deleted) > 0 {
		if _, err := crmetadata.WriteJSONFile(deleted, dir, crmetadata.DeletedFilesFile); err != nil {
			return err
		}
	}
	return f.Close()
}

// compareRootfs is rootfs.CreateDiff against lower instead of key's parent.
func compareRootfs(ctx context.Context, sn snapshots.Snapshotter, d diff.Comparer, key, lower string, opts ...diff.Opt) (ocispec.Descriptor, error) {
	if lower == "" {
		return rootfs.CreateDiff(ctx, key, sn, d, opts...)
	}
	view := "rekindle-rootfs-lower-" + randomID()
	lm, err := sn.View(ctx, view, lower)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	defer sn.Remove(context.WithoutCancel(ctx), view)
	um, err := sn.Mounts(ctx, key)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	return d.Compare(ctx, lm, um, opts...)
}

// writeDumps writes spec.dump, config.dump and status.dump. The standard
// checkpoint annotations go into spec.dump's annotations too: checkpointctl
// reads the archive, never the manifest, and shows them from there.
// config.dump carries podman's fields beside checkpointctl's (podman.go).
func writeDumps(ctx context.Context, ctr client.Container, info containers.Container, base client.Image, dir string, at time.Time, std map[string]string) error {
	if info.Spec == nil {
		return fmt.Errorf("container %s has no spec", ctr.ID())
	}
	specJSON, err := annotateSpec(info.Spec.GetValue(), std)
	if err == nil {
		specJSON, err = withoutHooks(specJSON)
	}
	if err != nil {
		return fmt.Errorf("container %s's spec: %w", ctr.ID(), err)
	}
	if err := os.WriteFile(filepath.Join(dir, crmetadata.SpecDumpFile), specJSON, 0o600); err != nil {
		return err
	}
	ref, err := pinnedRef(base)
	if err != nil {
		return err
	}
	baseConfig, err := base.Config(ctx)
	if err != nil {
		return fmt.Errorf("base image %s: its config: %w", info.Image, err)
	}
	_, err = crmetadata.WriteJSONFile(&configDump{
		ContainerConfig: crmetadata.ContainerConfig{
			ID:              ctr.ID(),
			Name:            containerName(ctr.ID(), info.Labels),
			RootfsImage:     info.Image,
			RootfsImageName: info.Image,
			RootfsImageRef:  ref,
			OCIRuntime:      info.Runtime.Name,
			CreatedTime:     info.CreatedAt,
			CheckpointedAt:  at,
		},
		podmanConfig: newPodmanConfig(specJSON, info.Image, baseConfig.Digest),
	}, dir, crmetadata.ConfigDumpFile)
	if err != nil {
		return err
	}
	// status.dump is CRI's ContainerStatus of the container; containerd's
	// CRI restore reads the container's name and image from it. Only those
	// are written: the rest describes a pod this container may not be in.
	status := map[string]any{
		"metadata": map[string]any{"name": containerName(ctr.ID(), info.Labels)},
		"image":    map[string]any{"image": info.Image},
	}
	_, err = crmetadata.WriteJSONFile(status, dir, crmetadata.StatusDumpFile)
	return err
}

// annotateSpec adds ann to an OCI runtime spec's annotations, keeping every
// other field as it was (the spec is not decoded into a struct that could
// drop fields this build does not know).
func annotateSpec(spec []byte, ann map[string]string) ([]byte, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(spec, &doc); err != nil {
		return nil, err
	}
	have := map[string]string{}
	if raw, ok := doc["annotations"]; ok {
		if err := json.Unmarshal(raw, &have); err != nil {
			return nil, fmt.Errorf("annotations: %w", err)
		}
	}
	if have == nil {
		have = map[string]string{}
	}
	for k, v := range ann {
		have[k] = v
	}
	raw, err := json.Marshal(have)
	if err != nil {
		return nil, err
	}
	doc["annotations"] = raw
	return json.Marshal(doc)
}

// withoutHooks drops the spec's hooks. Those nerdctl adds call back into the
// containerd that ran the container (its socket and data root on this
// host); a restorer that restores with spec.dump, as podman does, would run
// them against a containerd that is not its own, and fail or worse.
// Rekindle's containerd reads spec.dump's mounts and process, never its
// hooks: a restore there runs the new container's own.
func withoutHooks(spec []byte) ([]byte, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(spec, &doc); err != nil {
		return nil, err
	}
	if _, ok := doc["hooks"]; !ok {
		return spec, nil
	}
	delete(doc, "hooks")
	return json.Marshal(doc)
}

// pinnedRef is the base image as NAME@DIGEST, so a restorer can find it
// by content whatever it is called there.
func pinnedRef(base client.Image) (string, error) {
	n, err := reference.ParseNormalizedNamed(base.Name())
	if err != nil {
		return "", err
	}
	d, err := reference.WithDigest(reference.TrimNamed(n), base.Target().Digest)
	if err != nil {
		return "", err
	}
	return d.String(), nil
}
