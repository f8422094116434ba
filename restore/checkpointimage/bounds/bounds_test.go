// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package bounds

import (
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfigParse(t *testing.T) {
	b, err := Config{MaxDecodedPages: "64GiB"}.Parse()
	require.NoError(t, err)
	assert.Equal(t, int64(64<<30), b.MaxDecodedPages)
	assert.Equal(t, DefaultTimeout, b.Timeout)

	b, err = Config{Timeout: "90s"}.Parse()
	require.NoError(t, err)
	assert.Equal(t, 90*time.Second, b.Timeout)
	for _, bad := range []string{"soon", "0s", "-1m"} {
		_, err := Config{Timeout: bad}.Parse()
		require.Error(t, err, bad)
		assert.Contains(t, err.Error(), "checkpoint_restore_timeout")
	}

	b, err = Config{}.Parse()
	require.NoError(t, err)
	assert.Equal(t, memTotal()/2, b.MaxDecodedPages, "the default is half the host's memory")

	for _, bad := range []string{"lots", "-1GiB", "0"} {
		_, err := Config{MaxDecodedPages: bad}.Parse()
		require.Error(t, err, bad)
		assert.Contains(t, err.Error(), "checkpoint_restore_max_decoded_pages")
	}
}

// The host's bounds replace whatever the container's creator wrote in
// the spec under their names.
func TestSetReplacesTheCreatorsAnnotations(t *testing.T) {
	spec := specs.Spec{Annotations: map[string]string{
		MaxDecodedPagesAnnotation: "1000000000000000",
		TimeoutAnnotation:         "1000h",
		"other":                   "kept",
	}}
	Bounds{MaxDecodedPages: 1 << 30, Timeout: time.Minute}.Set(&spec)
	assert.Equal(t, "1073741824", spec.Annotations[MaxDecodedPagesAnnotation])
	assert.Equal(t, "1m0s", spec.Annotations[TimeoutAnnotation])
	assert.Equal(t, "kept", spec.Annotations["other"])
	assert.Equal(t, Bounds{MaxDecodedPages: 1 << 30, Timeout: time.Minute}, FromAnnotations(spec.Annotations))

	var empty specs.Spec
	Bounds{MaxDecodedPages: 1 << 20}.Set(&empty)
	assert.Equal(t, int64(1<<20), FromAnnotations(empty.Annotations).MaxDecodedPages)
}

func TestFromAnnotationsDefaults(t *testing.T) {
	assert.Equal(t, memTotal()/2, FromAnnotations(nil).MaxDecodedPages)
	assert.Equal(t, DefaultTimeout, FromAnnotations(nil).Timeout)
	assert.Equal(t, DefaultTimeout, FromAnnotations(map[string]string{TimeoutAnnotation: "-5s"}).Timeout)
	assert.Equal(t, memTotal()/2, FromAnnotations(map[string]string{MaxDecodedPagesAnnotation: "x"}).MaxDecodedPages)
}
