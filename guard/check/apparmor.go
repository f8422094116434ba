// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"errors"
	"fmt"
	"os"

	"github.com/checkpoint-restore/go-criu/v8/crit/images/apparmor"
)

// checkApparmorNamespaces refuses images that carry AppArmor namespaces:
// CRIU loads their policy into the host's kernel before it restores a task.
func checkApparmorNamespaces(dir *os.File) error {
	entries, err := readImage(dir, "apparmor.img", "APPARMOR", &apparmor.ApparmorEntry{})
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	for _, e := range entries {
		if ns := e.(*apparmor.ApparmorEntry).GetNamespaces(); len(ns) > 0 {
			return fmt.Errorf("checkpoint image apparmor.img holds AppArmor namespace %q, whose policy CRIU would load into the host's kernel",
				ns[0].GetName())
		}
	}
	return nil
}
