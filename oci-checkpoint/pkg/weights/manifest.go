package weights

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ManifestName marks a set's directory as loaded and complete; it is
// written last, by rename, so a set with a manifest is never partial.
const ManifestName = "rekindle-set.json"

// partialPrefix names files being filled; a rename makes them visible.
const partialPrefix = ".partial-"

// File is one file of a loaded set.
type File struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
}

// Manifest describes a loaded set (ROOT/sets/NAME/rekindle-set.json).
type Manifest struct {
	Name        string   `json:"name"`
	Files       []File   `json:"files"`
	Bytes       int64    `json:"bytes"`
	LoadedAt    string   `json:"loaded_at"`
	Sources     []string `json:"sources"`
	LoadSeconds float64  `json:"load_seconds"`
	GBps        float64  `json:"gbps"`
	// Allow is the set's allow list (see allow.go), kept here so that a
	// set adopted without its state file still has it; null in a
	// manifest written before, whose set refuses every container until
	// it is given one.
	Allow []string `json:"allow"`
	// allowKnown: Allow was present and every entry parses.
	allowKnown bool
}

// readManifest returns the manifest of the set in dir when it is present
// and every file it names is there with its size; nil when not loaded.
func readManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, ManifestName), err)
	}
	var probe struct {
		Allow *[]string `json:"allow"`
	}
	json.Unmarshal(b, &probe)
	m.allowKnown = probe.Allow != nil && checkAllow(*probe.Allow, true) == nil
	if !m.allowKnown {
		m.Allow = nil
	}
	for _, f := range m.Files {
		st, err := os.Stat(filepath.Join(dir, f.Name))
		if err != nil {
			return nil, fmt.Errorf("manifest of %s names %s: %w", dir, f.Name, err)
		}
		if st.Size() != f.Size {
			return nil, fmt.Errorf("manifest of %s: %s is %d bytes, the manifest says %d", dir, f.Name, st.Size(), f.Size)
		}
	}
	return &m, nil
}

// writeManifest writes m into dir, last and by rename; its allow list
// is null when not known, [] when it allows no container.
func writeManifest(dir string, m *Manifest) error {
	if m.allowKnown && m.Allow == nil {
		m.Allow = []string{}
	}
	if !m.allowKnown {
		m.Allow = nil
	}
	data, err := jsonIndent(m)
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, ManifestName), data, 0o444)
}

// writeFileAtomic writes data to path through a temporary file in the
// same directory and a rename.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := filepath.Join(filepath.Dir(path), partialPrefix+filepath.Base(path))
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// clearDir removes every file in a set's directory (the directory itself
// stays: containers bind it by inode). The manifest goes first, so a
// half-cleared set never looks loaded.
func clearDir(dir string) error {
	if err := os.Remove(filepath.Join(dir, ManifestName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// removePartials drops files a load that was killed left behind.
func removePartials(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), partialPrefix) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
