package weights

import (
	"os"
	"path"
	"path/filepath"
	"sort"
)

// Status is one set as list and status show it.
type Status struct {
	Name     string    `json:"name"`
	State    string    `json:"state"`
	Dir      string    `json:"dir"`
	Sources  []string  `json:"sources"`
	Allow    []string  `json:"allow"`
	Bytes    int64     `json:"bytes"`
	Progress int64     `json:"progress"`
	Loads    int       `json:"loads"`
	MappedBy []int     `json:"mapped_by"`
	Manifest *Manifest `json:"manifest,omitempty"`
	Error    string    `json:"last_error,omitempty"`
}

func (s *Service) status(st *set) Status {
	s.mu.Lock()
	out := Status{Name: st.name, State: st.state, Dir: s.dir(st.name), Sources: st.sources, Allow: st.allow,
		Bytes: st.bytes, Progress: st.progress.Load(), Loads: st.loads, Manifest: st.manifest}
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
	Status    Status   `json:"status"`
}

// Ensure is the container hook's request: container (name or id) may map
// set, and the set is loaded when Ensure returns.
func (s *Service) Ensure(name, id, container string) (EnsureResult, error) {
	st, err := s.get(name)
	if err != nil {
		return EnsureResult{}, errf(404, "container %s asks for weight set %s, which is not known on this host: "+
			"load it first with 'rekindle-weights load %s FILE|DIR...'", describe(id, container), name, name)
	}
	s.mu.Lock()
	allow, state, srcs := st.allow, st.state, st.sources
	s.mu.Unlock()
	if !allowed(allow, id, container) {
		return EnsureResult{}, errf(403, "container %s may not map weight set %s (allowed: %v): "+
			"run it under a name the set allows, or load the set again with an --allow that matches it", describe(id, container), name, allow)
	}
	res := EnsureResult{Sources: srcs}
	if state != StateLoaded {
		res.LoadedNow = true
		s.cfg.Log.Printf("set %s: container %s needs it and it is not loaded: loading it from %v", name, describe(id, container), srcs)
	}
	res.Status, err = s.Load(LoadRequest{Name: name})
	return res, err
}

func describe(id, name string) string {
	if name == "" {
		return id
	}
	return name + " (" + id + ")"
}

// allowed matches the container's name and id against the set's globs;
// an empty list allows any container.
func allowed(globs []string, id, name string) bool {
	if len(globs) == 0 {
		return true
	}
	for _, g := range globs {
		for _, v := range []string{name, id} {
			if ok, _ := path.Match(g, v); ok && v != "" {
				return true
			}
		}
	}
	return false
}
