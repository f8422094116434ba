package restorepolicy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestLoad: the policy as containerd reads it: the file, then its imports
// (relative to it, globs), merged as containerd merges them; a missing
// file is containerd's defaults (no image restores).
func TestLoad(t *testing.T) {
	const tasks = "[plugins.'io.containerd.service.v1.tasks-service']\n"
	for _, tc := range []struct {
		name    string
		files   map[string]string // under a temp dir; config.toml is read
		images  []string
		keys    []string
		require bool
		missing bool
		err     string
	}{
		{name: "no file", missing: true},
		{name: "no policy", files: map[string]string{"config.toml": "version = 3\n"}},
		{name: "in the file", files: map[string]string{"config.toml": "version = 3\n" + tasks + "  checkpoint_restore_images = [\"rekindle.local\"]\n"},
			images: []string{"rekindle.local"}},
		{name: "in an import, as the playbook's drop-in", files: map[string]string{
			"config.toml":          "version = 3\nimports = [\"conf.d/*.toml\"]\n",
			"conf.d/rekindle.toml": "version = 3\n" + tasks + "  checkpoint_restore_images = [\"registry.example.com/inference\", \"127.0.0.1:*\"]\n  checkpoint_restore_keys = [\"/etc/rekindle/keys/team.pub\"]\n  checkpoint_restore_require_signature = true\n",
		}, images: []string{"registry.example.com/inference", "127.0.0.1:*"}, keys: []string{"/etc/rekindle/keys/team.pub"}, require: true},
		{name: "an import adds to a list and overrides a switch", files: map[string]string{
			"config.toml": "version = 3\nimports = [\"more.toml\"]\n" + tasks + "  checkpoint_restore_images = [\"rekindle.local\"]\n  checkpoint_restore_require_signature = false\n",
			"more.toml":   "version = 3\n" + tasks + "  checkpoint_restore_images = [\"rekindle.local\", \"127.0.0.1:*\"]\n  checkpoint_restore_require_signature = true\n",
		}, images: []string{"rekindle.local", "127.0.0.1:*"}, require: true},
		{name: "a missing import", files: map[string]string{"config.toml": "version = 3\nimports = [\"gone.toml\"]\n"}, err: "gone.toml"},
		{name: "not TOML", files: map[string]string{"config.toml": "version = \n"}, err: "config.toml"},
		{name: "not a list", files: map[string]string{"config.toml": "version = 3\n" + tasks + "  checkpoint_restore_images = \"rekindle.local\"\n"},
			err: "checkpoint_restore_images in [plugins.'io.containerd.service.v1.tasks-service'] is rekindle.local, not a list of strings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range tc.files {
				p := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			c, err := Load(filepath.Join(dir, "config.toml"))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.Images, tc.images) || !slices.Equal(c.Keys, tc.keys) || c.RequireSignature != tc.require || c.Missing != tc.missing {
				t.Errorf("got %+v, want images %q, keys %q, require %v, missing %v", c, tc.images, tc.keys, tc.require, tc.missing)
			}
		})
	}
}

// TestPolicy: the policy is the restore engine's, decided by its code: an
// image outside the patterns is refused naming the option and the fix, a
// bad pattern or a required signature without keys stops containerd's
// tasks service (nothing restores).
func TestPolicy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		c     Config
		image string
		err   string // of Policy, then of Check; "" for none
	}{
		{name: "README's name, the test policy", c: Config{Images: []string{"rekindle.local", "127.0.0.1:*"}}, image: "registry.example/engine:ckpt",
			err: `checkpoint image registry.example/engine:ckpt may not be restored on this host: this host restores only the checkpoint images that checkpoint_restore_images in [plugins.'io.containerd.service.v1.tasks-service'] allows, and ["registry.example/engine"] matches none of its patterns (it holds ["rekindle.local", "127.0.0.1:*"]); to restore it, add "registry.example/engine", or a pattern that matches it such as "registry.example", to that list and restart containerd`},
		{name: "allowed", c: Config{Images: []string{"rekindle.local", "127.0.0.1:*"}}, image: "127.0.0.1:5000/rekindle/ckpt:1"},
		{name: "containerd's default", c: Config{Missing: true}, image: "rekindle.local/ckpt:engine", err: "it is empty, so no checkpoint image restores"},
		{name: "a pattern with a digest", c: Config{Images: []string{"rekindle.local@sha256:00"}}, image: "rekindle.local/x:1", err: "names a digest"},
		{name: "a signature required, no key", c: Config{Images: []string{"rekindle.local"}, RequireSignature: true}, image: "rekindle.local/x:1",
			err: "lists no public key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tc.c.Policy()
			if err == nil {
				err = p.Check(tc.image, nil)
			}
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want one with %q", err, tc.err)
			}
		})
	}
}

// TestRunning: the configuration of the containerd that serves a socket is
// found from its command line: --config (relative to its working
// directory) or the default, the socket its --address or its
// configuration's grpc.address names.
func TestRunning(t *testing.T) {
	proc, dir := t.TempDir(), t.TempDir()
	write := func(p, body string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	process := func(pid, exe, cwd string, args ...string) {
		os.MkdirAll(filepath.Join(proc, pid), 0o755)
		os.Symlink(exe, filepath.Join(proc, pid, "exe"))
		os.Symlink(cwd, filepath.Join(proc, pid, "cwd"))
		write(filepath.Join(proc, pid, "cmdline"), strings.Join(append([]string{exe}, args...), "\x00")+"\x00")
	}
	write(filepath.Join(dir, "a/config.toml"), "version = 3\n[grpc]\n  address = \""+dir+"/a/containerd.sock\"\n")
	write(filepath.Join(dir, "b/config.toml"), "version = 3\n")
	write(filepath.Join(dir, "c/config.toml"), "version = 4\n[plugins.'io.containerd.server.v1.grpc']\n  address = \""+dir+"/c/containerd.sock\"\n")
	process("13", "/opt/rekindle/bin/containerd", "/", "--config", dir+"/c/config.toml")
	process("10", "/usr/bin/bash", "/", "--config", dir+"/b/config.toml")
	process("11", "/opt/rekindle/bin/containerd", "/", "--config", dir+"/a/config.toml")
	process("12", "/opt/rekindle/bin/containerd", dir+"/b", "-c", "config.toml", "--address="+dir+"/b/other.sock")
	old := Proc
	Proc = proc
	t.Cleanup(func() { Proc = old })
	for _, tc := range []struct {
		address, want string
		ok            bool
	}{
		{dir + "/a/containerd.sock", dir + "/a/config.toml", true},
		{dir + "/b/other.sock", dir + "/b/config.toml", true},
		{dir + "/c/containerd.sock", dir + "/c/config.toml", true},
		{DefaultAddress, "", false},
	} {
		got, ok := Running(tc.address)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Running(%s) = %q, %v; want %q, %v", tc.address, got, ok, tc.want, tc.ok)
		}
	}
}
