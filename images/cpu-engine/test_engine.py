"""Checks of the CPU reference engine run as a plain process (no containers).

    python3 -m pytest images/cpu-engine/test_engine.py
"""

import hashlib
import json
import os
import socket
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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(url, method="GET", body=None):
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null"), r.headers
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null"), e.headers


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("w") / "weights.bin")
    digest = server.make_weights(path, 4)
    return path, digest


@pytest.fixture(scope="module")
def engine(weights):
    port = free_port()
    env = dict(os.environ, ENGINE_PORT=str(port), ENGINE_WEIGHTS=weights[0],
               ENGINE_STATE_MB="8", ENGINE_TICK_MS="50")
    proc = subprocess.Popen([sys.executable, "-u", SERVER], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            if call(base + "/health")[0] == 200:
                break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("engine never became healthy:\n" + proc.stdout.read())
    yield base, proc
    proc.terminate()
    proc.wait(timeout=10)


def test_make_weights_is_seeded_and_checksummed(tmp_path, weights):
    again = server.make_weights(str(tmp_path / "w.bin"), 4)
    assert again == weights[1], "same seed and size must give the same weights"
    with open(weights[0], "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == weights[1]
    assert open(weights[0] + ".sha256").read().split()[0] == weights[1]


def test_greedy_depends_on_prompt_and_weights():
    w1 = bytes(range(256)) * 1024
    w2 = bytes(reversed(range(256))) * 1024
    a = server.greedy(w1, "hello", 12)
    assert a == server.greedy(w1, "hello", 12)
    assert a != server.greedy(w1, "hullo", 12)
    assert a != server.greedy(w2, "hello", 12)
    assert len(a.split()) == 12


def test_health_and_state(engine, weights):
    base, proc = engine
    assert call(base + "/health")[0] == 200
    code, st, _ = call(base + "/state")
    assert code == 200
    assert st["loaded"] is True
    assert st["weights_sha256"] == weights[1] == st["loaded_sha256"]
    assert st["weights_bytes"] == 4 << 20
    assert st["pid"] == proc.pid
    assert st["state_mb"] == 8


def test_state_verify_hashes_the_weights_in_memory(engine, weights):
    base, _ = engine
    plain = call(base + "/state")[1]
    assert "memory_sha256" not in plain, "plain /state stays cheap: no hashing"
    code, st, _ = call(base + "/state?verify=1")
    assert code == 200
    assert st["memory_sha256"] == weights[1]
    assert set(st) - set(plain) == {"memory_sha256", "state_sha256"}
    assert st["state_sha256"] == hashlib.sha256(b"\xa5" * (8 << 20)).hexdigest()
    assert "memory_sha256" not in call(base + "/state?verify=0")[1]


def test_verify_sees_weights_changed_in_memory(tmp_path):
    # What the system tests rely on: bytes changed in memory after the load
    # show in memory_sha256, while weights_sha256 and loaded_sha256 (set
    # from the file at load time) still agree with each other.
    path = str(tmp_path / "weights.bin")
    digest = server.make_weights(path, 1)
    eng = server.Engine(path, tick_ms=1000)
    st = eng.snapshot(verify=True)
    assert st["memory_sha256"] == st["loaded_sha256"] == st["weights_sha256"] == digest
    buf = bytearray(eng.weights)
    buf[12345] ^= 0x01
    eng.weights = bytes(buf)
    st = eng.snapshot(verify=True)
    assert st["loaded_sha256"] == st["weights_sha256"] == digest
    assert st["memory_sha256"] == hashlib.sha256(eng.weights).hexdigest() != digest
    eng.release()
    st = eng.snapshot(verify=True)
    assert st["loaded"] is False and st["memory_sha256"] is None


def test_counter_advances(engine):
    base, _ = engine
    c1 = call(base + "/state")[1]["counter"]
    time.sleep(0.5)
    c2 = call(base + "/state")[1]["counter"]
    assert c2 > c1


def test_connection_closes_after_response(engine):
    base, _ = engine
    _, _, headers = call(base + "/health")
    assert headers.get("Connection", "").lower() == "close"


def test_generate_is_deterministic(engine, weights):
    base, _ = engine
    body = {"text": "The capital of France is", "max_new_tokens": 8}
    code, out, _ = call(base + "/generate", "POST", body)
    assert code == 200
    assert len(out["text"].split()) == 8
    assert out["meta"]["completion_tokens"] == 8
    assert out["meta_info"] == out["meta"]
    assert call(base + "/generate", "POST", body)[1]["text"] == out["text"]
    with open(weights[0], "rb") as f:
        assert out["text"] == server.greedy(f.read(), body["text"], 8)
    sp = {"text": body["text"], "sampling_params": {"max_new_tokens": 8, "temperature": 0}}
    assert call(base + "/generate", "POST", sp)[1]["text"] == out["text"]


def test_generate_rejects_bad_requests(engine):
    base, _ = engine
    assert call(base + "/generate", "POST", {"max_new_tokens": 3})[0] == 400
    assert call(base + "/generate", "POST", {"text": "x", "max_new_tokens": 0})[0] == 400
    assert call(base + "/nope")[0] == 404


def test_flush_cache(engine):
    base, _ = engine
    body = {"text": "cache me", "max_new_tokens": 2}
    call(base + "/generate", "POST", body)
    assert call(base + "/generate", "POST", body)[1]["meta"]["cached_tokens"] == 2
    assert call(base + "/flush_cache", "POST")[0] == 200
    assert call(base + "/generate", "POST", body)[1]["meta"]["cached_tokens"] == 0


def test_release_and_resume(engine, weights):
    base, proc = engine
    body = {"text": "before and after", "max_new_tokens": 16}
    before = call(base + "/generate", "POST", body)[1]["text"]
    c0 = call(base + "/state")[1]["counter"]

    assert call(base + "/release_memory_occupation", "POST", {})[0] == 200
    st = call(base + "/state")[1]
    assert st["loaded"] is False and st["weights_bytes"] == 0
    assert call(base + "/health")[0] == 503
    assert call(base + "/generate", "POST", body)[0] == 503
    assert call(base + "/release_memory_occupation", "POST", {})[0] == 200, "release twice is fine"

    code, out, _ = call(base + "/resume_memory_occupation", "POST", {})
    assert code == 200 and out["weights_sha256"] == weights[1]
    assert call(base + "/health")[0] == 200
    assert call(base + "/generate", "POST", body)[1]["text"] == before
    st = call(base + "/state")[1]
    assert st["loaded"] is True and st["counter"] >= c0 and st["pid"] == proc.pid
    assert st["releases"] >= 1 and st["resumes"] >= 1


def test_resume_refuses_corrupt_weights(tmp_path):
    path = str(tmp_path / "weights.bin")
    server.make_weights(path, 1)
    eng = server.Engine(path, tick_ms=1000)
    eng.release()
    with open(path, "r+b") as f:
        f.write(b"\0" * 16)
    with pytest.raises(ValueError, match="checksum mismatch"):
        eng.resume()
    assert eng.weights is None
    assert eng.generate("x", 1) is None


def test_check_subcommand(engine):
    base, _ = engine
    assert server.check(base + "/health") == 0
    assert server.check(base + "/nope") == 1


def test_state_half_zero_zeros_every_other_mib(weights):
    e = server.Engine(weights[0], state_mb=5, tick_ms=1000, state_half_zero=True)
    mib = 1 << 20
    assert [bytes(e.state[i * mib:(i + 1) * mib]) == bytes(mib) for i in range(5)] == [False, True, False, True, False]
    assert e.state[0] == 0xa5 and e.state[4 * mib] == 0xa5
