// Package wake is the contract between oci-checkpoint and the rekindle-wake
// helper it injects: the files in the container and the status the helper
// writes. It imports nothing heavy, since the helper is a small static binary.
package wake

import "time"

// Files in the container.
const (
	Dir        = "/.rekindle"
	HelperPath = Dir + "/rekindle-wake"
	// WakeFile appears when the container is restored (it travels in the
	// checkpoint's rootfs diff) or when oci-checkpoint resumes in place.
	WakeFile   = Dir + "/wake"
	StatusFile = Dir + "/status"
	PidFile    = Dir + "/wake.pid"
	// ArgsFile hands an idle helper the flags it is armed again with.
	ArgsFile    = Dir + "/wake.args"
	DevicesFile = Dir + "/devices.json"
)

// IdleArg is argv[1] of a helper that has woken the engine and sleeps
// until the next checkpoint arms it again: exiting would leave a zombie
// under an engine's PID 1 that never reaps (see cmd/rekindle-wake).
const IdleArg = "idle"

// Outcomes of a wake.
const (
	Resumed = "resumed"
	Failed  = "failed"
)

// Status is what StatusFile holds after a wake.
type Status struct {
	Outcome        string       `json:"outcome"`
	Error          string       `json:"error,omitempty"`
	Engine         string       `json:"engine"`
	CheckpointedAt string       `json:"checkpointed_at,omitempty"`
	WokeAt         time.Time    `json:"woke_at"`
	DoneAt         time.Time    `json:"done_at"`
	ResumeSeconds  float64      `json:"resume_seconds"`
	Loopback       string       `json:"loopback"`
	Calls          []CallResult `json:"calls"`
}

// CallResult is one resume call.
type CallResult struct {
	Call     string  `json:"call"`
	Attempts int     `json:"attempts"`
	Seconds  float64 `json:"seconds"`
	Error    string  `json:"error,omitempty"`
}
