//go:build !linux

// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package checkpointimage

import (
	"errors"
	"os"
)

var errNotLinux = errors.New("only on Linux")

func cachedPercent(string) (int, error) { return 0, errNotLinux }

func residency(*os.File) ([]byte, error) { return nil, errNotLinux }

func idleIOPriority() error { return errNotLinux }

func openRegular(string) (*os.File, error) { return nil, errNotLinux }
