"""The kraken role's templates, rendered as the role renders them and parsed
as the agent, containerd and systemd read them, and its input checks run
through ansible-playbook (the role's tasks/check.yml alone, no facts, no
herd). Plain python3 with jinja2 and PyYAML, which ansible-core brings."""
import json
import os
import subprocess
import sys
import tomllib
import unittest

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import role_checks  # noqa: E402  (ansible/role_checks.py)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")

VALUES = {
    "ansible_role_name": "kraken", "rekindle_src_dir": "/srv/rekindle",
    "kraken_tracker_hosts": ["10.0.0.3:15003", "10.0.0.4:15003"],
    "kraken_build_index_hosts": ["10.0.0.3:15004"],
    "kraken_peer_ip": "10.0.0.21", "kraken_peer_port": 16001, "kraken_server_port": 16002,
    "kraken_registry_port": 16000, "kraken_agent_binary": "/usr/local/bin/kraken-agent",
    "kraken_config_file": "/etc/kraken-agent/agent.yaml", "kraken_store_dir": "/var/lib/kraken-agent",
    "kraken_log_dir": "/var/log/kraken-agent", "kraken_log_paths": ["stdout", "/var/log/kraken-agent/agent.log"],
    "kraken_registry_socket": "/run/kraken-agent/registry.sock",
}


def render(template, values):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "render-template.py"),
                           os.path.join(HERE, "templates", template), json.dumps(values)],
                          capture_output=True, text=True, check=True).stdout


class Templates(unittest.TestCase):
    def test_agent_yaml_holds_the_herd_and_the_store(self):
        c = yaml.safe_load(render("agent.yaml.j2", VALUES))
        self.assertEqual(c["tracker"]["hosts"]["static"], VALUES["kraken_tracker_hosts"])
        self.assertEqual(c["build_index"]["hosts"]["static"], VALUES["kraken_build_index_hosts"])
        self.assertEqual(c["store"]["cache_dir"], "/var/lib/kraken-agent/cache/")
        self.assertEqual(c["store"]["download_dir"], "/var/lib/kraken-agent/download/")
        self.assertEqual(c["registry"]["docker"]["http"], {"net": "unix", "addr": VALUES["kraken_registry_socket"]})
        self.assertEqual(c["nginx"]["log_dir"], "/var/log/kraken-agent/")
        self.assertEqual(c["zap"]["outputPaths"], VALUES["kraken_log_paths"])
        self.assertEqual(c["allowed_cidrs"], ["127.0.0.1"])

    def test_the_fleet_renders_the_same_template(self):
        out = subprocess.run(["bash", "-c", 'root=$1; . "$root/fleet/fleet.sh"; fleet_agent_config /f/a 10.1.1.3',
                              "bash", os.path.abspath(ROOT)], capture_output=True, text=True, check=True).stdout
        c = yaml.safe_load(out)
        self.assertEqual(c["tracker"]["hosts"]["static"], ["10.1.1.3:15003"])
        self.assertEqual(c["store"]["cache_dir"], "/f/a/cache/")
        self.assertEqual(c["zap"]["outputPaths"], ["/f/a/agent.log"])

    def test_hosts_toml_puts_the_agent_first_and_the_registry_as_server(self):
        for reg, scheme in ({"host": "registry.example:5000"}, "https"), \
                           ({"host": "10.0.0.5:5000", "scheme": "http"}, "http"):
            t = tomllib.loads(render("hosts.toml.j2", dict(VALUES, kraken_registry=reg)))
            self.assertEqual(t["server"], "%s://%s" % (scheme, reg["host"]))
            self.assertEqual(list(t["host"]), ["http://127.0.0.1:16000"])
            self.assertEqual(t["host"]["http://127.0.0.1:16000"]["capabilities"], ["pull", "resolve"])

    def test_unit_has_a_private_tmp_and_the_ports(self):
        unit = render("rekindle-kraken-agent.service.j2", VALUES)
        lines = unit.replace("\\\n", " ").splitlines()
        self.assertIn("PrivateTmp=yes", lines)
        self.assertIn("Restart=on-failure", lines)
        self.assertNotRegex(unit, r"(?m)^(Requires|Before|BindsTo)=")
        start = next(l for l in lines if l.startswith("ExecStart="))
        args = start.split()
        self.assertEqual(args[0], "ExecStart=/usr/local/bin/kraken-agent")
        flags = dict(a[2:].split("=", 1) for a in args[1:])
        self.assertEqual(flags, {"config": "/etc/kraken-agent/agent.yaml", "peer-ip": "10.0.0.21",
                                 "peer-port": "16001", "agent-server-port": "16002",
                                 "agent-registry-port": "16000"})

    def test_defaults_are_a_real_hosts(self):
        with open(os.path.join(HERE, "defaults", "main.yml")) as f:
            d = yaml.safe_load(f)
        self.assertEqual((d["kraken_peer_port"], d["kraken_server_port"], d["kraken_registry_port"]),
                         (16001, 16002, 16000))
        self.assertEqual(d["kraken_store_dir"], "{{ rekindle_root }}/var/lib/kraken-agent")
        self.assertEqual(d["kraken_tracker_hosts"], [])
        # The unit's RuntimeDirectory is the default socket's.
        self.assertTrue(d["kraken_registry_socket"].startswith("/run/kraken-agent/"))


@unittest.skipUnless(role_checks.PLAYBOOK, "ansible-playbook is missing (apt-get install ansible-core)")
class Checks(unittest.TestCase):
    """tasks/check.yml refuses bad inventories, each with a message naming the variable."""

    @classmethod
    def setUpClass(cls):
        cls.play = role_checks.Play("kraken", ("common", "containerd"))
        cls.agent = cls.play.stub("kraken-agent")

    @classmethod
    def tearDownClass(cls):
        cls.play.close()

    def check(self, **change):
        values = {"rekindle_kraken": True, "kraken_tracker_hosts": ["10.0.0.3:15003"],
                  "kraken_build_index_hosts": ["10.0.0.3:15004"], "kraken_peer_ip": "10.0.0.21",
                  "kraken_registries": [{"host": "registry.example:5000"}], "kraken_agent_binary": self.agent}
        values.update(change)
        return self.play.run(values)

    def refused(self, needle, **change):
        rc, out = self.check(**change)
        self.assertNotEqual(rc, 0, "accepted: %s" % change)
        self.assertIn(needle, out)

    def test_a_good_inventory_passes(self):
        rc, out = self.check()
        self.assertEqual(rc, 0, out)

    def test_no_tracker_or_build_index_is_refused_naming_them(self):
        self.refused("kraken_tracker_hosts or kraken_build_index_hosts is empty", kraken_tracker_hosts=[])
        self.refused("kraken_tracker_hosts or kraken_build_index_hosts is empty", kraken_build_index_hosts=[])

    def test_bad_registries_are_refused(self):
        self.refused("kraken_registries must list", kraken_registries=[])
        self.refused("kraken_registries must list", kraken_registries=[{"host": "registry.example"}])
        self.refused("kraken_registries must list", kraken_registries=[{"host": "r:5000", "scheme": "ftp"}])

    def test_a_config_path_list_is_refused(self):
        self.refused("containerd_registry_config_path must be one folder",
                     containerd_registry_config_path="/etc/containerd/certs.d:/etc/docker/certs.d")

    def test_a_missing_agent_is_refused(self):
        self.refused("make kraken", kraken_agent_binary=os.path.join(self.play.dir, "none"))


if __name__ == "__main__":
    unittest.main()
