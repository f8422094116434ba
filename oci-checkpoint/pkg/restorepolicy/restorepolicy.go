// Package restorepolicy reads the host's restore policy from containerd's
// configuration as the patched containerd's tasks service reads it at
// start: checkpoint_restore_images, checkpoint_restore_keys and
// checkpoint_restore_require_signature, from the config file and the files
// it imports, merged as containerd merges them. The policy itself, its
// patterns' matching and its signature check are the restore engine's own
// code (rekindle.local/restore/checkpointimage), so that `oci-checkpoint
// check` and the restore decide alike.
package restorepolicy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"dario.cat/mergo"
	"github.com/pelletier/go-toml/v2"

	"rekindle.local/restore/checkpointimage"
)

// DefaultConfig is containerd's default configuration file.
const DefaultConfig = "/etc/containerd/config.toml"

// TasksService is the plugin whose table holds the policy's options.
const TasksService = "io.containerd.service.v1.tasks-service"

// Config is the policy's part of a containerd configuration.
type Config struct {
	// File is the configuration file read, Files it and the files it
	// imports, in the order containerd reads them.
	File  string
	Files []string
	// Missing is set when File does not exist: containerd then runs with
	// its defaults, which restore no checkpoint image.
	Missing bool

	Images           []string
	Keys             []string
	RequireSignature bool
	// Address is the socket containerd serves (the grpc server
	// plugin's address, grpc.address before configuration version 4).
	Address string
}

// DefaultAddress is containerd's default socket.
const DefaultAddress = "/run/containerd/containerd.sock"

// file is the part of a containerd configuration file read here, typed as
// containerd's own Config (cmd/containerd/server/config) types it, so that
// merging it as containerd does (mergeConfig) gives containerd's result.
type file struct {
	Version int `toml:"version"`
	GRPC    struct {
		Address string `toml:"address"`
	} `toml:"grpc"`
	Imports []string       `toml:"imports"`
	Plugins map[string]any `toml:"plugins"`
}

// Load reads the policy from containerd configuration file path and its
// imports: each file is decoded and merged into the ones before it in
// containerd's order (the file, then its imports, breadth first, each
// once), with containerd's merge (mergo, overriding, slices appended
// without duplicates).
func Load(path string) (Config, error) {
	c := Config{File: path}
	var out file
	loaded := map[string]bool{}
	pending := []string{path}
	for len(pending) > 0 {
		p := pending[0]
		pending = pending[1:]
		if loaded[p] {
			continue
		}
		b, err := os.ReadFile(p)
		if p == path && errors.Is(err, fs.ErrNotExist) {
			c.Missing, c.Address = true, DefaultAddress
			return c, nil
		}
		if err != nil {
			return c, fmt.Errorf("containerd configuration: %w", err)
		}
		var f file
		if err := toml.Unmarshal(b, &f); err != nil {
			return c, fmt.Errorf("containerd configuration %s: %w", p, err)
		}
		if err := mergo.Merge(&out, f, mergo.WithOverride, mergo.WithTransformers(sliceTransformer{})); err != nil {
			return c, fmt.Errorf("containerd configuration %s: %w", p, err)
		}
		imports, err := resolveImports(p, f.Imports)
		if err != nil {
			return c, fmt.Errorf("containerd configuration %s: imports: %w", p, err)
		}
		loaded[p] = true
		c.Files = append(c.Files, p)
		pending = append(pending, imports...)
	}
	// Version 4 configures the socket on the grpc server plugin, earlier
	// versions in the grpc table.
	grpc, _ := out.Plugins["io.containerd.server.v1.grpc"].(map[string]any)
	if a, ok := grpc["address"].(string); ok && a != "" {
		c.Address = a
	} else if c.Address = out.GRPC.Address; c.Address == "" {
		c.Address = DefaultAddress
	}
	tasks, _ := out.Plugins[TasksService].(map[string]any)
	var err error
	if c.Images, err = strings_(tasks, "checkpoint_restore_images"); err != nil {
		return c, err
	}
	if c.Keys, err = strings_(tasks, "checkpoint_restore_keys"); err != nil {
		return c, err
	}
	if v, ok := tasks["checkpoint_restore_require_signature"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			return c, fmt.Errorf("%s: %v is not true or false", checkpointimage.RequireSignatureOption, v)
		}
		c.RequireSignature = b
	}
	return c, nil
}

// strings_ is table's list of strings key.
func strings_(table map[string]any, key string) ([]string, error) {
	v, ok := table[key]
	if !ok {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s in [plugins.'%s'] is %v, not a list of strings", key, TasksService, v)
	}
	var out []string
	for _, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("%s in [plugins.'%s'] holds %v, not a string", key, TasksService, e)
		}
		out = append(out, s)
	}
	return out, nil
}

// Policy is the policy containerd's tasks service builds from c, with the
// error that stops that service from loading (and so every restore).
func (c Config) Policy() (*checkpointimage.Policy, error) {
	p, err := checkpointimage.NewPolicy(c.Images)
	if err != nil {
		return nil, err
	}
	if err := p.RequireSignatures(c.Keys, c.RequireSignature); err != nil {
		return nil, err
	}
	return p, nil
}

// Source says where c came from, for messages.
func (c Config) Source() string {
	switch {
	case c.Missing:
		return c.File + " (absent: containerd's defaults)"
	case len(c.Files) > 1:
		return c.File + " and its imports " + strings.Join(c.Files[1:], ", ")
	}
	return c.File
}

// Proc is where /proc is read; tests point it elsewhere.
var Proc = "/proc"

// Running returns the configuration file of the containerd process that
// serves socket address (its --config, else DefaultConfig, relative paths
// against its working directory; the socket its --address names, else
// its configuration's grpc.address), and false when no containerd
// process here serves it.
func Running(address string) (string, bool) {
	want := canonical(address)
	dirs, _ := os.ReadDir(Proc)
	for _, d := range dirs {
		pid := d.Name()
		if strings.Trim(pid, "0123456789") != "" {
			continue
		}
		exe, err := os.Readlink(filepath.Join(Proc, pid, "exe"))
		if err != nil || filepath.Base(strings.TrimSuffix(exe, " (deleted)")) != "containerd" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(Proc, pid, "cmdline"))
		if err != nil {
			continue
		}
		config, addr := flagsOf(strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")[1:])
		if config == "" {
			config = DefaultConfig
		}
		if !filepath.IsAbs(config) {
			cwd, err := os.Readlink(filepath.Join(Proc, pid, "cwd"))
			if err != nil {
				continue
			}
			config = filepath.Join(cwd, config)
		}
		if addr == "" {
			c, err := Load(config)
			if err != nil {
				continue
			}
			addr = c.Address
		}
		if canonical(addr) == want {
			return config, true
		}
	}
	return "", false
}

// flagsOf reads containerd's --config (-c) and --address (-a) from its
// arguments, as its command line library takes them.
func flagsOf(args []string) (config, address string) {
	for i := 0; i < len(args); i++ {
		name, value, inline := strings.Cut(args[i], "=")
		var dst *string
		switch name {
		case "--config", "-config", "-c", "--c":
			dst = &config
		case "--address", "-address", "-a", "--a":
			dst = &address
		default:
			continue
		}
		if !inline && i+1 < len(args) {
			i++
			value = args[i]
		}
		*dst = value
	}
	return config, address
}

// canonical is path with its symbolic links resolved, where they can be.
func canonical(path string) string {
	if p, err := filepath.EvalSymlinks(path); err == nil {
		return p
	}
	return filepath.Clean(path)
}

// resolveImports is containerd's: paths relative to the importing file's
// folder, globs expanded.
func resolveImports(parent string, imports []string) ([]string, error) {
	var out []string
	for _, path := range imports {
		path = filepath.Clean(path)
		if !filepath.IsAbs(path) {
			path = filepath.Join(filepath.Dir(parent), path)
		}
		if strings.Contains(path, "*") {
			matches, err := filepath.Glob(path)
			if err != nil {
				return nil, err
			}
			out = append(out, matches...)
		} else {
			out = append(out, path)
		}
	}
	return out, nil
}

// sliceTransformer is containerd's (cmd/containerd/server/config): a
// slice merged into another appends the elements it lacks.
type sliceTransformer struct{}

func (sliceTransformer) Transformer(t reflect.Type) func(dst, src reflect.Value) error {
	if t.Kind() != reflect.Slice {
		return nil
	}
	return func(dst, src reflect.Value) error {
		if !dst.CanSet() {
			return nil
		}
		if src.Type() != dst.Type() {
			return fmt.Errorf("cannot append two slice with different type (%s, %s)", src.Type(), dst.Type())
		}
		for i := 0; i < src.Len(); i++ {
			found := false
			for j := 0; j < dst.Len(); j++ {
				srcv, dstv := src.Index(i), dst.Index(j)
				if !srcv.CanInterface() || !dstv.CanInterface() {
					if srcv.Equal(dstv) {
						found = true
						break
					}
				} else if reflect.DeepEqual(srcv.Interface(), dstv.Interface()) {
					found = true
					break
				}
			}
			if !found {
				dst.Set(reflect.Append(dst, src.Index(i)))
			}
		}
		return nil
	}
}
