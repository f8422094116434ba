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
)

// nameAnnotations carry a container's name: nerdctl's, then CRI's.
var nameAnnotations = []string{"nerdctl/name", "io.kubernetes.cri.container-name", "io.kubernetes.container.name"}

// HookContainer reads the OCI state runc gives a hook on stdin.
func HookContainer(r io.Reader) (specs.State, string, error) {
	var st specs.State
	if err := json.NewDecoder(io.LimitReader(r, 1<<20)).Decode(&st); err != nil {
		return st, "", fmt.Errorf("read the container's OCI state on stdin: %v (this command is run by runc as a createRuntime hook)", err)
	}
	if st.ID == "" {
		return st, "", fmt.Errorf("the OCI state on stdin names no container id")
	}
	for _, k := range nameAnnotations {
		if v := st.Annotations[k]; v != "" {
			return st, v, nil
		}
	}
	return st, "", nil
}

// RunHook is `rekindle-weights hook NAME`: the container in the OCI state
// on stdin may map set NAME and the set is loaded when it returns. What it
// says goes to stderr (runc shows it when the hook fails) and to the
// shim's log fifo in the bundle, which containerd copies into its own log
// (runc drops a hook's output when it succeeds).
func RunHook(ctx context.Context, c *Client, name string, stdin io.Reader, stderr io.Writer) error {
	st, cname, err := HookContainer(stdin)
	if err != nil {
		return err
	}
	say := func(format string, a ...any) {
		msg := fmt.Sprintf("rekindle-weights hook: "+format, a...)
		fmt.Fprintln(stderr, msg)
		shimLog(st.Bundle, msg)
	}
	who := describe(st.ID, cname)
	start := time.Now()
	// Ask first without loading, to say why a slow start happens (the
	// service checks the allow list again in Ensure).
	s, err := c.Status(ctx, name)
	if err == nil && s.State != StateLoaded && allowed(s.Allow, st.ID, cname) {
		say("weight set %s was not loaded on this host; loading it from %v for container %s", name, s.Sources, who)
	}
	res, err := c.Ensure(ctx, name, st.ID, cname)
	if err != nil {
		// main prints err on stderr; containerd's log gets it here.
		shimLog(st.Bundle, "rekindle-weights hook: "+err.Error())
		return err
	}
	if res.LoadedNow {
		say("weight set %s loaded for container %s in %.2fs", name, who, time.Since(start).Seconds())
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
