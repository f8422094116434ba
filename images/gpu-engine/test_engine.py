"""Checks of the GPU reference engine that need no GPU.

    python3 -m pytest images/gpu-engine/test_engine.py

The pure parts (sizing, tokens, safetensors, finding torch_memory_saver's
hook, the launcher's flags) always run. With torch importable, the engine
also runs for real on the CPU (ENGINE_DEVICE=cpu, a tiny model, no memory
saver, no CUDA graph); without torch those tests skip.
"""

import json
import os
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "server.py")
sys.path.insert(0, HERE)
import server  # noqa: E402


def test_sizes_pick_shapes_and_layers():
    one = server.model_config({"ENGINE_PARAMS_GB": "1"})
    assert one["shape"] == "0.5b" and one["layers"] == 24  # Qwen2.5-0.5B: 494M params
    assert 0.9e9 < one["weights_bytes"] < 1.1e9
    eight = server.model_config({"ENGINE_PARAMS_GB": "8"})
    assert eight["shape"] == "7b" and abs(eight["weights_bytes"] - 8e9) < 0.5e9
    big = server.model_config({"ENGINE_PARAMS_GB": "60"})
    assert big["shape"] == "32b" and abs(big["weights_bytes"] - 60e9) < 1.5e9
    fixed = server.model_config({"ENGINE_SHAPE": "7b", "ENGINE_LAYERS": "3"})
    assert fixed["layers"] == 3 and fixed["model_id"] == "rekindle-qwen2-7b-L3-seed1234"
    assert server.weights_path(fixed, {"ENGINE_WEIGHTS_DIR": "/w"}) == "/w/" + fixed["model_id"] + ".safetensors"
    assert server.weights_path(fixed, {"ENGINE_WEIGHTS": "/x.st"}) == "/x.st"
    kv = server.model_config({"ENGINE_PARAMS_GB": "8", "ENGINE_KV_GB": "2"})
    assert abs(kv["kv_bytes"] - 2e9) < 1e7 and kv["kv_tokens"] >= kv["context_len"]


def test_bad_settings_say_which():
    with pytest.raises(SystemExit, match="ENGINE_PARAMS_GB"):
        server.model_config({"ENGINE_PARAMS_GB": "lots"})
    with pytest.raises(SystemExit, match="ENGINE_SHAPE"):
        server.model_config({"ENGINE_SHAPE": "70b"})


def test_param_names_are_qwen2s():
    names = dict(server.param_shapes(server.model_config({"ENGINE_SHAPE": "7b", "ENGINE_LAYERS": "1"})))
    assert names["model.layers.0.self_attn.k_proj.weight"] == (512, 3584)  # 4 KV heads x 128
    assert names["model.layers.0.mlp.down_proj.weight"] == (3584, 18944)
    assert "lm_head.weight" in names
    tied = dict(server.param_shapes(server.model_config({"ENGINE_PARAMS_GB": "1"})))
    assert "lm_head.weight" not in tied


def test_tokens_round_trip_through_words():
    assert server.tokenize("hé") == [104, 195, 169]
    words = server.detokenize([0, 69, 70, 152063]).split()
    assert len(words) == 4 and len(set(words)) == 4


def test_safetensors_header_reads_back(tmp_path):
    entries = [("a", (2, 3)), ("b", (5,))]
    head, where = server.safetensors_header(entries, {"rekindle.checksum": "abc"})
    assert len(head) % 8 == 0 and where == {"a": (0, 12), "b": (12, 10)}
    p = tmp_path / "x.safetensors"
    p.write_bytes(head + bytes(22))
    with open(p, "rb") as f:
        meta, table, start = server.read_safetensors_header(f)
    assert meta["rekindle.checksum"] == "abc"
    assert table["b"] == ("BF16", (5,), 12, 10) and start == len(head)
    assert struct.unpack("<Q", head[:8])[0] == len(head) - 8


def fake_site(root, cuda="13.0"):
    (root / "torch").mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text("")
    (root / "torch" / "version.py").write_text(f"__version__ = '2.11.0'\ncuda: Optional[str] = '{cuda}'\n")
    (root / "torch_memory_saver").mkdir()
    (root / "torch_memory_saver" / "__init__.py").write_text("")
    for n in ("", "_cu12", "_cu13"):
        (root / f"torch_memory_saver_hook_mode_preload{n}.abi3.so").write_text("")
    (root / "nvidia" / "cu13" / "lib").mkdir(parents=True)
    (root / "nvidia" / "cu13" / "lib" / "libcudart.so.13").write_text("")


def test_preload_env_picks_the_cuda_major_of_torch(tmp_path):
    fake_site(tmp_path)
    out = subprocess.run([sys.executable, SERVER, "preload-env"], capture_output=True, text=True,
                         env=dict(os.environ, ENGINE_SITE=str(tmp_path)))
    assert out.returncode == 0, out.stderr
    assert f"hook={tmp_path}/torch_memory_saver_hook_mode_preload_cu13.abi3.so" in out.stdout
    assert f"libdir={tmp_path}/nvidia/cu13/lib" in out.stdout


def test_launcher_sets_the_preload_and_runs_through_the_loader(tmp_path):
    fake_site(tmp_path)
    # A stand-in "server" that prints what it was started with.
    show = tmp_path / "show.py"
    show.write_text("import os, sys\n"
                    "if sys.argv[1:] == ['preload-env']:\n"
                    "    os.execv(sys.executable, [sys.executable, %r, 'preload-env'])\n"
                    "print(os.environ.get('LD_PRELOAD'), os.environ.get('PYTHONHOME'), sys.argv[1:])\n" % SERVER)
    loader = os.path.realpath("/lib64/ld-linux-x86-64.so.2")
    if not os.path.exists(loader):
        pytest.skip("no x86-64 dynamic loader here")
    env = dict(os.environ, ENGINE_SITE=str(tmp_path), ENGINE_SERVER=str(show), ENGINE_PYTHON=sys.executable,
               ENGINE_LOADER=loader, ENGINE_LIBRARY_PATH=os.path.dirname(loader))
    env.pop("PYTHONHOME", None)
    out = subprocess.run([os.path.join(HERE, "launch.sh")], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "torch_memory_saver_hook_mode_preload_cu13.abi3.so" in out.stdout
    out = subprocess.run([os.path.join(HERE, "launch.sh"), "config"], capture_output=True, text=True,
                         env=dict(env, ENGINE_MEMORY_SAVER="0"))
    assert out.returncode == 0 and out.stdout.startswith("None None ['config']"), out


def test_host_python_flags_bind_usr_and_the_interpreter():
    out = subprocess.run([os.path.join(HERE, "host-python.sh"), sys.executable],
                         capture_output=True, text=True, check=True).stdout.split("\n")
    assert "--volume=/usr:/host/usr:ro,bind" in out
    env = dict(line[len("--env="):].split("=", 1) for line in out if line.startswith("--env="))
    assert set(env) == {"ENGINE_PYTHON", "ENGINE_LOADER", "ENGINE_LIBRARY_PATH", "ENGINE_PYTHON_HOME", "ENGINE_SITE"}
    assert env["ENGINE_LOADER"].startswith("/host/usr/")
    real = os.path.realpath(sys.executable)
    assert env["ENGINE_PYTHON"] in (real, "/host" + real)


# ---- the engine itself, on the CPU (needs torch) ---------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(url, method="GET", body=None):
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def start(tmp_path, **extra):
    port = free_port()
    env = dict(os.environ, ENGINE_PORT=str(port), ENGINE_DEVICE="cpu", ENGINE_MEMORY_SAVER="0",
               ENGINE_SHAPE="tiny", ENGINE_LAYERS="2", ENGINE_CONTEXT_LEN="128", ENGINE_KV_GB="0",
               ENGINE_WEIGHTS_DIR=str(tmp_path), **extra)
    proc = subprocess.Popen([sys.executable, "-u", SERVER], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if call(base + "/health")[0] == 200:
                return base, proc
        except OSError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    pytest.fail("engine never became healthy:\n" + proc.stdout.read())


@pytest.fixture(scope="module")
def torch_ok():
    pytest.importorskip("torch")


def test_engine_on_cpu_generates_the_same_after_a_reload(tmp_path, torch_ok):
    base, proc = start(tmp_path)
    try:
        st = call(base + "/state")[1]
        assert st["cold_start"]["weights_source"] == "generated"
        assert st["weights_checksum"] == st["loaded_checksum"]
        prompt = {"text": "the quick brown fox", "sampling_params": {"max_new_tokens": 12}}
        code, first = call(base + "/generate", "POST", prompt)
        assert code == 200 and len(first["output_ids"]) == 12
        assert first["text"] == server.detokenize(first["output_ids"])
        code, again = call(base + "/generate", "POST", prompt)
        assert again["output_ids"] == first["output_ids"]
        assert again["meta_info"]["cached_tokens"] == len(server.tokenize(prompt["text"])) - 1
        assert call(base + "/flush_cache", "POST")[0] == 200
        assert call(base + "/release_memory_occupation", "POST", {})[0] == 200
        assert call(base + "/resume_memory_occupation", "POST", {"tags": ["weights"]})[0] == 200
        assert call(base + "/generate", "POST", {"text": "x", "max_new_tokens": 0})[0] == 400
        assert call(base + "/release_memory_occupation", "POST", {"tags": ["nope"]})[0] == 400
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # A second start loads the file it wrote, checks it, and answers the same.
    base, proc = start(tmp_path)
    try:
        st = call(base + "/state")[1]
        assert st["cold_start"]["weights_source"] == "file"
        code, second = call(base + "/generate", "POST", prompt)
        assert second["output_ids"] == first["output_ids"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_engine_refuses_a_corrupt_weights_file(tmp_path, torch_ok):
    base, proc = start(tmp_path)
    proc.terminate()
    proc.wait(timeout=30)
    path = next(p for p in tmp_path.iterdir() if p.suffix == ".safetensors")
    with open(path, "r+b") as f:
        f.seek(-4096, 2)
        f.write(b"\x7f" * 64)
    port = free_port()
    env = dict(os.environ, ENGINE_PORT=str(port), ENGINE_DEVICE="cpu", ENGINE_MEMORY_SAVER="0",
               ENGINE_SHAPE="tiny", ENGINE_LAYERS="2", ENGINE_CONTEXT_LEN="128", ENGINE_KV_GB="0",
               ENGINE_WEIGHTS_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, SERVER], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "checksum" in out.stdout


# ---- weight sets (ENGINE_WEIGHT_SET): which source a load takes --------------

TINY = {"ENGINE_SHAPE": "tiny", "ENGINE_LAYERS": "2", "ENGINE_CONTEXT_LEN": "128", "ENGINE_KV_GB": "0"}


def make_set(root, cfg, checksum="c0ffee", config=None, name="tiny", dtype="BF16", manifest=True):
    """A weight set directory holding one zero-filled weights file for cfg."""
    d = root / name
    d.mkdir()
    meta = {"rekindle.checksum": checksum, "rekindle.config": config or server.config_meta(cfg)}
    head, where = server.safetensors_header(server.param_shapes(cfg), meta)
    if dtype != "BF16":  # same sizes, another dtype name
        raw = json.loads(head[8:])
        for k, v in raw.items():
            if k != "__metadata__":
                v["dtype"] = dtype
        raw = json.dumps(raw).encode()
        raw += b" " * (-len(raw) % 8)
        head = struct.pack("<Q", len(raw)) + raw
    f = d / "model.safetensors"
    f.write_bytes(head + bytes(sum(n for _, n in where.values())))
    if manifest:
        size = f.stat().st_size
        (d / "rekindle-set.json").write_text(json.dumps(
            {"name": name, "files": [{"name": f.name, "size": size}], "bytes": size}))
    return str(d)


def test_weight_set_is_chosen_only_when_it_holds_the_models_weights(tmp_path):
    cfg = server.model_config(TINY)
    ws, why = server.select_weight_set(make_set(tmp_path, cfg), cfg, "c0ffee")
    assert why is None and ws.meta("rekindle.checksum") == "c0ffee"
    ws, why = server.select_weight_set(str(tmp_path / "tiny"), cfg, None)  # no file: its config decides
    assert why is None
    cases = [
        (str(tmp_path / "absent"), "c0ffee", "does not exist"),
        (make_set(tmp_path, cfg, name="loading", manifest=False), "c0ffee", "not loaded"),
        (str(tmp_path / "tiny"), "beef", "holds other weights"),
        (make_set(tmp_path, server.model_config(dict(TINY, ENGINE_LAYERS="3")), name="l3"), "c0ffee",
         "holds other tensors than model rekindle-qwen2-tiny-L2-seed1234"),
        (make_set(tmp_path, cfg, name="f16", dtype="F16"), "c0ffee", "wants BF16"),
        (make_set(tmp_path, cfg, name="seed", config=server.config_meta(dict(cfg, seed=7))), None,
         "made for another model"),
        (make_set(tmp_path, cfg, name="nosum", checksum=""), "c0ffee", "records no rekindle.checksum"),
    ]
    for d, want, frag in cases:
        ws, why = server.select_weight_set(d, cfg, want)
        assert ws is None and frag in why, (d, why)


def test_file_checksum_reads_the_header_only(tmp_path):
    cfg = server.model_config(TINY)
    d = make_set(tmp_path, cfg, checksum="abc123")
    assert server.file_checksum(os.path.join(d, "model.safetensors")) == "abc123"
    assert server.file_checksum(str(tmp_path / "none.safetensors")) is None
    (tmp_path / "junk").write_bytes(b"\xff" * 64)
    assert server.file_checksum(str(tmp_path / "junk")) is None


def set_from_file(tmp_path, name, link=True):
    """A weight set made from the weights file an engine wrote in tmp_path."""
    src = next(p for p in tmp_path.iterdir() if p.suffix == ".safetensors")
    d = tmp_path / name
    d.mkdir()
    dst = d / src.name
    if link:
        os.link(src, dst)
    else:
        dst.write_bytes(src.read_bytes())
    size = dst.stat().st_size
    (d / "rekindle-set.json").write_text(json.dumps(
        {"name": name, "files": [{"name": dst.name, "size": size}], "bytes": size, "sources": [str(src)]}))
    return d, dst


def test_engine_on_cpu_loads_from_a_weight_set(tmp_path, torch_ok):
    prompt = {"text": "weights at PCIe speed", "max_new_tokens": 8}
    base, proc = start(tmp_path)  # writes the weights file
    try:
        first = call(base + "/generate", "POST", prompt)[1]["output_ids"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    d, _ = set_from_file(tmp_path, "tiny")
    base, proc = start(tmp_path, ENGINE_WEIGHT_SET=str(d))
    try:
        st = call(base + "/state")[1]
        assert st["cold_start"]["weights_source"] == "weight-set", st
        assert st["weight_set"]["attached"] and st["weight_set"]["name"] == "tiny"
        assert st["weight_set_dir"] == str(d) and st["loaded_checksum"] == st["weights_checksum"]
        assert call(base + "/generate", "POST", prompt)[1]["output_ids"] == first
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # Absent: the file, and one log line that says why and how to fix it.
    base, proc = start(tmp_path, ENGINE_WEIGHT_SET=str(tmp_path / "absent"))
    try:
        st = call(base + "/state")[1]
        assert st["cold_start"]["weights_source"] == "file"
        assert "does not exist" in st["weight_set"]["reason"]
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0]
    lines = [l for l in out.splitlines() if "not the weight set" in l]
    assert len(lines) == 1 and "rekindle.dev/weights" in lines[0], out


def test_reload_takes_the_set_and_falls_back_to_the_file(tmp_path, torch_ok, monkeypatch):
    monkeypatch.setenv("ENGINE_DEVICE", "cpu")
    cfg = server.model_config(TINY)
    path = server.weights_path(cfg, {"ENGINE_WEIGHTS_DIR": str(tmp_path)})
    server.Model(cfg, path, False, False, {})  # writes the file
    d, copy = set_from_file(tmp_path, "tiny", link=False)
    phases = {}
    m = server.Model(cfg, path, False, False, phases, set_dir=str(d))
    assert phases["weights_source"] == "weight-set" and "weights_set_register_s" in phases
    got, st = m.reload_weights()
    assert got == m.expected_checksum and st["weights_source"] == "weight-set"
    assert st["weights_reload_bytes"] == cfg["weights_bytes"] and st["weights_copy_gbps"] > 0
    # The set's bytes change under the engine: the checksum after the copy
    # catches it, the set is dropped and the file reloads.
    with open(copy, "r+b") as f:
        f.seek(-4096, 2)
        f.write(b"\x7f" * 64)
    got, st = m.reload_weights()
    assert got == m.expected_checksum and st["weights_source"] == "file"
    assert "checksum" in m.weight_set_state()["reason"] and not m.weight_set_state()["attached"]
    assert [r["weights_source"] for r in m.reloads] == ["weight-set", "file"]
    # A set that does not match at start is not used at all.
    phases = {}
    m = server.Model(cfg, path, False, False, phases, set_dir=str(tmp_path / "absent"))
    assert phases["weights_source"] == "file" and "does not exist" in m.wset_reason


# ---- the transformers backend (hf_model.py) ----------------------------------------

def test_backend_settings_say_which():
    import hf_model
    assert server.model_class({}) is server.Model
    with pytest.raises(SystemExit, match="ENGINE_BACKEND"):
        server.model_class({"ENGINE_BACKEND": "vllm"})
    assert hf_model.batch_sizes({}) == [1, 2, 4]
    assert hf_model.batch_sizes({"ENGINE_BATCH_SIZES": "8, 1,1"}) == [1, 8]
    for bad in ("0", "two", "1,,x", "512"):
        with pytest.raises(SystemExit, match="ENGINE_BATCH_SIZES"):
            hf_model.batch_sizes({"ENGINE_BATCH_SIZES": bad})
    assert hf_model.compile_mode({}) == "max-autotune-no-cudagraphs"
    assert hf_model.compile_mode({"ENGINE_COMPILE": "none"}) is None
    # Modes with inductor's own CUDA graphs would put them outside the memory saver's region.
    for bad in ("reduce-overhead", "max-autotune", "fast"):
        with pytest.raises(SystemExit, match="ENGINE_COMPILE"):
            hf_model.compile_mode({"ENGINE_COMPILE": bad})


@pytest.fixture(scope="module")
def transformers_ok():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")


def test_transformers_engine_on_cpu_batches_and_answers_openai_completions(tmp_path, transformers_ok):
    # Eager: inductor's C++ compile on a CPU takes minutes; the GPU suite compiles.
    base, proc = start(tmp_path, ENGINE_BACKEND="transformers", ENGINE_COMPILE="none",
                       ENGINE_BATCH_SIZES="1,2", ENGINE_CUDA_GRAPH="0")
    try:
        st = call(base + "/state")[1]
        assert st["engine"]["backend"] == "transformers" and st["engine"]["batch_sizes"] == [1, 2]
        assert "first_token_s" in st["cold_start"] and "compile_s" in st["cold_start"]
        one = call(base + "/v1/completions", "POST", {"prompt": "kavo lipu", "max_tokens": 6})[1]
        assert one["object"] == "text_completion" and one["usage"]["completion_tokens"] == 6
        both = call(base + "/v1/completions", "POST", {"prompt": ["ba", "kavo lipu"], "max_tokens": 6})[1]
        # Left padding and the mask make a batched prompt decode as it does alone.
        assert both["choices"][1]["token_ids"] == one["choices"][0]["token_ids"]
        gen = call(base + "/generate", "POST", {"text": "kavo lipu", "sampling_params": {"max_new_tokens": 6}})[1]
        assert gen["output_ids"] == one["choices"][0]["token_ids"]
        assert call(base + "/v1/completions", "POST", {"prompt": ["a", "b", "c"], "max_tokens": 2})[0] == 400
        assert call(base + "/v1/completions", "POST", {"prompt": "a", "temperature": 0.8})[0] == 400
        assert call(base + "/v1/completions", "POST", {"prompt": 7})[0] == 400
        assert call(base + "/v1/models")[1]["data"][0]["id"] == st["model_id"]
        # Release and resume reload the weights into transformers' parameters.
        assert call(base + "/release_memory_occupation", "POST", {})[0] == 200
        assert call(base + "/resume_memory_occupation", "POST", {})[0] == 200
        again = call(base + "/v1/completions", "POST", {"prompt": "kavo lipu", "max_tokens": 6})[1]
        assert again["choices"][0]["token_ids"] == one["choices"][0]["token_ids"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
