package weights

import (
	"fmt"
	"path/filepath"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// CDIKind is the CDI kind of weight sets: --device rekindle.dev/weights=NAME.
const CDIKind = "rekindle.dev/weights"

// CDISpecName is the spec file the service owns in its CDI directory.
const CDISpecName = "rekindle-weights.json"

// ContainerDir is where a set appears inside a container.
const ContainerDir = "/rekindle/weights"

// buildCDI describes one device per known set: the set's directory bound
// read-only, and a createRuntime hook that makes sure the set is loaded
// and that the container may map it.
//
// The hook also serves restores. runc v1.5.2 (libcontainer/criu_linux.go,
// criuNotifications) runs the spec's prestart and createRuntime hooks when
// CRIU sends "setup-namespaces". CRIU 4.2.1 (cr-restore.c) sends it once
// the restored tree's namespaces exist, before the root task restores the
// mount tree (prepare_namespace) and before any file or mapping is opened.
// The bind mount takes the set's directory, which exists while the set is
// known, and the hook fills it in place, so CRIU finds the mapped files.
func buildCDI(setsDir string, hook []string, names []string) (*cdispec.Spec, error) {
	spec := &cdispec.Spec{Kind: CDIKind, Devices: []cdispec.Device{}}
	for _, n := range names {
		d := cdispec.Device{Name: n, ContainerEdits: cdispec.ContainerEdits{
			Mounts: []*cdispec.Mount{{
				HostPath:      filepath.Join(setsDir, n),
				ContainerPath: ContainerDir + "/" + n,
				Type:          "bind",
				Options:       []string{"ro", "rbind"},
			}},
		}}
		if len(hook) > 0 {
			d.ContainerEdits.Hooks = []*cdispec.Hook{{
				HookName: "createRuntime",
				Path:     hook[0],
				Args:     append(append([]string{filepath.Base(hook[0])}, hook[1:]...), "hook", n),
			}}
		}
		spec.Devices = append(spec.Devices, d)
	}
	v, err := cdi.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, err
	}
	spec.Version = v
	return spec, nil
}

// writeCDI writes the spec atomically through the CDI library, which
// validates it first. With no known sets the spec is removed: CDI refuses
// a spec without devices.
func writeCDI(dir, setsDir string, hook []string, names []string) error {
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil && cache == nil {
		return fmt.Errorf("CDI spec dir %s: %w", dir, err)
	}
	if len(names) == 0 {
		if err := cache.RemoveSpec(CDISpecName); err != nil {
			return fmt.Errorf("remove CDI spec from %s: %w", dir, err)
		}
		return nil
	}
	spec, err := buildCDI(setsDir, hook, names)
	if err != nil {
		return err
	}
	if err := cache.WriteSpec(spec, CDISpecName); err != nil {
		return fmt.Errorf("write CDI spec %s: %w", filepath.Join(dir, CDISpecName), err)
	}
	return nil
}
