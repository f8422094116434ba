package engine

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func sglangServer(info map[string]any) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/server_info" || info == nil {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(info)
	}))
}

func TestPreflightSGLang(t *testing.T) {
	base := func(kv ...any) map[string]any {
		m := map[string]any{"version": "0.5.17", "model_path": "/models/model", "enable_memory_saver": true,
			"enable_weights_cpu_backup": false, "tp_size": 1, "pp_size": 1}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	reload := `POST /update_weights_from_disk {"model_path":"/models/model"}`
	cases := []struct {
		name   string
		info   map[string]any
		given  bool
		multi  bool     // SGLangMultiGPUEnv set
		want   []string // resume calls; nil with err: refused
		errHas []string
	}{
		{name: "memory saver, no CPU backup: the wake reloads the model", info: base(),
			want: []string{"POST /resume_memory_occupation {}", reload}},
		{name: "CPU backup: resume alone brings the weights back", info: base("enable_weights_cpu_backup", true),
			want: []string{"POST /resume_memory_occupation {}"}},
		{name: "the user's --resume calls are kept", info: base(), given: true,
			want: []string{"POST /resume_memory_occupation {}"}},
		{name: "no /server_info (a reference engine): the profile's calls", info: nil,
			want: []string{"POST /resume_memory_occupation {}"}},
		{name: "no memory saver", info: base("enable_memory_saver", false),
			errHas: []string{"SGLang 0.5.17 was started without --enable-memory-saver", "start it with --enable-memory-saver"}},
		{name: "memory saver not reported", info: base("enable_memory_saver", nil),
			errHas: []string{"reports no enable_memory_saver"}},
		{name: "no model path", info: base("model_path", ""),
			errHas: []string{"reports no model_path", "--enable-weights-cpu-backup"}},
		{name: "TP=2 with the custom all-reduce", info: base("tp_size", 2),
			errHas: []string{"2 GPU workers (tensor parallel 2, pipeline parallel 1)", "add --disable-custom-all-reduce"}},
		{name: "TP=2 with symmetric memory", info: base("tp_size", 2, "disable_custom_all_reduce", true, "enable_symm_mem", true),
			errHas: []string{"leave out --enable-symm-mem"}},
		{name: "TP=2 set up for a checkpoint: refused until asked for", info: base("tp_size", 2, "disable_custom_all_reduce", true),
			errHas: []string{"2 GPU workers", "cannot checkpoint yet", "--engine vllm", SGLangMultiGPUEnv + "=1"}},
		{name: "TP=2 set up for a checkpoint, asked for", info: base("tp_size", 2, "disable_custom_all_reduce", true), multi: true,
			want: []string{"POST /resume_memory_occupation {}", reload}},
		{name: "every problem at once", info: base("enable_memory_saver", false, "tp_size", 2),
			errHas: []string{"--enable-memory-saver", "Also: SGLang runs 2 GPU workers"}},
	}
	for _, tc := range cases {
		t.Setenv(SGLangMultiGPUEnv, map[bool]string{true: "1", false: ""}[tc.multi])
		srv := sglangServer(tc.info)
		p, _ := Lookup("sglang", 0)
		p.ResumeGiven = tc.given
		f, err := (&Client{Base: srv.URL}).Preflight(context.Background(), p)
		srv.Close()
		if tc.errHas != nil {
			if err == nil {
				t.Errorf("%s: passed, want refused", tc.name)
				continue
			}
			for _, w := range tc.errHas {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error lacks %q: %v", tc.name, w, err)
				}
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		calls := p.Resume
		if f.Resume != nil {
			calls = f.Resume
		}
		var got []string
		for _, c := range calls {
			got = append(got, c.String())
		}
		if strings.Join(got, " | ") != strings.Join(tc.want, " | ") {
			t.Errorf("%s: resume %q, want %q", tc.name, got, tc.want)
		}
		if tc.info != nil && f.Version != "sglang 0.5.17" {
			t.Errorf("%s: version %q", tc.name, f.Version)
		}
	}
}
