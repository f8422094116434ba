package weights

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// knownSet is what the state file keeps of a set: enough to load it again.
type knownSet struct {
	Name    string   `json:"name"`
	Sources []string `json:"sources"`
	// Allow is nil when not known: a state file from before allow lists
	// named what the runtime vouches for, whose entries are not taken.
	Allow *[]string `json:"allow"`
}

type stateFile struct {
	Sets []knownSet `json:"sets"`
}

func readState(path string) ([]knownSet, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var f stateFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("state file %s: %v: fix or remove it (sets are then forgotten, loaded ones adopted again)", path, err)
	}
	var out []knownSet
	for _, k := range f.Sets {
		if checkName(k.Name) == nil {
			out = append(out, k)
		}
	}
	return out, nil
}

func writeState(path string, sets []knownSet) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if sets == nil {
		sets = []knownSet{}
	}
	b, err := jsonIndent(stateFile{Sets: sets})
	if err != nil {
		return err
	}
	return writeFileAtomic(path, b, 0o644)
}

func jsonIndent(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	return append(b, '\n'), err
}
