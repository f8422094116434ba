"""The drop-in's template and the key list the role checks an existing
configuration against (vars/main.yml, containerd_dropin_settings and
containerd_registry_settings) name the
same keys: a key added to one and not the other fails here (plain python3,
jinja2 and PyYAML, which ansible-core brings)."""
import json
import os
import subprocess
import sys
import tomllib
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
VALUES = {
    "ansible_role_name": "containerd", "containerd_config_file": "/etc/containerd/config.toml",
    "containerd_task_state_timeout": "120s", "containerd_restore_images": ["registry.example.com/inference"],
    "containerd_restore_key_files": ["/etc/rekindle/keys/team.pub"], "containerd_restore_require_signature": True,
    "containerd_restore_timeout": "10m", "containerd_restore_max_decoded_pages": "64GiB",
    "containerd_preheat_images": ["registry.example.com/inference/llm:ckpt"], "containerd_preheat_max_memory": "16GiB",
    "containerd_preheat_interval": "30s",
    "containerd_cdi_spec_dirs": ["/etc/cdi"], "containerd_enable_criu": True,
    "containerd_restore_via_create": True, "containerd_runc": "/usr/local/bin/runc",
    "containerd_registry_config_path": "/etc/containerd/certs.d",
}


def leaves(table, path=()):
    for k, v in table.items():
        if isinstance(v, dict):
            yield from leaves(v, path + (k,))
        else:
            yield path + (k,)


def render(values):
    return tomllib.loads(subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "render-template.py"),
         os.path.join(HERE, "templates", "rekindle.toml.j2"), json.dumps(values)],
        capture_output=True, text=True, check=True).stdout)


class DropIn(unittest.TestCase):
    def test_registry_config_path_is_one_folder_for_both_or_left_alone(self):
        d = render(VALUES)["plugins"]
        self.assertEqual(d["io.containerd.cri.v1.images"]["registry"]["config_path"], "/etc/containerd/certs.d")
        self.assertEqual(d["io.containerd.transfer.v1.local"]["config_path"], "/etc/containerd/certs.d")
        d = render(dict(VALUES, containerd_registry_config_path=""))["plugins"]
        self.assertNotIn("io.containerd.cri.v1.images", d)
        self.assertNotIn("io.containerd.transfer.v1.local", d)

    def test_the_template_and_the_key_list_name_the_same_keys(self):
        rendered = set(leaves(render(VALUES))) - {("version",)}
        with open(os.path.join(HERE, "vars", "main.yml")) as f:
            v = yaml.safe_load(f)
        runtime = v["containerd_cri_runtime"]
        listed = {tuple(runtime if p == "{{ containerd_cri_runtime }}" else p for p in s["key"])
                  for s in v["containerd_dropin_settings"] + v["containerd_registry_settings"] if "value" in s}
        self.assertEqual(rendered - listed, set(), "keys the template sets that the role does not check")
        self.assertEqual(listed - rendered, set(), "keys the role checks with a value that the template does not set")


if __name__ == "__main__":
    unittest.main()
