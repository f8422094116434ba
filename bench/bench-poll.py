"""bench-poll.py PORT PROMPT TIMEOUT: run by bench/bench.sh beside each
`nerdctl run`. Asks GET /health every 2 ms until it answers 200, then POSTs
PROMPT to /generate once; prints the times (epoch seconds), the answer and the
engine's /state as one JSON object.

BENCH_API=openai (a vLLM server): ready is GET /is_sleeping answering
{"is_sleeping": false} (its /health answers while it sleeps), PROMPT goes to
/v1/completions, and there is no /state. There t_answer is the end of a
one-token request sent first (the first token as a client sees it, the
clock of 510-vllm.bats); PROMPT's whole answer, which the bench compares
across restores, follows it (t_full_answer).

BENCH_API=sglang (an SGLang server): ready is GET /health answering 200
(Rekindle's SGLang plugin answers 503 until the wake has resumed the memory
and reloaded the weights), PROMPT goes to /generate, there is no /state, and
t_answer is again the end of a one-token request sent first.

A health poll gives up after 250 ms: while a container's network comes up, a
connection to the published port can be accepted and never answered (seen
here: 5 s stalls), and a long timeout would be counted as start time.
"""
import http.client, json, os, sys, time
port, prompt, timeout = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])

def call(method, path, body=None, wait=600.0):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=0.05)
    try:
        c.connect()
        c.sock.settimeout(wait)
        c.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()

api = os.environ.get("BENCH_API", "")
openai, sglang = api == "openai", api == "sglang"
t_start, polls, last = time.time(), 0, ""
while True:
    polls += 1
    try:
        status, body = call("GET", "/is_sleeping" if openai else "/health", wait=0.25)
        if status == 200 and not (openai and json.loads(body).get("is_sleeping") is not False):
            break
        last = f"HTTP {status}: {body[:80]!r}"
    except OSError as e:
        last = str(e)
    if time.time() - t_start > timeout:
        print(json.dumps({"error": f"not healthy within {timeout}s: {last}", "polls": polls}))
        sys.exit(1)
    time.sleep(0.002)
t_health = time.time()
t_first = None
try:
    if openai or sglang:
        one = json.loads(prompt)
        if openai:
            one["max_tokens"] = 1
        else:
            one["sampling_params"] = dict(one.get("sampling_params", {}), max_new_tokens=1)
        status, body = call("POST", "/v1/completions" if openai else "/generate", json.dumps(one).encode())
        if status != 200:
            raise ValueError(f"HTTP {status}: {body[:200]!r}")
        t_first = time.time()
    status, body = call("POST", "/v1/completions" if openai else "/generate", prompt.encode())
    if status != 200:
        raise ValueError(f"HTTP {status}: {body[:200]!r}")
    answer = json.loads(body)
    if openai:
        answer = {"text": answer["choices"][0]["text"], "output_ids": answer["choices"][0].get("token_ids")}
except (OSError, ValueError, KeyError, IndexError) as e:
    print(json.dumps({"error": f"the first completion failed: {e}", "t_health": t_health}))
    sys.exit(1)
t_full = time.time()
state = {} if openai or sglang else json.loads(call("GET", "/state", wait=60.0)[1])
times = {"t_answer": t_first, "t_full_answer": t_full} if openai or sglang else {"t_answer": t_full}
print(json.dumps({"t_poll_start": t_start, "t_health": t_health, **times, "polls": polls,
                  "text": answer.get("text"), "output_ids": answer.get("output_ids"), "state": state}))
