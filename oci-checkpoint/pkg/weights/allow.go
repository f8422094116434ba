package weights

import (
	"fmt"
	"path"
	"strings"
)

// A set's allow list names containers by what the runtime vouches for,
// never by what the container's author chooses (its name, its labels or
// the annotations it may pass through):
//
//	k8s:NAMESPACE                 a CRI container of a pod in NAMESPACE
//	k8s:NAMESPACE/SERVICEACCOUNT  ... whose pod runs as SERVICEACCOUNT, as
//	                              its bound token shows (serve --sa-keys)
//	containerd:NAMESPACE          a container that a containerd client
//	                              (nerdctl, ctr) made in that containerd
//	                              namespace, not through CRI
//	containerd:NAMESPACE/NAME     ... named NAME (nerdctl's name, or the id)
//	*                             any container
//
// Each part is a glob (path.Match). An empty list allows no container;
// a list that is not known (a set adopted from a manifest written before
// allow lists were kept there) refuses every container.
const (
	allowAny        = "*"
	allowK8s        = "k8s:"
	allowContainerd = "containerd:"
)

// allowForms is what an error says a good entry looks like.
const allowForms = "k8s:NAMESPACE[/SERVICEACCOUNT], containerd:NAMESPACE[/NAME] or * (any container)"

type allowEntry struct {
	kind      string // allowK8s, allowContainerd or allowAny
	ns, other string // namespace glob; service account or name glob ("" any)
}

func parseAllow(s string) (allowEntry, error) {
	if s == allowAny {
		return allowEntry{kind: allowAny}, nil
	}
	bad := func(why string) (allowEntry, error) {
		return allowEntry{}, errf(400, "bad allow entry %q: %s; an entry names what the runtime vouches for: %s", s, why, allowForms)
	}
	var e allowEntry
	var rest string
	switch {
	case strings.HasPrefix(s, allowK8s):
		e.kind, rest = allowK8s, strings.TrimPrefix(s, allowK8s)
	case strings.HasPrefix(s, allowContainerd):
		e.kind, rest = allowContainerd, strings.TrimPrefix(s, allowContainerd)
	default:
		return bad("a bare container name is chosen by whoever writes the pod or runs the container")
	}
	e.ns, e.other, _ = strings.Cut(rest, "/")
	if e.ns == "" || strings.Contains(e.other, "/") || (strings.Contains(rest, "/") && e.other == "") {
		return bad("give one namespace and at most one /PART after it")
	}
	for _, g := range []string{e.ns, e.other} {
		if _, err := path.Match(g, ""); err != nil {
			return bad(fmt.Sprintf("%q is not a glob", g))
		}
	}
	return e, nil
}

// checkAllow parses every entry; saKeys says whether the service can
// verify service accounts.
func checkAllow(entries []string, saKeys bool) error {
	for _, s := range entries {
		e, err := parseAllow(s)
		if err != nil {
			return err
		}
		if e.kind == allowK8s && e.other != "" && !saKeys {
			return errf(400, "allow entry %q names a service account, and this service verifies none: start it with "+
				"--sa-keys FILE (the cluster's service account signing public keys), or allow the namespace alone (k8s:%s)", s, e.ns)
		}
	}
	return nil
}

// Container is what the hook tells the service of a container: what
// runc and containerd vouch for, read from the OCI state and bundle.
type Container struct {
	ID string `json:"id"`
	// ContainerdNamespace comes from the bundle path containerd chose
	// (STATE/io.containerd.runtime.v2.task/NAMESPACE/ID); "" when the
	// bundle is not one of containerd's.
	ContainerdNamespace string `json:"containerd_namespace,omitempty"`
	// CRI: the container was made by containerd's CRI, which sets the
	// pod fields below over any annotation the pod passes through.
	CRI          bool   `json:"cri,omitempty"`
	PodNamespace string `json:"pod_namespace,omitempty"`
	PodName      string `json:"pod_name,omitempty"`
	PodUID       string `json:"pod_uid,omitempty"`
	// Name: CRI's container name, or nerdctl's for other containers.
	Name string `json:"name,omitempty"`
	// Token is the service account token the kubelet mounted, for the
	// service to verify; never trusted without its signature.
	Token string `json:"service_account_token,omitempty"`
}

// identity is a Container with the service's verdict on its token.
type identity struct {
	Container
	serviceAccount string // verified; "" when not
	saWhy          string // why there is none
}

func (id identity) String() string {
	switch {
	case id.CRI:
		sa := "service account " + id.serviceAccount
		if id.serviceAccount == "" {
			sa = "no verified service account (" + id.saWhy + ")"
		}
		return fmt.Sprintf("%s of pod %s/%s (%s, %s)", orDash(id.Name), orDash(id.PodNamespace), orDash(id.PodName), short(id.ID), sa)
	case id.ContainerdNamespace != "":
		name := ""
		if id.Name != "" {
			name = id.Name + " "
		}
		return fmt.Sprintf("%s(%s) in containerd namespace %s", name, short(id.ID), id.ContainerdNamespace)
	}
	return fmt.Sprintf("%s (not made by containerd: nothing vouches for it beyond its id)", short(id.ID))
}

// suggest is an allow entry that would let id in.
func (id identity) suggest() string {
	switch {
	case id.CRI && id.serviceAccount != "":
		return allowK8s + id.PodNamespace + "/" + id.serviceAccount
	case id.CRI && id.PodNamespace != "":
		return allowK8s + id.PodNamespace
	case !id.CRI && id.ContainerdNamespace != "" && id.Name != "":
		return allowContainerd + id.ContainerdNamespace + "/" + id.Name
	case !id.CRI && id.ContainerdNamespace != "":
		return allowContainerd + id.ContainerdNamespace
	}
	return allowAny
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// allows says whether any entry matches id. Entries that do not parse
// (checked when they were given) match nothing.
func allows(entries []string, id identity) bool {
	for _, s := range entries {
		e, err := parseAllow(s)
		if err == nil && e.matches(id) {
			return true
		}
	}
	return false
}

func (e allowEntry) matches(id identity) bool {
	glob := func(g, v string) bool {
		ok, _ := path.Match(g, v)
		return ok && v != ""
	}
	switch e.kind {
	case allowAny:
		return true
	case allowK8s:
		return id.CRI && glob(e.ns, id.PodNamespace) && (e.other == "" || glob(e.other, id.serviceAccount))
	case allowContainerd:
		return !id.CRI && glob(e.ns, id.ContainerdNamespace) &&
			(e.other == "" || glob(e.other, id.Name) || glob(e.other, id.ID))
	}
	return false
}
