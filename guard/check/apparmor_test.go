// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/checkpoint-restore/go-criu/v8/crit/images/apparmor"
	"google.golang.org/protobuf/proto"
)

func TestCheckRestorePrivilegesApparmorNamespaces(t *testing.T) {
	for _, tc := range []struct {
		name  string
		entry *apparmor.ApparmorEntry
		err   string
	}{
		{name: "no namespace", entry: &apparmor.ApparmorEntry{}},
		{
			name: "a namespace with a policy",
			entry: &apparmor.ApparmorEntry{Namespaces: []*apparmor.AaNamespace{{
				Name:     proto.String("rekindle"),
				Policies: []*apparmor.AaPolicy{{Name: proto.String("p"), Blob: []byte("policy")}},
			}}},
			err: `apparmor.img holds AppArmor namespace "rekindle"`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := images(t, thread())
			writeImage(t, dir.Name(), "apparmor.img", "APPARMOR", tc.entry)
			err := Restore(dir, &Process{}, defaultConfig(), "")
			if tc.err == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			t.Log(err)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("want an error with %q, got %v", tc.err, err)
			}
		})
	}
	// A symlink is not followed to a file outside the images.
	dir := images(t, thread())
	if err := os.Symlink("/etc/passwd", filepath.Join(dir.Name(), "apparmor.img")); err != nil {
		t.Fatal(err)
	}
	if err := Restore(dir, &Process{}, defaultConfig(), ""); err == nil {
		t.Fatal("restored with apparmor.img a symlink")
	}
}
