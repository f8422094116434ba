package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"

	"rekindle.local/oci-checkpoint/pkg/annotations"
)

// Entry is one checkpoint image of the image store, described from its
// manifest's annotations.
type Entry struct {
	Name      string    `json:"image"`
	Digest    string    `json:"digest"`
	Size      int64     `json:"size"` // the manifest, config and layers, as stored
	Created   time.Time `json:"created"`
	Engine    string    `json:"engine"`
	BaseImage string    `json:"base_image"`
	// BaseDigest is the base image's manifest digest, by which a restore
	// finds it (absent: an image of another tool that records none).
	BaseDigest string `json:"base_digest,omitempty"`
	GPUCount   int    `json:"gpu_count"`
	GPUModel   string `json:"gpu_model,omitempty"`
	Driver     string `json:"nvidia_driver,omitempty"`
	CUDA       string `json:"cuda_version,omitempty"`
	CPUVendor  string `json:"cpu_vendor,omitempty"`
	CPUModel   string `json:"cpu_model,omitempty"`
	Kernel     string `json:"kernel,omitempty"`
	CRIU       string `json:"criu_version,omitempty"`
}

// List returns the checkpoint images of c's image store in the context's
// namespace, by name. Images whose manifest is not in the content store
// (a pull that did not finish, another platform's) are not checkpoint
// images as far as this host can tell, and are left out.
func List(ctx context.Context, c *client.Client) ([]Entry, error) {
	imgs, err := c.ImageService().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	out := []Entry{}
	for _, img := range imgs {
		e, ok, err := entry(ctx, c, img)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func entry(ctx context.Context, c *client.Client, img images.Image) (Entry, bool, error) {
	m, err := images.Manifest(ctx, c.ContentStore(), img.Target, platforms.Default())
	if errdefs.IsNotFound(err) {
		return Entry{}, false, nil
	} else if err != nil {
		return Entry{}, false, fmt.Errorf("image %s: %w", img.Name, err)
	}
	a := m.Annotations
	if !annotations.IsCheckpoint(a) {
		return Entry{}, false, nil
	}
	e := Entry{
		Name: img.Name, Digest: img.Target.Digest.String(), Size: img.Target.Size + m.Config.Size,
		Engine: a[annotations.Engine], BaseImage: a[annotations.SourceImage], BaseDigest: a[crmetadata.CheckpointAnnotationRootfsImageID],
		GPUModel: a[annotations.GPUModel], Driver: a[annotations.Driver], CUDA: a[annotations.CUDA],
		CPUVendor: a[annotations.CPUVendor], CPUModel: a[annotations.CPUModel],
		Kernel: a[annotations.Kernel], CRIU: a[annotations.CRIU],
	}
	for _, l := range m.Layers {
		e.Size += l.Size
	}
	e.GPUCount, _ = strconv.Atoi(a[annotations.GPUCount])
	// The checkpoint time, else when the image was stored (a checkpoint
	// image another tool made).
	if t, err := time.Parse(time.RFC3339, a[annotations.Created]); err == nil {
		e.Created = t
	} else {
		e.Created = img.CreatedAt.UTC()
	}
	return e, true, nil
}

// ErrNotCheckpoint marks an image that is not a checkpoint image.
var ErrNotCheckpoint = errors.New("not a checkpoint image")

// Remove removes the named checkpoint images from the image store and
// returns the names removed. Every name is checked first: if any is not in
// the store, is not a checkpoint image, or is the image of a container
// (unless force), nothing is removed and the error says why for each.
// Removal is synchronous, so containerd's garbage collector has dropped
// the images' content (and their extracted-checkpoint cache) on return.
func Remove(ctx context.Context, c *client.Client, refs []string, force bool) ([]string, error) {
	if len(refs) == 0 {
		return nil, errors.New("no image named")
	}
	used, err := imagesInUse(ctx, c)
	if err != nil {
		return nil, err
	}
	var names []string
	var problems []error
	seen := map[string]bool{}
	for _, ref := range refs {
		name, err := NormalizeName(ref)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		img, err := c.ImageService().Get(ctx, name)
		if errdefs.IsNotFound(err) {
			problems = append(problems, fmt.Errorf("%s: %w: no such image in the image store (oci-checkpoint ls lists the checkpoint images)", name, errdefs.ErrNotFound))
			continue
		} else if err != nil {
			problems = append(problems, fmt.Errorf("%s: %w", name, err))
			continue
		}
		if _, ok, err := entry(ctx, c, img); err != nil {
			problems = append(problems, err)
			continue
		} else if !ok {
			problems = append(problems, fmt.Errorf("%s: %w (its manifest has no checkpoint annotation): oci-checkpoint rm removes only checkpoint images, remove others with nerdctl rmi", name, ErrNotCheckpoint))
			continue
		}
		if ctrs := used[name]; len(ctrs) > 0 && !force {
			problems = append(problems, fmt.Errorf("%s: %w: container(s) %s were created from it: remove them first (nerdctl rm -f), or pass --force", name, errdefs.ErrFailedPrecondition, strings.Join(ctrs, ", ")))
			continue
		}
		names = append(names, name)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("nothing removed: %w", errors.Join(problems...))
	}
	var removed []string
	for i, name := range names {
		opts := []images.DeleteOpt{}
		if i == len(names)-1 {
			opts = append(opts, images.SynchronousDelete())
		}
		if err := c.ImageService().Delete(ctx, name, opts...); err != nil && !errdefs.IsNotFound(err) {
			return removed, fmt.Errorf("remove %s: %w", name, err)
		}
		removed = append(removed, name)
	}
	return removed, nil
}

// imagesInUse maps image names to the containers created from them.
func imagesInUse(ctx context.Context, c *client.Client) (map[string][]string, error) {
	ctrs, err := c.ContainerService().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	used := map[string][]string{}
	for _, ctr := range ctrs {
		if ctr.Image != "" {
			used[ctr.Image] = append(used[ctr.Image], containerName(ctr.ID, ctr.Labels))
		}
	}
	return used, nil
}

// WriteTable writes entries as the table `oci-checkpoint ls` prints.
func WriteTable(w io.Writer, entries []Entry) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tENGINE\tSIZE\tCREATED\tGPUS\tDRIVER\tCPU")
	for _, e := range entries {
		gpus, driver := "none", "-"
		if e.GPUCount > 0 {
			gpus = fmt.Sprintf("%d x %s", e.GPUCount, orDash(e.GPUModel))
			driver = orDash(e.Driver)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Name, orDash(e.Engine), HumanSize(e.Size),
			e.Created.UTC().Format("2006-01-02 15:04:05 UTC"), gpus, driver, orDash(e.CPUVendor))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// HumanSize writes n bytes in powers of 1024, as nerdctl images does.
func HumanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n)/unit, 0
	for f >= unit && i < 4 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMGTP"[i])
}
