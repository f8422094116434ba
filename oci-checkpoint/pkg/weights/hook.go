package weights

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"rekindle.local/oci-checkpoint/pkg/inroot"
)

// The annotations the hook reads. containerd's CRI sets these last, from
// the sandbox config the kubelet sent (annotations.DefaultCRIAnnotations,
// applied after the pod's and container's pass-through annotations in
// internal/cri/server/container_create.go of containerd v2.3.7), so a pod
// cannot set them; CRI sets the container type on every container it
// makes. A container without it was made by a containerd client, which
// needs containerd's socket (root) and whose annotations are its own.
const (
	annCRIType         = "io.kubernetes.cri.container-type"
	annCRINamespace    = "io.kubernetes.cri.sandbox-namespace"
	annCRIPodName      = "io.kubernetes.cri.sandbox-name"
	annCRIPodUID       = "io.kubernetes.cri.sandbox-uid"
	annCRIContainer    = "io.kubernetes.cri.container-name"
	annNerdctlName     = "nerdctl/name"
	containerdTaskDir  = "io.containerd.runtime.v2.task"
	maxTokenSize       = 64 << 10
	maxBundleSpecBytes = 16 << 20
)

// HookContainer reads the OCI state runc gives a hook on stdin and what
// the runtime vouches for about the container: its containerd namespace
// (from the bundle path), the CRI pod it belongs to, and the service
// account token the kubelet mounted (from the bundle's config.json).
func HookContainer(r io.Reader) (specs.State, Container, error) {
	var st specs.State
	if err := json.NewDecoder(io.LimitReader(r, 1<<20)).Decode(&st); err != nil {
		return st, Container{}, fmt.Errorf("read the container's OCI state on stdin: %v (this command is run by runc as a createRuntime hook)", err)
	}
	if st.ID == "" {
		return st, Container{}, fmt.Errorf("the OCI state on stdin names no container id")
	}
	c := Container{ID: st.ID, ContainerdNamespace: containerdNamespace(st.Bundle, st.ID)}
	a := st.Annotations
	if a[annCRIType] != "" {
		c.CRI = true
		c.PodNamespace, c.PodName, c.PodUID, c.Name = a[annCRINamespace], a[annCRIPodName], a[annCRIPodUID], a[annCRIContainer]
		c.Token = bundleToken(st.Bundle)
	} else {
		c.Name = a[annNerdctlName]
	}
	return st, c, nil
}

// containerdNamespace is NS when bundle is containerd's runc shim bundle
// STATE/io.containerd.runtime.v2.task/NS/ID: runc reports the bundle it
// was started on, and containerd names it.
func containerdNamespace(bundle, id string) string {
	if bundle == "" || !filepath.IsAbs(bundle) {
		return ""
	}
	b := filepath.Clean(bundle)
	ns := filepath.Dir(b)
	if filepath.Base(b) != id || filepath.Base(filepath.Dir(ns)) != containerdTaskDir {
		return ""
	}
	return filepath.Base(ns)
}

// bundleToken reads the token of the service account volume the bundle's
// spec mounts at ServiceAccountDir (the last such mount wins, as in the
// container); "" when there is none or it cannot be read.
func bundleToken(bundle string) string {
	if bundle == "" {
		return ""
	}
	b, err := readSmall(filepath.Join(bundle, "config.json"), maxBundleSpecBytes)
	if err != nil {
		return ""
	}
	var spec specs.Spec
	if json.Unmarshal(b, &spec) != nil {
		return ""
	}
	src := ""
	for _, m := range spec.Mounts {
		if filepath.Clean(m.Destination) == ServiceAccountDir && filepath.IsAbs(m.Source) {
			src = m.Source
		}
	}
	if src == "" {
		return ""
	}
	t, err := readToken(src)
	if err != nil {
		return ""
	}
	return t
}

// readToken reads DIR/token from a service account volume. The volume may
// be one the pod chose and filled (an emptyDir), so the name is resolved
// beneath DIR only, and only a small regular file is opened: a symlink out
// of the volume or a device node would have host root open what the pod
// picked.
func readToken(dir string) (string, error) {
	r, err := inroot.Open(dir)
	if err != nil {
		return "", err
	}
	defer r.Close()
	b, err := r.ReadFileBeneath("token", maxTokenSize)
	return string(b), err
}

// readSmall reads a regular file of at most max bytes, without blocking
// on a FIFO. It opens p before checking it: only for files the runtime
// owns (the bundle's config.json).
func readSmall(p string, max int64) ([]byte, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > max {
		return nil, fmt.Errorf("%s is not a regular file of at most %d bytes", p, max)
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// RunHook is `rekindle-weights hook NAME`: the container in the OCI state
// on stdin may map set NAME and the set is loaded when it returns. What it
// says goes to stderr (runc shows it when the hook fails) and to the
// shim's log fifo in the bundle, which containerd copies into its own log
// (runc drops a hook's output when it succeeds).
func RunHook(ctx context.Context, c *Client, name string, stdin io.Reader, stderr io.Writer) error {
	st, ctr, err := HookContainer(stdin)
	if err != nil {
		return err
	}
	say := func(format string, a ...any) {
		msg := fmt.Sprintf("rekindle-weights hook: "+format, a...)
		fmt.Fprintln(stderr, msg)
		shimLog(st.Bundle, msg)
	}
	fail := func(err error) error {
		// main prints err on stderr; containerd's log gets it here.
		shimLog(st.Bundle, "rekindle-weights hook: "+err.Error())
		return err
	}
	start := time.Now()
	// Ask first without loading, to say why a slow start happens: the
	// service checks the allow list and answers the set's state.
	chk, err := c.Ensure(ctx, EnsureRequest{Name: name, Container: ctr, CheckOnly: true})
	if err != nil {
		return fail(err)
	}
	if chk.Status.State != StateLoaded {
		say("weight set %s was not loaded on this host; loading it from %v for container %s", name, chk.Sources, chk.Container)
	}
	res, err := c.Ensure(ctx, EnsureRequest{Name: name, Container: ctr})
	if err != nil {
		return fail(err)
	}
	if res.LoadedNow {
		say("weight set %s loaded for container %s in %.2fs", name, res.Container, time.Since(start).Seconds())
	}
	return nil
}

// shimLog writes one line to BUNDLE/log when it is a fifo with a reader
// (containerd's runc shim); anything else is left alone.
func shimLog(bundle, msg string) {
	if bundle == "" {
		return
	}
	p := filepath.Join(bundle, "log")
	fi, err := os.Lstat(p)
	if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		return
	}
	fd, err := unix.Open(p, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	// containerd copies the fifo to its stderr as it is: one line in the
	// shim's own (logrus text) format.
	line := fmt.Sprintf("time=%q level=info msg=%s\n", time.Now().UTC().Format(time.RFC3339Nano), strconv.Quote(msg))
	unix.Write(fd, []byte(line))
}
