// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

//go:build !linux

package checkpointimage

import "errors"

type lockedFile struct{}

func openPages(string) ([]lockedFile, int64, error) {
	return nil, 0, errors.New("preheating checkpoint images needs Linux")
}

func openMatching(string, func(string) bool) ([]lockedFile, int64, error) {
	return nil, 0, errors.New("preheating checkpoint images needs Linux")
}

func lockFiles([]lockedFile) error { return nil }

func closeFiles([]lockedFile) {}
