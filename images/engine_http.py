"""The HTTP side both reference engines share (cpu-engine/server.py and
gpu-engine/server.py): their log line, a JSON request handler, the serving
loop with its SIGTERM handling, and `server.py check`.

Stdlib only. Each engine's image carries this file beside server.py
(/engine/engine_http.py); in the repo it is one folder up from server.py,
and server.py looks in both places. CRIU-friendly as the engines are:
HTTP/1.0, every connection closed after its response, no io_uring.
"""

import json
import os
import signal
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def logger(name):
    """A log function that prints "TIME NAME: msg" to stdout, flushed."""
    def log(msg):
        print(time.strftime("%Y-%m-%dT%H:%M:%S"), f"{name}:", msg, flush=True)
    return log


class JSONHandler(BaseHTTPRequestHandler):
    """A request handler that answers JSON and reads JSON object bodies.
    Subclasses set server_version, log (staticmethod of the engine's log)
    and engine, and write do_GET and do_POST."""
    protocol_version = "HTTP/1.0"  # close after each response: no connection outlives a request
    engine = None  # set by serve()
    log = staticmethod(logger("engine"))

    def log_message(self, fmt, *args):
        self.log(f"{self.address_string()} {fmt % args}")

    def _reply(self, code, body):
        data = (json.dumps(body) + "\n").encode() if not isinstance(body, bytes) else body
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n == 0:
            return {}
        obj = json.loads(self.rfile.read(n))
        if not isinstance(obj, dict):
            raise ValueError("request body must be a JSON object")
        return obj


def serve(host, port, handler, started=None):
    """Serve handler on host:port until SIGTERM or SIGINT, logging through
    handler.log. started, if given, is called once the signals are
    handled, before the server listens."""
    log = handler.log
    httpd = ThreadingHTTPServer((host, port), handler)
    httpd.daemon_threads = True

    # As PID 1 in a container, SIGTERM is ignored unless handled.
    def stop(signum, _frame):
        log(f"signal {signum}: shutting down")
        threading.Thread(target=httpd.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if started is not None:
        started()
    log(f"listening on {host}:{port}")
    httpd.serve_forever(poll_interval=0.5)
    httpd.server_close()
    log("stopped")


def check(url):
    """0 when GET url answers 200, else 1 (saying why on stderr)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return 0 if r.status == 200 else 1
    except Exception as err:  # any failure means unhealthy
        print(f"unhealthy: {url}: {err}", file=sys.stderr)
        return 1


def check_command(argv):
    """`server.py check [URL]`: URL defaults to this engine's /health on ENGINE_PORT."""
    port = os.environ.get("ENGINE_PORT", "30000")
    return check(argv[2] if len(argv) > 2 else f"http://127.0.0.1:{port}/health")
