package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// SGLangMultiGPUEnv set to 1 lets the preflight pass an SGLang server of
// several GPU workers, which it refuses by default: their CUDA checkpoint
// hung where it was tried (docs/multi-gpu.md).
const SGLangMultiGPUEnv = "REKINDLE_SGLANG_MULTI_GPU"

// sglangInfo is the part of SGLang's GET /server_info (its server arguments,
// flattened, and its version) the preflight reads.
type sglangInfo struct {
	Version            string `json:"version"`
	ModelPath          string `json:"model_path"`
	MemorySaver        *bool  `json:"enable_memory_saver"`
	WeightsCPUBackup   bool   `json:"enable_weights_cpu_backup"`
	TP                 int    `json:"tp_size"`
	PP                 int    `json:"pp_size"`
	NoCustomAllReduce  bool   `json:"disable_custom_all_reduce"`
	EnableSymmetricMem bool   `json:"enable_symm_mem"`
}

// sglangPreflight checks an SGLang server before anything is changed, and
// says which resume calls it needs. SGLang's release_memory_occupation
// frees the GPU only under --enable-memory-saver, and without
// --enable-weights-cpu-backup it drops the weights' contents: resume maps
// the memory again and update_weights_from_disk must fill it, from the
// model the server was started with.
//
// An engine that serves SGLang's memory API but not /server_info (the
// reference engines) keeps the profile's calls: its resume brings the
// weights back itself.
func (c *Client) sglangPreflight(ctx context.Context, p Profile) (Facts, error) {
	var info sglangInfo
	call := Call{Method: "GET", Path: "/server_info"}
	err := c.getJSON(ctx, call, &info)
	var se *StatusError
	if errors.As(err, &se) && se.Code == http.StatusNotFound {
		return Facts{}, nil
	}
	if err != nil {
		return Facts{}, fmt.Errorf("preflight: %w", err)
	}
	f := Facts{Version: "sglang " + info.Version}
	var problems []string
	switch {
	case info.MemorySaver == nil:
		problems = append(problems, fmt.Sprintf("%s: SGLang %s reports no enable_memory_saver: cannot tell whether release_memory_occupation frees the GPU", call, info.Version))
	case !*info.MemorySaver:
		problems = append(problems, fmt.Sprintf("SGLang %s was started without --enable-memory-saver: release_memory_occupation would free nothing and the checkpoint would hold every weight; start it with --enable-memory-saver", info.Version))
	}
	if tp, pp := max(info.TP, 1), max(info.PP, 1); tp*pp > 1 {
		var fix []string
		if !info.NoCustomAllReduce {
			fix = append(fix, "add --disable-custom-all-reduce (SGLang's custom all-reduce maps the other GPUs' buffers by CUDA IPC)")
		}
		if info.EnableSymmetricMem {
			fix = append(fix, "leave out --enable-symm-mem (symmetric memory maps the other GPUs' memory)")
		}
		if len(fix) > 0 {
			problems = append(problems, fmt.Sprintf("SGLang runs %d GPU workers (tensor parallel %d, pipeline parallel %d), and cuda-checkpoint "+
				"on driver 580 cannot checkpoint GPU memory they share; restart it so that they share none "+
				"(the sglang-engine image's serve.py sets these and NCCL's settings unless told otherwise): %s",
				tp*pp, tp, pp, strings.Join(fix, "; ")))
		} else if os.Getenv(SGLangMultiGPUEnv) != "1" {
			problems = append(problems, fmt.Sprintf("SGLang runs %d GPU workers (tensor parallel %d, pipeline parallel %d), which Rekindle "+
				"cannot checkpoint yet: even with these settings right, the CUDA checkpoint of SGLang 0.5.17's first tensor-parallel "+
				"worker never returned on driver 580 (2 x H200, docs/multi-gpu.md); serve this model on one GPU, or tensor "+
				"parallel with vLLM (--engine vllm), or set %s=1 to try anyway",
				tp*pp, tp, pp, SGLangMultiGPUEnv))
		}
	}
	if len(problems) > 0 {
		return f, fmt.Errorf("preflight: %s", strings.Join(problems, ". Also: "))
	}
	if !p.ResumeGiven && !info.WeightsCPUBackup {
		if info.ModelPath == "" {
			return f, fmt.Errorf("preflight: %s: SGLang %s reports no model_path, so the wake cannot reload the weights it drops on release: pass --resume calls, or start it with --enable-weights-cpu-backup", call, info.Version)
		}
		body, _ := json.Marshal(map[string]string{"model_path": info.ModelPath})
		f.Resume = append(append([]Call(nil), p.Resume...),
			Call{Method: "POST", Path: "/update_weights_from_disk", Body: string(body), Hint: sglangHint})
	}
	return f, nil
}
