package engine

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// goodEnv is what a TP > 1 vLLM must run with, as collect_env lists it.
var goodEnv = map[string]string{
	"NCCL_P2P_DISABLE": "1", "NCCL_NVLS_ENABLE": "0",
	"NCCL_CUMEM_ENABLE": "0", "VLLM_ALLREDUCE_USE_SYMM_MEM": "0",
}

// multiServer answers /version and /server_info as a vLLM 0.24 in dev mode
// with sleep mode on, the parallel config par and the environment env
// (nil: system_env has no env_vars).
func multiServer(par map[string]any, env map[string]string) *httptest.Server {
	sys := map[string]any{}
	if env != nil {
		var lines []string
		for k, v := range env {
			lines = append(lines, k+"="+v)
		}
		sys["env_vars"] = strings.Join(append(lines, "CUDA_HOME=/usr/local/cuda"), "\n") + "\n"
	}
	body, _ := json.Marshal(map[string]any{
		"vllm_config": map[string]any{
			"model_config":    map[string]any{"model": "/models/model", "enable_sleep_mode": true},
			"parallel_config": par,
		},
		"vllm_env": map[string]any{}, "system_env": sys,
	})
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/version":
			w.Write([]byte(`{"version":"0.24.0"}`))
		case "/server_info":
			w.Write(body)
		default:
			http.NotFound(w, r)
		}
	}))
}

func without(env map[string]string, name string) map[string]string {
	out := map[string]string{}
	for k, v := range env {
		if k != name {
			out[k] = v
		}
	}
	return out
}

func with(env map[string]string, name, value string) map[string]string {
	out := without(env, name)
	out[name] = value
	return out
}

func TestPreflightMultiGPU(t *testing.T) {
	tp := func(n int, noCustom bool) map[string]any {
		return map[string]any{"tensor_parallel_size": n, "pipeline_parallel_size": 1, "disable_custom_all_reduce": noCustom}
	}
	type tcase struct {
		name string
		par  map[string]any
		env  map[string]string
		want []string // in the error; none: passes
		not  []string // not in the error
	}
	cases := []tcase{
		{name: "TP=1 without the settings", par: tp(1, false), env: map[string]string{}},
		{name: "TP=1, no env_vars reported", par: tp(1, false), env: nil},
		{name: "no parallel_config (counts as 1)", par: nil, env: map[string]string{}},
		{name: "TP=2 with all", par: tp(2, true), env: goodEnv},
		{name: "TP=2 with none", par: tp(2, false), env: map[string]string{},
			want: []string{"2 GPU workers (tensor parallel 2, pipeline parallel 1)", "driver 580",
				"set NCCL_P2P_DISABLE=1 (unset;", "set NCCL_NVLS_ENABLE=0",
				"set NCCL_CUMEM_ENABLE=0", "set VLLM_ALLREDUCE_USE_SYMM_MEM=0", "add --disable-custom-all-reduce"}},
		{name: "TP=2 without --disable-custom-all-reduce", par: tp(2, false), env: goodEnv,
			want: []string{"add --disable-custom-all-reduce (vLLM's custom all-reduce"}, not: []string{"set "}},
		{name: "wrong value", par: tp(2, true), env: with(goodEnv, "NCCL_P2P_DISABLE", "0"),
			want: []string{`set NCCL_P2P_DISABLE=1 (it is "0"; NCCL's peer-to-peer transport`}, not: []string{"NCCL_NVLS_ENABLE"}},
		// NCCL's shared-memory transport shares host memory only: on or off, it passes.
		{name: "TP=2 with SHM on", par: tp(2, true), env: with(goodEnv, "NCCL_SHM_DISABLE", "0")},
		{name: "TP=2 with SHM off", par: tp(2, true), env: with(goodEnv, "NCCL_SHM_DISABLE", "1")},
		{name: "wrong value of a vLLM variable", par: tp(2, true), env: with(goodEnv, "VLLM_ALLREDUCE_USE_SYMM_MEM", "1"),
			want: []string{`set VLLM_ALLREDUCE_USE_SYMM_MEM=0 (it is "1"`}},
		{name: "PP=2 counts", par: map[string]any{"tensor_parallel_size": 1, "pipeline_parallel_size": 2},
			env: map[string]string{}, want: []string{"(tensor parallel 1, pipeline parallel 2)", "set NCCL_P2P_DISABLE=1"}},
		{name: "TP=2 PP=2", par: map[string]any{"tensor_parallel_size": 2, "pipeline_parallel_size": 2, "disable_custom_all_reduce": true},
			env: goodEnv},
		{name: "TP=2, no env_vars reported", par: tp(2, true), env: nil,
			want: []string{"reports no system_env.env_vars", "NCCL_P2P_DISABLE, NCCL_NVLS_ENABLE"}},
	}
	for _, s := range MultiGPUEnv {
		cases = append(cases, tcase{name: "TP=2 without " + s.Name, par: tp(2, true), env: without(goodEnv, s.Name),
			want: []string{"set " + s.Name + "=" + s.Value + " (unset; " + s.Why}, not: []string{"--disable-custom-all-reduce"}})
	}
	p, _ := Lookup("vllm", 0)
	for _, tc := range cases {
		srv := multiServer(tc.par, tc.env)
		_, err := (&Client{Base: srv.URL}).Preflight(context.Background(), p)
		srv.Close()
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: passed, want an error naming %q", tc.name, tc.want)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error lacks %q: %v", tc.name, w, err)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(err.Error(), w) {
				t.Errorf("%s: error names %q: %v", tc.name, w, err)
			}
		}
	}
}

// Sleep mode off and the multi-GPU settings missing: both in one error.
func TestPreflightNamesEveryProblem(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/version":
			w.Write([]byte(`{"version":"0.24.0"}`))
		case "/server_info":
			w.Write([]byte(`{"vllm_config":{"model_config":{"enable_sleep_mode":false},` +
				`"parallel_config":{"tensor_parallel_size":2}},"system_env":{"env_vars":"NCCL_P2P_DISABLE=1\n"}}`))
		}
	}))
	defer srv.Close()
	p, _ := Lookup("vllm", 0)
	_, err := (&Client{Base: srv.URL}).Preflight(context.Background(), p)
	for _, w := range []string{"--enable-sleep-mode", "set NCCL_NVLS_ENABLE=0", "add --disable-custom-all-reduce"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q: %v", w, err)
		}
	}
	if err != nil && strings.Contains(err.Error(), "set NCCL_P2P_DISABLE") {
		t.Errorf("names a setting that is right: %v", err)
	}
}

func TestParseEnvVars(t *testing.T) {
	env := parseEnvVars("NCCL_P2P_DISABLE=1\nVLLM_X=a=b\n\nnoise\nNCCL_P2P_DISABLE=0\n")
	if env["NCCL_P2P_DISABLE"] != "0" || env["VLLM_X"] != "a=b" || len(env) != 2 {
		t.Errorf("parseEnvVars: %v", env)
	}
}
