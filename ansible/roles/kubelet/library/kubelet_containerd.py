#!/usr/bin/python3
# Part of Rekindle's ansible/ (role kubelet). See DOCUMENTATION.
"""Ansible module: what the node's containerd runs with, as a kubelet needs to know it."""

DOCUMENTATION = r"""
---
module: kubelet_containerd
short_description: Read the settings a kubelet must agree with from containerd's merged configuration
description:
  - Runs C(containerd --config CONFIG config dump), which merges the configuration and the
    files it imports as containerd does at start, and returns the CRI socket, whether the
    default runtime's runc uses systemd cgroups, and the checkpoint restore policy.
  - Reads only; never changes a file. Returns C(available=false) and a C(reason) when the
    binary or the configuration is missing or the dump fails, leaving the decision to the role.
options:
  containerd: {description: The containerd binary., type: path, required: true}
  config: {description: containerd's main configuration file., type: path, required: true}
"""

RETURN = r"""
available: {description: Whether the configuration could be read., type: bool, returned: always}
reason: {description: Why not, when it could not., type: str, returned: when not available}
address: {description: The gRPC socket (CRI's endpoint)., type: str, returned: when available}
runtime: {description: CRI's default runtime name., type: str, returned: when available}
systemd_cgroup: {description: The default runtime's SystemdCgroup option., type: bool, returned: when available}
restore_images: {description: checkpoint_restore_images of the tasks service., type: list, returned: when available}
restore_via_create: {description: CRI's enable_experimental_restore_via_create., type: bool, returned: when available}
"""

import os
import subprocess

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

CRI = "io.containerd.cri.v1.runtime"


def facts(dump):
    """The settings a kubelet relies on, from `containerd config dump`'s text."""
    c = tomllib.loads(dump)
    plugins = c.get("plugins", {})
    cri = plugins.get(CRI, {})
    runtimes = cri.get("containerd", {}).get("runtimes", {})
    name = cri.get("containerd", {}).get("default_runtime_name", "runc")
    options = runtimes.get(name, {}).get("options", {})
    # containerd 2.x keeps the socket in the grpc server plugin; version 2
    # files had it in [grpc], which the dump migrates.
    address = plugins.get("io.containerd.server.v1.grpc", {}).get("address") or c.get("grpc", {}).get("address", "")
    return {
        "address": address,
        "runtime": name,
        "systemd_cgroup": bool(options.get("SystemdCgroup", False)),
        "restore_images": list(plugins.get("io.containerd.service.v1.tasks-service", {}).get("checkpoint_restore_images", [])),
        "restore_via_create": bool(cri.get("enable_experimental_restore_via_create", False)),
    }


def main():
    # Here, not at the top: the tests import facts() without ansible.
    from ansible.module_utils.basic import AnsibleModule

    m = AnsibleModule(argument_spec={"containerd": {"type": "path", "required": True},
                                     "config": {"type": "path", "required": True}},
                      supports_check_mode=True)
    binary, config = m.params["containerd"], m.params["config"]
    if tomllib is None:
        m.fail_json(msg="the kubelet_containerd module needs Python 3.11 or newer (tomllib) on the node")
    for what, path in (("containerd", binary), ("configuration", config)):
        if not os.path.exists(path):
            m.exit_json(changed=False, available=False, reason="no %s at %s" % (what, path))
    p = subprocess.run([binary, "--config", config, "config", "dump"], capture_output=True, text=True)
    if p.returncode != 0:
        m.exit_json(changed=False, available=False,
                    reason="%s --config %s config dump failed: %s" % (binary, config, p.stderr.strip()[-500:]))
    try:
        out = facts(p.stdout)
    except tomllib.TOMLDecodeError as e:
        m.exit_json(changed=False, available=False, reason="cannot parse the dump of %s: %s" % (config, e))
    m.exit_json(changed=False, available=True, **out)


if __name__ == "__main__":
    main()
