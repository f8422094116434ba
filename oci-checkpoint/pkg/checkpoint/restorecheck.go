package checkpoint

import (
	"context"
	"fmt"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/distribution/reference"

	"rekindle.local/oci-checkpoint/pkg/annotations"
	"rekindle.local/oci-checkpoint/pkg/registry"
	"rekindle.local/oci-checkpoint/pkg/restorepolicy"
	"rekindle.local/restore/checkpointimage"
)

// CheckRestore adds to report r, of an image that Inspect read, the
// decisions a restore on this host makes before it restores, beyond the
// host facts Inspect compared: the host's restore policy (its name
// patterns and, where one is required, the signature, by the restore
// engine's own code) as containerd configuration cfg sets it, and the
// base image, local or reachable in its registry. Each refusal is a
// problem naming its cause and its fix; r.Restorable is false with any.
func CheckRestore(ctx context.Context, c *client.Client, r *Report, cfg restorepolicy.Config, reg registry.Options) error {
	var problems []string
	policy, err := cfg.Policy()
	if err != nil {
		problems = append(problems, fmt.Sprintf("policy: containerd's tasks service does not load with the configuration in %s, so nothing restores: %v; fix it and restart containerd", cfg.Source(), err))
	} else {
		if err := policy.Check(r.Image, nil); err != nil {
			problems = append(problems, fmt.Sprintf("policy: %v (the policy as %s sets it)", err, cfg.Source()))
		} else if policy.RequiresSignature() {
			_, m, _, err := Manifest(ctx, c, r.Image, reg)
			if err != nil {
				return err
			}
			if err := policy.Verify(r.Image, m); err != nil {
				problems = append(problems, fmt.Sprintf("signature: %v (the policy as %s sets it)", err, cfg.Source()))
			}
		}
	}
	if p, note, err := checkBase(ctx, c, r.Annotations, reg); err != nil {
		return err
	} else if p != "" {
		problems = append(problems, p)
	} else if note != "" {
		r.Notes = append(r.Notes, note)
	}
	if len(problems) > 0 && r.Annotations[annotations.Fallback] == annotations.FallbackCold {
		r.Notes = append(r.Notes, "the image asks for a cold start where it cannot be restored (--fallback cold): nerdctl run starts its base image afresh instead, when the base image is there")
	}
	r.Problems = append(r.Problems, problems...)
	r.Restorable = len(r.Problems) == 0
	return nil
}

// checkBase finds the base image as the restore does (checkpointimage's
// ResolveBase: by the digest the checkpoint pins, in the local store) and,
// where it is not local, asks its registry for that digest's manifest
// (the restore would pull it). It returns a problem when it is neither, or
// a note; an error only when the image store could not be read.
func checkBase(ctx context.Context, c *client.Client, ann map[string]string, reg registry.Options) (problem, note string, err error) {
	name, d := ann[annotations.SourceImage], ann[crmetadata.CheckpointAnnotationRootfsImageID]
	if name == "" {
		name = ann[crmetadata.CheckpointAnnotationRootfsImageName]
	}
	if d == "" {
		return "", "the manifest does not record the base image's digest (" + crmetadata.CheckpointAnnotationRootfsImageID + "): whether it is here was not checked", nil
	}
	base := checkpointimage.BaseRef{Name: name, Ref: d}
	if named, err := reference.ParseNormalizedNamed(name); err == nil {
		base.Ref = named.Name() + "@" + d
	}
	// Quiet: ResolveBase logs what it finds, as containerd's log has it.
	_, err = checkpointimage.ResolveBase(registry.Quiet(ctx), c.ImageService(), c.ContentStore(), platforms.Default(), base, nil)
	switch {
	case err == nil:
		return "", "", nil
	case !errdefs.IsNotFound(err):
		if errdefs.IsInvalidArgument(err) {
			return "base: " + err.Error(), "", nil
		}
		return "", "", err
	}
	named, perr := reference.ParseNormalizedNamed(name)
	if perr != nil {
		return fmt.Sprintf("base: base image %s of the checkpoint is not in the local image store (no image has digest %s), and its name is no registry's: load it (nerdctl load) and check again", base, d), "", nil
	}
	ref := named.Name() + "@" + d
	rctx := registry.Quiet(ctx)
	resolver, err := registry.New(rctx, reference.Domain(named), reg)
	if err != nil {
		return "", "", err
	}
	if _, _, err := resolver.Resolve(rctx, ref); err != nil {
		return fmt.Sprintf("base: base image %s of the checkpoint is not in the local image store (no image has digest %s), and its registry did not give it: %v; "+
			"pull it (nerdctl pull %s) or load it (nerdctl load), then check again", base, d, resolver.Explain(err), ref), "", nil
	}
	return "", fmt.Sprintf("base image %s is not in the local image store: the restore pulls %s from its registry first (it answered here)", base, ref), nil
}
