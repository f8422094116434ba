#!/usr/bin/env python3
"""render-agent.py STORE_DIR LOG_DIR SOCKET TRACKER BUILD_INDEX: print the
Kraken agent's configuration rendered from the kraken role's template
(ansible/roles/kraken/templates/agent.yaml.j2), so that the simulated fleet
runs the file a provisioned node gets. TRACKER and BUILD_INDEX are HOST:PORT."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main(argv):
    if len(argv) != 6:
        sys.exit(__doc__.split(":")[0] + ": want STORE_DIR LOG_DIR SOCKET TRACKER BUILD_INDEX")
    store, logs, sock, tracker, build_index = argv[1:]
    values = {
        "ansible_role_name": "kraken",
        "kraken_store_dir": store.rstrip("/"), "kraken_log_dir": logs.rstrip("/"),
        "kraken_log_paths": [logs.rstrip("/") + "/agent.log"],
        "kraken_registry_socket": sock,
        "kraken_tracker_hosts": [tracker], "kraken_build_index_hosts": [build_index],
    }
    template = os.path.join(ROOT, "ansible", "roles", "kraken", "templates", "agent.yaml.j2")
    sys.exit(subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "render-template.py"),
                             template, json.dumps(values)]).returncode)


if __name__ == "__main__":
    main(sys.argv)
