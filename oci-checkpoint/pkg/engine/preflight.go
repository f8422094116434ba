package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Facts is what a preflight learned of the engine, for the image's
// annotations.
type Facts struct {
	Version string // e.g. "vllm 0.24.0"; "" when the engine does not say
	// Resume, when not nil, replaces the profile's resume calls: what this
	// engine, as it was started, needs to serve again after a restore.
	Resume []Call
}

// Preflight checks, before anything is changed, that the engine serves what
// its profile's quiesce and resume need. A vLLM started without sleep mode
// would answer /sleep and free nothing: the dump would hold every weight.
// A vLLM of several GPU processes must also share no GPU memory between
// them (multigpu.go): cuda-checkpoint cannot checkpoint what they share.
func (c *Client) Preflight(ctx context.Context, p Profile) (Facts, error) {
	switch p.Name {
	case "sglang":
		return c.sglangPreflight(ctx, p)
	case "vllm":
	default:
		return Facts{}, nil
	}
	var f Facts
	// /server_info first: a server without dev mode (or not vLLM at all)
	// is told what to start vLLM with.
	var info struct {
		Config struct {
			Model struct {
				SleepMode *bool `json:"enable_sleep_mode"`
			} `json:"model_config"`
			Parallel parallelConfig `json:"parallel_config"`
		} `json:"vllm_config"`
		// The server's environment variables of interest (NCCL_*, VLLM_*),
		// as collect_env lists them: what it and its workers run with,
		// including what the image's entrypoint set in-process.
		System struct {
			EnvVars *string `json:"env_vars"`
		} `json:"system_env"`
	}
	call := Call{Method: "GET", Path: "/server_info?config_format=json",
		Hint: "start vLLM with VLLM_SERVER_DEV_MODE=1 so it serves /server_info, /sleep and /wake_up"}
	if err := c.getJSON(ctx, call, &info); err != nil {
		return f, fmt.Errorf("preflight: %w", err)
	}
	var v struct {
		Version string `json:"version"`
	}
	if err := c.getJSON(ctx, Call{Method: "GET", Path: "/version", Hint: "is this a vLLM server?"}, &v); err != nil {
		return f, fmt.Errorf("preflight: %w", err)
	}
	f.Version = "vllm " + v.Version
	// Every problem at once: each is fixed by a restart.
	var problems []string
	switch sm := info.Config.Model.SleepMode; {
	case sm == nil:
		problems = append(problems, fmt.Sprintf("%s: vLLM %s reports no model_config.enable_sleep_mode: cannot tell whether /sleep frees the GPU", call, v.Version))
	case !*sm:
		problems = append(problems, fmt.Sprintf("vLLM %s was started without sleep mode: /sleep would free nothing and the checkpoint would hold every weight; start it with --enable-sleep-mode", v.Version))
	}
	var env map[string]string
	if e := info.System.EnvVars; e != nil {
		env = parseEnvVars(*e)
	}
	if p := multiGPUProblem(info.Config.Parallel, env); p != "" {
		problems = append(problems, p)
	}
	if len(problems) > 0 {
		return f, fmt.Errorf("preflight: %s", strings.Join(problems, ". Also: "))
	}
	return f, nil
}

// getJSON runs a GET call and decodes its answer into v.
func (c *Client) getJSON(ctx context.Context, call Call, v any) error {
	resp, err := c.send(ctx, call)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// /server_info carries the whole environment: a few hundred KiB.
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(v); err != nil {
		return fmt.Errorf("%s: answer is not the JSON expected: %w", call, err)
	}
	return nil
}
