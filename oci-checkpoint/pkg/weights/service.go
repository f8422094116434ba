// Package weights keeps named sets of safetensors files in shared memory
// (a tmpfs or hugetlbfs under ROOT/sets) for inference engines to map and
// register with CUDA once, across checkpoint and restore. See
// docs/weights.md.
package weights

import (
	"crypto"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Set states.
const (
	StateKnown   = "known"
	StateLoading = "loading"
	StateLoaded  = "loaded"
)

// Config is where the service keeps its sets and what it may use.
type Config struct {
	Root      string // sets live in Root/sets/NAME
	StatePath string // known sets, kept across reboots
	CDIDir    string // where the CDI spec goes ("" writes none)
	Hook      []string
	// SAKeys verify the service account tokens of CRI containers
	// (satoken.go); none: allow entries may not name service accounts.
	SAKeys    []crypto.PublicKey
	Quota     int64 // bytes; 0 = no limit
	Readers   int
	ChunkSize int64
	Log       *log.Logger
}

// Error carries an HTTP-like status: 404 unknown, 409 conflict, 403 refused.
type Error struct {
	Code int
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

func errf(code int, format string, a ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, a...)}
}

type set struct {
	name    string
	sources []string
	allow   []string
	// allowKnown: allow is the set's list. A set adopted from a manifest
	// that keeps none, with no state file entry that does, refuses every
	// container until it is loaded again with --allow.
	allowKnown bool
	state      string
	bytes      int64 // of the sources being loaded, or of the loaded files
	progress   atomic.Int64
	loads      int
	manifest   *Manifest
	done       chan struct{} // closed when the running load ends
	err        error         // of the last load
}

// Service holds the known sets.
type Service struct {
	cfg  Config
	mu   sync.Mutex
	sets map[string]*set
	// readHook lets tests count the loads that really read.
	readHook func(name string)
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

func checkName(name string) error {
	if !nameRE.MatchString(name) {
		return errf(400, "bad set name %q: use letters, digits, '.', '_' and '-' (at most 64, starting with a letter or digit)", name)
	}
	return nil
}

// Open reads the state file and adopts the sets whose manifests are in
// place under Root/sets (a restart of the service reads no weights again).
func Open(cfg Config) (*Service, error) {
	if cfg.Log == nil {
		cfg.Log = log.New(io.Discard, "", 0)
	}
	if cfg.Readers <= 0 {
		cfg.Readers = 8
	}
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = 8 << 20
	}
	cfg.ChunkSize = (cfg.ChunkSize + align - 1) / align * align
	s := &Service{cfg: cfg, sets: map[string]*set{}}
	known, err := readState(cfg.StatePath)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(s.setsDir(), 0o755); err != nil {
		return nil, err
	}
	for _, k := range known {
		st := &set{name: k.Name, sources: k.Sources, state: StateKnown}
		if k.Allow != nil && checkAllow(*k.Allow, true) == nil {
			st.allow, st.allowKnown = *k.Allow, true
		} else if k.Allow != nil {
			cfg.Log.Printf("set %s: the state file's allow list %q is of an older form (entries now name what the runtime vouches for: %s); "+
				"containers are refused until it is loaded again with --allow", k.Name, *k.Allow, allowForms)
		}
		s.sets[k.Name] = st
	}
	// Sets loaded by an earlier run whose state file was lost still count,
	// with the allow list their manifest keeps.
	ents, _ := os.ReadDir(s.setsDir())
	for _, e := range ents {
		if e.IsDir() && s.sets[e.Name()] == nil && checkName(e.Name()) == nil {
			if m, _ := readManifest(s.dir(e.Name())); m != nil {
				s.sets[e.Name()] = &set{name: e.Name(), sources: m.Sources, state: StateKnown}
			}
		}
	}
	for _, st := range s.sets {
		dir := s.dir(st.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		removePartials(dir)
		m, err := readManifest(dir)
		if err != nil {
			cfg.Log.Printf("set %s: %v: clearing it, it will load again when asked", st.name, err)
		}
		if m == nil {
			// Files without a manifest are a load that did not finish.
			if err := clearDir(dir); err != nil {
				return nil, fmt.Errorf("clear %s: %w", dir, err)
			}
			continue
		}
		st.state, st.manifest, st.bytes = StateLoaded, m, m.Bytes
		switch {
		case m.allowKnown:
			// The manifest is written before the state file: it is the
			// newer of the two.
			st.allow, st.allowKnown = m.Allow, true
		case st.allowKnown:
			// A manifest from before allow lists were kept there: keep it
			// there now, so a lost state file no longer loses it.
			if err := s.writeManifestLocked(st); err != nil {
				cfg.Log.Printf("set %s: keep the allow list in its manifest: %v", st.name, err)
			}
		}
		allow := fmt.Sprintf("allow %q", st.allow)
		if !st.allowKnown {
			allow = "allow list not known: every container is refused until it is loaded again with --allow"
		}
		cfg.Log.Printf("set %s: adopted, loaded at %s (%s in %d files; %s)", st.name, m.LoadedAt, HumanSize(m.Bytes), len(m.Files), allow)
	}
	if err := s.saveLocked(); err != nil {
		return nil, err
	}
	return s, nil
}

// writeManifestLocked rewrites a loaded set's manifest with its allow
// list; a set that is not loaded has none (its list is in the state file).
func (s *Service) writeManifestLocked(st *set) error {
	if st.state != StateLoaded || st.manifest == nil {
		return nil
	}
	m := *st.manifest
	m.Allow, m.allowKnown = nil, st.allowKnown
	if st.allowKnown {
		m.Allow = append([]string{}, st.allow...)
	}
	if err := writeManifest(s.dir(st.name), &m); err != nil {
		return fmt.Errorf("weight set %s: write its manifest: %w", st.name, err)
	}
	st.manifest = &m
	return nil
}

func (s *Service) setsDir() string        { return filepath.Join(s.cfg.Root, "sets") }
func (s *Service) dir(name string) string { return filepath.Join(s.setsDir(), name) }

// saveLocked writes the state file and the CDI spec from the known sets.
func (s *Service) saveLocked() error {
	names := make([]string, 0, len(s.sets))
	for n := range s.sets {
		names = append(names, n)
	}
	sort.Strings(names)
	var known []knownSet
	for _, n := range names {
		st := s.sets[n]
		k := knownSet{Name: n, Sources: st.sources}
		if st.allowKnown {
			allow := append([]string{}, st.allow...)
			k.Allow = &allow
		}
		known = append(known, k)
	}
	if err := writeState(s.cfg.StatePath, known); err != nil {
		return err
	}
	if s.cfg.CDIDir == "" {
		return nil
	}
	return writeCDI(s.cfg.CDIDir, s.setsDir(), s.cfg.Hook, names)
}

// LoadRequest asks for a set; Paths may be empty for a known set.
type LoadRequest struct {
	Name     string   `json:"name"`
	Paths    []string `json:"paths,omitempty"`
	Allow    []string `json:"allow,omitempty"`
	SetAllow bool     `json:"set_allow,omitempty"`
}

// Load loads a set and returns when it is loaded. Concurrent loads of one
// set wait for the same read; a loaded set with the same sources returns
// at once.
func (s *Service) Load(req LoadRequest) (Status, error) {
	if err := checkName(req.Name); err != nil {
		return Status{}, err
	}
	if req.SetAllow {
		if err := checkAllow(req.Allow, len(s.cfg.SAKeys) > 0); err != nil {
			return Status{}, err
		}
	}
	srcs, err := expandPaths(req.Paths)
	if err != nil {
		return Status{}, err
	}
	s.mu.Lock()
	st := s.sets[req.Name]
	if len(srcs) == 0 {
		if st == nil {
			s.mu.Unlock()
			return Status{}, errf(404, "weight set %s is not known on this host: load it with 'rekindle-weights load %s FILE|DIR...'", req.Name, req.Name)
		}
		srcs = st.sources
	}
	if st != nil && st.state != StateKnown && !slices.Equal(st.sources, srcs) {
		s.mu.Unlock()
		return Status{}, errf(409, "weight set %s is %s from other files (%v): evict it first (rekindle-weights evict %s)", req.Name, st.state, st.sources, req.Name)
	}
	if st != nil && req.SetAllow && (!st.allowKnown || !slices.Equal(st.allow, req.Allow)) {
		st.allow, st.allowKnown = append([]string{}, req.Allow...), true
		// The manifest first: Open takes its list over the state file's.
		err := s.writeManifestLocked(st)
		if err == nil {
			err = s.saveLocked()
		}
		if err != nil {
			s.mu.Unlock()
			return Status{}, err
		}
		s.cfg.Log.Printf("set %s: allow %q", st.name, st.allow)
	}
	if st != nil && st.state == StateLoading {
		done := st.done
		s.mu.Unlock()
		s.cfg.Log.Printf("set %s: already loading: this request waits for that load", req.Name)
		<-done
		return s.result(st)
	}
	if st != nil && st.state == StateLoaded {
		s.mu.Unlock()
		return s.status(st), nil
	}
	jobs, need, err := s.plan(req.Name, srcs)
	if err != nil {
		s.mu.Unlock()
		return Status{}, err
	}
	if err := checkQuota(req.Name, need, s.usedLocked(), s.cfg.Quota); err != nil {
		s.mu.Unlock()
		return Status{}, errf(507, "%v", err)
	}
	isNew := st == nil
	if isNew {
		// A new set's list is known even when empty (no --allow): it
		// allows no container until it is given entries.
		st = &set{name: req.Name, allow: append([]string{}, req.Allow...), allowKnown: true}
		s.sets[req.Name] = st
	}
	st.sources, st.state, st.bytes, st.done = srcs, StateLoading, need, make(chan struct{})
	st.progress.Store(0)
	st.loads++
	if err := os.MkdirAll(s.dir(req.Name), 0o755); err == nil {
		err = s.saveLocked()
	}
	if err != nil {
		st.state, st.err = StateKnown, err
		close(st.done)
		s.mu.Unlock()
		return Status{}, err
	}
	s.mu.Unlock()

	m, err := s.read(st, jobs)
	s.mu.Lock()
	st.err = err
	if err != nil {
		st.state = StateKnown
		if isNew {
			// A set whose first load failed is not worth knowing.
			delete(s.sets, st.name)
			os.Remove(s.dir(st.name))
			if serr := s.saveLocked(); serr != nil {
				s.cfg.Log.Printf("save state: %v", serr)
			}
		}
	} else {
		st.state, st.manifest, st.bytes = StateLoaded, m, m.Bytes
	}
	close(st.done)
	s.mu.Unlock()
	return s.result(st)
}

func (s *Service) result(st *set) (Status, error) {
	s.mu.Lock()
	err := st.err
	s.mu.Unlock()
	if err != nil {
		return Status{}, err
	}
	return s.status(st), nil
}

// expandPaths turns files and directories (their *.safetensors) into a
// sorted list of absolute file paths.
func expandPaths(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		fi, err := os.Stat(abs)
		if err != nil {
			return nil, errf(400, "source %s: %v", p, errors.Unwrap(err))
		}
		if !fi.IsDir() {
			out = append(out, abs)
			continue
		}
		m, _ := filepath.Glob(filepath.Join(abs, "*.safetensors"))
		if len(m) == 0 {
			return nil, errf(400, "directory %s holds no *.safetensors files", p)
		}
		sort.Strings(m)
		out = append(out, m...)
	}
	return out, nil
}

// plan checks every source before any data is read.
func (s *Service) plan(name string, srcs []string) ([]copyJob, int64, error) {
	var jobs []copyJob
	var need int64
	seen := map[string]string{}
	for _, src := range srcs {
		base := filepath.Base(src)
		if prev, ok := seen[base]; ok {
			return nil, 0, errf(400, "%s and %s have the same file name; a set holds files under their base names", prev, src)
		}
		if base == ManifestName {
			return nil, 0, errf(400, "%s: a source may not be named %s", src, ManifestName)
		}
		seen[base] = src
		size, err := CheckSafetensors(src)
		if err != nil {
			return nil, 0, errf(400, "weight set %s: %v", name, err)
		}
		jobs = append(jobs, copyJob{src: src, dst: filepath.Join(s.dir(name), partialPrefix+base), size: size})
		need += size
	}
	return jobs, need, nil
}

func (s *Service) usedLocked() int64 {
	var used int64
	for _, st := range s.sets {
		if st.state != StateKnown {
			used += st.bytes
		}
	}
	return used
}

// read fills the set's directory in place: partial files, renamed when all
// are complete, the manifest last. A failure leaves the directory empty.
func (s *Service) read(st *set, jobs []copyJob) (*Manifest, error) {
	dir := s.dir(st.name)
	if s.readHook != nil {
		s.readHook(st.name)
	}
	start := time.Now()
	fail := func(err error) (*Manifest, error) {
		clearDir(dir)
		s.cfg.Log.Printf("set %s: load failed: %v", st.name, err)
		return nil, err
	}
	if err := clearDir(dir); err != nil {
		return fail(err)
	}
	s.cfg.Log.Printf("set %s: loading %s from %d file(s) with %d readers", st.name, HumanSize(st.bytes), len(jobs), s.cfg.Readers)
	if err := copyFiles(jobs, s.cfg.Readers, s.cfg.ChunkSize, &st.progress, s.cfg.Log); err != nil {
		return fail(fmt.Errorf("load weight set %s: %w", st.name, err))
	}
	secs := time.Since(start).Seconds()
	m := &Manifest{Name: st.name, Bytes: st.bytes, Sources: st.sources, LoadedAt: time.Now().UTC().Format(time.RFC3339),
		LoadSeconds: secs, GBps: float64(st.bytes) / 1e9 / max(secs, 1e-9)}
	for _, j := range jobs {
		base := filepath.Base(j.src)
		final := filepath.Join(dir, base)
		if err := os.Chmod(j.dst, 0o444); err != nil {
			return fail(err)
		}
		if err := os.Rename(j.dst, final); err != nil {
			return fail(err)
		}
		m.Files = append(m.Files, File{Name: base, Size: j.size})
	}
	// Under the lock: a load --allow while this one runs changes the
	// list, and the manifest must keep the latest.
	s.mu.Lock()
	if m.allowKnown = st.allowKnown; m.allowKnown {
		m.Allow = append([]string{}, st.allow...)
	}
	err := writeManifest(dir, m)
	s.mu.Unlock()
	if err != nil {
		return fail(err)
	}
	s.cfg.Log.Printf("set %s: loaded %s in %.2fs (%.2f GB/s)", st.name, HumanSize(st.bytes), secs, m.GBps)
	return m, nil
}
