#!/usr/bin/env python3
"""first-token.py PORT T0 BODY [STATUS]: what a client polling a restored vLLM
(or SGLang) server sees.

Run inside the server's network namespace. Asks /is_sleeping every 10 ms
until the server says it is awake, then sends BODY (a /v1/completions
request) once. With STATUS (the wake helper's /.rekindle/status, as the
host sees it through /proc/PID/root) it reads that file every 10 ms
instead, until it records an outcome, and sends BODY to SGLang's /generate:
SGLang has no endpoint that says whether its memory is resumed. Prints one JSON line: seconds from T0 (an epoch time taken
before `nerdctl run`) until awake and until the answer, and the answer's
token ids. The shell's own polling (nerdctl exec, nerdctl inspect, curl
every 200 ms) would add its cadence to these times.
"""
import json
import sys
import time
import urllib.error
import urllib.request


def get(url, timeout):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


def main():
    port, t0, body = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    status = sys.argv[4] if len(sys.argv) > 4 else None
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 300
    while True:
        try:
            if status is not None:
                with open(status) as f:
                    if json.load(f).get("outcome"):
                        break
            elif get(base + "/is_sleeping", 5).get("is_sleeping") is False:
                break
        except (OSError, urllib.error.URLError, ValueError):
            pass  # not listening yet, or an answer mid-restore
        if time.time() > deadline:
            sys.exit("the server did not say it was awake within 300 s")
        time.sleep(0.01)
    awake = time.time()
    req = urllib.request.Request(base + ("/generate" if status else "/v1/completions"), data=body.encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        answer = json.load(r)
    done = time.time()
    print(json.dumps({"awake_s": round(awake - t0, 3), "token_s": round(done - t0, 3),
                      "request_s": round(done - awake, 3),
                      "token_ids": answer.get("output_ids") if status else answer["choices"][0].get("token_ids")}))


if __name__ == "__main__":
    main()
