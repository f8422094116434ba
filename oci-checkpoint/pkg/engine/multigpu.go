package engine

import (
	"fmt"
	"strings"
)

// Setting is one environment variable a multi-GPU vLLM needs for
// cuda-checkpoint, with why.
type Setting struct {
	Name, Value, Why string
}

// MultiGPUEnv is what a vLLM of several GPU processes (tensor or pipeline
// parallel > 1) must run with: cuda-checkpoint on driver 580 cannot
// checkpoint GPU memory that processes share (CUDA IPC), and each of these
// turns one such sharing off (DESIGN.md, "Known hazards"). integrations/vllm/serve.py
// sets the same values. NCCL's shared-memory transport stays on: it shares
// host memory only, /dev/shm files that CRIU restores as shared mappings
// (docs/multi-gpu.md).
var MultiGPUEnv = []Setting{
	{"NCCL_P2P_DISABLE", "1", "NCCL's peer-to-peer transport maps the other GPUs' memory by CUDA IPC"},
	{"NCCL_NVLS_ENABLE", "0", "NVLink SHARP multicast memory spans the GPUs, and can take a shared host's GPUs out of service"},
	{"NCCL_CUMEM_ENABLE", "0", "NCCL's cuMem buffers are exported to the other processes as shareable handles"},
	{"VLLM_ALLREDUCE_USE_SYMM_MEM", "0", "vLLM's symmetric-memory all-reduce maps the other GPUs' memory"},
}

// NoCustomAllReduce is the vLLM flag MultiGPUEnv goes with.
const NoCustomAllReduce = "--disable-custom-all-reduce"

// parallelConfig is the part of /server_info's vllm_config.parallel_config
// the check reads. Sizes vLLM does not report count as 1.
type parallelConfig struct {
	TP                int  `json:"tensor_parallel_size"`
	PP                int  `json:"pipeline_parallel_size"`
	NoCustomAllReduce bool `json:"disable_custom_all_reduce"`
}

// multiGPUProblem says what a vLLM of par, whose environment is env (nil:
// not reported), lacks to be checkpointed, naming every setting at once;
// "" when nothing. The sizes are the server's own, whatever form its
// command line gave them in (-tp 2, --tensor-parallel-size=2, a config file).
func multiGPUProblem(par parallelConfig, env map[string]string) string {
	tp, pp := max(par.TP, 1), max(par.PP, 1)
	if tp*pp == 1 {
		return ""
	}
	var fix []string
	if env == nil {
		fix = append(fix, "vLLM's /server_info reports no system_env.env_vars, so whether "+
			names()+" are set cannot be told: start it with them")
	} else {
		for _, s := range MultiGPUEnv {
			v, ok := env[s.Name]
			switch {
			case !ok:
				fix = append(fix, fmt.Sprintf("set %s=%s (unset; %s)", s.Name, s.Value, s.Why))
			case v != s.Value:
				fix = append(fix, fmt.Sprintf("set %s=%s (it is %q; %s)", s.Name, s.Value, v, s.Why))
			}
		}
	}
	if !par.NoCustomAllReduce {
		fix = append(fix, "add "+NoCustomAllReduce+" (vLLM's custom all-reduce maps the other GPUs' buffers by CUDA IPC)")
	}
	if len(fix) == 0 {
		return ""
	}
	return fmt.Sprintf("vLLM runs %d GPU workers (tensor parallel %d, pipeline parallel %d), and cuda-checkpoint "+
		"on driver 580 cannot checkpoint GPU memory they share; restart it so that they share none "+
		"(the vllm-engine image's serve.py sets all of these unless told otherwise): %s",
		tp*pp, tp, pp, strings.Join(fix, "; "))
}

func names() string {
	var n []string
	for _, s := range MultiGPUEnv {
		n = append(n, s.Name)
	}
	return strings.Join(n, ", ")
}

// parseEnvVars reads collect_env's env_vars, "NAME=VALUE" lines.
func parseEnvVars(s string) map[string]string {
	env := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && k != "" {
			env[k] = v
		}
	}
	return env
}
