package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFindIdle: only a process whose command line is exactly the helper's
// idle one is armed again; a waiter, another program that names the
// helper, or a lookalike are not.
func TestFindIdle(t *testing.T) {
	proc := t.TempDir()
	for pid, cmdline := range map[string]string{
		"1":    "python3\x00-u\x00/engine/server.py\x00",
		"7":    "/.rekindle/rekindle-wake\x00wait\x00--engine\x00sglang\x00",
		"9":    "/bin/sh\x00-c\x00rekindle-wake idle\x00",
		"11":   "/tmp/not-rekindle-wake\x00idle\x00",
		"self": "x",
	} {
		os.MkdirAll(filepath.Join(proc, pid), 0o755)
		os.WriteFile(filepath.Join(proc, pid, "cmdline"), []byte(cmdline), 0o644)
	}
	if got := findIdle(proc); got != 0 {
		t.Fatalf("found %d, want none", got)
	}
	os.MkdirAll(filepath.Join(proc, "12"), 0o755)
	os.WriteFile(filepath.Join(proc, "12", "cmdline"), []byte("/.rekindle/rekindle-wake\x00idle\x00"), 0o644)
	if got := findIdle(proc); got != 12 {
		t.Fatalf("found %d, want 12", got)
	}
}
