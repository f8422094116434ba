package weights

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Status is one set as list and status show it.
type Status struct {
	Name    string   `json:"name"`
	State   string   `json:"state"`
	Dir     string   `json:"dir"`
	Sources []string `json:"sources"`
	Allow   []string `json:"allow"`
	// AllowKnown is false for a set whose allow list was lost (see
	// Service.Ensure): it refuses every container.
	AllowKnown bool      `json:"allow_known"`
	Bytes      int64     `json:"bytes"`
	Progress   int64     `json:"progress"`
	Loads      int       `json:"loads"`
	MappedBy   []int     `json:"mapped_by"`
	Manifest   *Manifest `json:"manifest,omitempty"`
	Error      string    `json:"last_error,omitempty"`
}

func (s *Service) status(st *set) Status {
	s.mu.Lock()
	out := Status{Name: st.name, State: st.state, Dir: s.dir(st.name), Sources: st.sources, Allow: st.allow,
		AllowKnown: st.allowKnown, Bytes: st.bytes, Progress: st.progress.Load(), Loads: st.loads, Manifest: st.manifest}
	if st.err != nil {
		out.Error = st.err.Error()
	}
	var files []string
	if st.manifest != nil && st.state == StateLoaded {
		out.Progress = st.bytes
		for _, f := range st.manifest.Files {
			files = append(files, filepath.Join(out.Dir, f.Name))
		}
	}
	s.mu.Unlock()
	if out.Sources == nil {
		out.Sources = []string{}
	}
	if out.Allow == nil {
		out.Allow = []string{}
	}
	out.MappedBy = mappers(files)
	if out.MappedBy == nil {
		out.MappedBy = []int{}
	}
	return out
}

func (s *Service) get(name string) (*set, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.sets[name]
	if st == nil {
		return nil, errf(404, "weight set %s is not known on this host: load it with 'rekindle-weights load %s FILE|DIR...'", name, name)
	}
	return st, nil
}

// Status returns one set.
func (s *Service) Status(name string) (Status, error) {
	st, err := s.get(name)
	if err != nil {
		return Status{}, err
	}
	return s.status(st), nil
}

// List returns every known set, by name.
func (s *Service) List() []Status {
	s.mu.Lock()
	var sets []*set
	for _, st := range s.sets {
		sets = append(sets, st)
	}
	s.mu.Unlock()
	sort.Slice(sets, func(i, j int) bool { return sets[i].name < sets[j].name })
	out := []Status{}
	for _, st := range sets {
		out = append(out, s.status(st))
	}
	return out
}

// Evict drops a set's contents and keeps it known. It is refused while
// a process maps the set's files, unless force: those processes keep the
// pages they map until they unmap them.
func (s *Service) Evict(name string, force bool) (Status, error) {
	st, err := s.get(name)
	if err != nil {
		return Status{}, err
	}
	s.mu.Lock()
	err = s.evictLocked(st, force)
	s.mu.Unlock()
	if err != nil {
		return Status{}, err
	}
	return s.status(st), nil
}

func (s *Service) evictLocked(st *set, force bool) error {
	if st.state == StateLoading {
		return errf(409, "weight set %s is loading: wait for the load to end, then evict it", st.name)
	}
	dir := s.dir(st.name)
	ents, _ := os.ReadDir(dir)
	var files []string
	for _, e := range ents {
		files = append(files, filepath.Join(dir, e.Name()))
	}
	if pids := mappers(files); len(pids) > 0 && !force {
		return errf(409, "weight set %s is mapped by pid(s) %s: stop those engines first, or pass --force "+
			"(they keep the pages they map, and the memory is freed when they unmap it)", st.name, describePids(pids))
	}
	if err := clearDir(dir); err != nil {
		return err
	}
	if st.state == StateLoaded {
		s.cfg.Log.Printf("set %s: evicted (%s freed)", st.name, HumanSize(st.bytes))
	}
	st.state, st.manifest, st.bytes, st.err = StateKnown, nil, 0, nil
	st.progress.Store(0)
	return nil
}

// Forget evicts a set and drops it from the known sets and the CDI spec.
func (s *Service) Forget(name string, force bool) error {
	st, err := s.get(name)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.evictLocked(st, force); err != nil {
		return err
	}
	delete(s.sets, name)
	os.Remove(s.dir(name))
	s.cfg.Log.Printf("set %s: forgotten", name)
	return s.saveLocked()
}

// EnsureResult says what Ensure did.
type EnsureResult struct {
	LoadedNow bool     `json:"loaded_now"`
	Sources   []string `json:"sources"`
	// Container is the container as the service knows it, for messages.
	Container string `json:"container"`
	Status    Status `json:"status"`
}

// identify adds to what the hook read the service's verdict on the pod's
// service account token.
func (s *Service) identify(c Container) identity {
	id := identity{Container: c}
	if !c.CRI {
		return id
	}
	sa, err := verifyToken(c, s.cfg.SAKeys, time.Now())
	if err != nil {
		id.saWhy = err.Error()
	}
	id.serviceAccount = sa
	return id
}

// Ensure is the container hook's request: the container may map the set,
// and the set is loaded when Ensure returns (with CheckOnly, Ensure only
// checks, and answers the set's state).
func (s *Service) Ensure(req EnsureRequest) (EnsureResult, error) {
	name := req.Name
	if req.Container.ID == "" {
		return EnsureResult{}, errf(400, "the request for weight set %s names no container", name)
	}
	id := s.identify(req.Container)
	st, err := s.get(name)
	if err != nil {
		return EnsureResult{}, errf(404, "container %s asks for weight set %s, which is not known on this host: "+
			"load it first with 'rekindle-weights load --allow %s %s FILE|DIR...'", id, name, id.suggest(), name)
	}
	s.mu.Lock()
	allow, known, state, srcs := st.allow, st.allowKnown, st.state, st.sources
	s.mu.Unlock()
	switch {
	case !known:
		return EnsureResult{}, errf(403, "container %s may not map weight set %s: the set's allow list is not known "+
			"(the set was adopted from a manifest that keeps none, and the state file holds none in the current form): "+
			"give it one with 'rekindle-weights load --allow ENTRY... %s', e.g. --allow %s (entries: %s)",
			id, name, name, id.suggest(), allowForms)
	case len(allow) == 0:
		return EnsureResult{}, errf(403, "container %s may not map weight set %s: the set allows no container "+
			"(it was loaded without --allow): allow this one with 'rekindle-weights load --allow %s %s'",
			id, name, id.suggest(), name)
	case !allows(allow, id):
		return EnsureResult{}, errf(403, "container %s may not map weight set %s (allowed: %s): run it where the set allows, "+
			"or allow it with '%s' (--allow replaces the list)", id, name, strings.Join(allow, " "), allowCommand(name, allow, id.suggest()))
	}
	res := EnsureResult{Sources: srcs, Container: id.String()}
	if req.CheckOnly {
		res.Status = s.status(st)
		return res, nil
	}
	if state != StateLoaded {
		res.LoadedNow = true
		s.cfg.Log.Printf("set %s: container %s needs it and it is not loaded: loading it from %v", name, id, srcs)
	}
	res.Status, err = s.Load(LoadRequest{Name: name})
	return res, err
}

// allowCommand is the load command that adds entry to a set's list.
func allowCommand(name string, allow []string, entry string) string {
	cmd := "rekindle-weights load"
	for _, a := range append(append([]string{}, allow...), entry) {
		cmd += " --allow " + shellQuote(a)
	}
	return cmd + " " + name
}

func shellQuote(s string) string {
	if strings.ContainsAny(s, "*?[]\\ '\"$`") {
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	return s
}
