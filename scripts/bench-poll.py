"""bench-poll.py PORT PROMPT TIMEOUT: run by scripts/bench.sh beside each
`nerdctl run`. Asks GET /health every 2 ms until it answers 200, then POSTs
PROMPT to /generate once; prints the times (epoch seconds), the answer and the
engine's /state as one JSON object.

A health poll gives up after 250 ms: while a container's network comes up, a
connection to the published port can be accepted and never answered (seen
here: 5 s stalls), and a long timeout would be counted as start time.
"""
import http.client, json, sys, time
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

t_start, polls, last = time.time(), 0, ""
while True:
    polls += 1
    try:
        status, body = call("GET", "/health", wait=0.25)
        if status == 200:
            break
        last = f"HTTP {status}"
    except OSError as e:
        last = str(e)
    if time.time() - t_start > timeout:
        print(json.dumps({"error": f"not healthy within {timeout}s: {last}", "polls": polls}))
        sys.exit(1)
    time.sleep(0.002)
t_health = time.time()
try:
    status, body = call("POST", "/generate", prompt.encode())
    answer = json.loads(body)
    if status != 200:
        raise ValueError(f"HTTP {status}: {body[:200]!r}")
except (OSError, ValueError) as e:
    print(json.dumps({"error": f"/generate failed: {e}", "t_health": t_health}))
    sys.exit(1)
t_answer = time.time()
state = json.loads(call("GET", "/state", wait=60.0)[1])
print(json.dumps({"t_poll_start": t_start, "t_health": t_health, "t_answer": t_answer, "polls": polls,
                  "text": answer.get("text"), "output_ids": answer.get("output_ids"), "state": state}))
