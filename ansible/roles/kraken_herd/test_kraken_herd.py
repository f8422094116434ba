"""The kraken_herd role's templates, rendered as the role renders them and
parsed as Kraken and systemd read them, and its input checks run through
ansible-playbook (the role's tasks/check.yml alone, no facts). Plain python3
with jinja2 and PyYAML, which ansible-core brings."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import role_checks  # noqa: E402  (ansible/role_checks.py)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
PARTS = ("tracker", "origin", "build-index")

with open(os.path.join(HERE, "defaults", "main.yml")) as f:
    DEFAULTS = yaml.safe_load(f)

# The role's defaults with the variables of roles/common and facts filled in.
VALUES = {k: v for k, v in DEFAULTS.items() if not (isinstance(v, str) and "{{" in v)}
VALUES.update({
    "ansible_role_name": "kraken_herd", "rekindle_src_dir": "/srv/rekindle",
    "kraken_herd_registry": {"host": "registry.example:5000"}, "kraken_herd_ip": "10.0.0.3",
    "kraken_herd_bin_dir": "/usr/local/bin", "kraken_herd_config_dir": "/etc/kraken-herd",
    "kraken_herd_store_dir": "/var/lib/kraken-herd",
})


def render(template, values):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "render-template.py"),
                           os.path.join(HERE, "templates", template), json.dumps(values)],
                          capture_output=True, text=True, check=True).stdout


def exec_start(unit):
    lines = unit.replace("\\\n", " ").splitlines()
    args = next(l for l in lines if l.startswith("ExecStart=")).split()
    return args[0][len("ExecStart="):], dict(a[2:].split("=", 1) for a in args[1:]), lines


class Templates(unittest.TestCase):
    def test_the_herd_names_itself_and_its_registry(self):
        t = yaml.safe_load(render("tracker.yaml.j2", VALUES))
        self.assertEqual(t["origin"]["hosts"]["static"], ["10.0.0.3:15002"])
        self.assertEqual(t["peerstore"]["redis"]["addr"], "127.0.0.1:6379")
        self.assertEqual(t["trackerserver"]["announce_interval"], "3s")
        o = yaml.safe_load(render("origin.yaml.j2", VALUES))
        blob = o["backends"][0]["backend"]["registry_blob"]
        self.assertEqual(blob["address"], "registry.example:5000")
        self.assertIs(blob["security"]["tls"]["client"]["disabled"], False)
        self.assertEqual(o["cluster"]["static"], ["10.0.0.3:15002"])
        self.assertEqual(o["castore"]["cache_dir"], "/var/lib/kraken-herd/origin/cache/")
        self.assertEqual(o["scheduler"]["conn"]["bandwidth"], {"enable": False})
        b = yaml.safe_load(render("build-index.yaml.j2", VALUES))
        self.assertEqual(b["backends"][0]["backend"]["registry_tag"]["address"], "registry.example:5000")
        self.assertEqual(b["origin"]["hosts"]["static"], ["10.0.0.3:15002"])
        self.assertEqual(b["cluster"]["hosts"]["static"], ["10.0.0.3:15004"])
        for part, c in zip(PARTS, (t, o, b)):
            self.assertEqual(c["zap"]["outputPaths"], ["stdout", "/var/log/kraken-herd/%s.log" % part])
            self.assertEqual(c["nginx"]["log_dir"], "/var/log/kraken-herd/")

    def test_a_plain_http_registry_and_a_seeding_limit(self):
        v = dict(VALUES, kraken_herd_registry={"host": "10.0.0.5:5000", "scheme": "http"},
                 kraken_origin_egress_bits_per_sec=80000000)
        o = yaml.safe_load(render("origin.yaml.j2", v))
        self.assertIs(o["backends"][0]["backend"]["registry_blob"]["security"]["tls"]["client"]["disabled"], True)
        self.assertEqual(o["scheduler"]["conn"]["bandwidth"],
                         {"enable": True, "egress_bits_per_sec": 80000000, "ingress_bits_per_sec": 8000000000})
        b = yaml.safe_load(render("build-index.yaml.j2", v))
        self.assertIs(b["backends"][0]["backend"]["registry_tag"]["security"]["tls"]["client"]["disabled"], True)

    def test_the_fleet_renders_the_same_templates(self):
        for part in PARTS:
            out = subprocess.run(["bash", "-c", 'root=$1; . "$root/fleet/fleet.sh"; fleet_herd_config /f/h 10.1.1.3 10.1.1.2:5000 "$2"',
                                  "bash", os.path.abspath(ROOT), part], capture_output=True, text=True, check=True).stdout
            c = yaml.safe_load(out)
            self.assertEqual(c["zap"]["outputPaths"], ["/f/h/%s.log" % part])
        self.assertEqual(c["backends"][0]["backend"]["registry_tag"]["address"], "10.1.1.2:5000")

    def test_units_run_each_part_on_its_ports(self):
        want = {
            "tracker": {"config": "/etc/kraken-herd/tracker.yaml", "port": "15003"},
            "origin": {"config": "/etc/kraken-herd/origin.yaml", "blobserver-hostname": "10.0.0.3",
                       "blobserver-port": "15002", "peer-ip": "10.0.0.3", "peer-port": "15001"},
            "build-index": {"config": "/etc/kraken-herd/build-index.yaml", "port": "15004"},
        }
        for part in PARTS:
            prog, flags, lines = exec_start(render("rekindle-kraken-%s.service.j2" % part, VALUES))
            self.assertEqual(prog, "/usr/local/bin/kraken-%s" % part)
            self.assertEqual(flags, want[part])
            self.assertIn("PrivateTmp=yes", lines)
            # The default socket's directory is the unit's runtime directory.
            sock = VALUES["kraken_%s_socket" % part.replace("-", "_")]
            self.assertIn("RuntimeDirectory=%s" % os.path.basename(os.path.dirname(sock)), lines)
        _, _, lines = exec_start(render("rekindle-kraken-tracker.service.j2", VALUES))
        self.assertIn("Requires=redis-server.service", lines)

    @unittest.skipUnless(shutil.which("systemd-analyze"), "systemd-analyze is missing (Debian package systemd)")
    def test_systemd_analyze_verify_accepts_the_units(self):
        with tempfile.TemporaryDirectory() as d:
            for part in PARTS:
                prog = os.path.join(d, "kraken-" + part)
                with open(prog, "w") as f:
                    f.write("#!/bin/sh\n")
                os.chmod(prog, 0o755)
            v = dict(VALUES, kraken_herd_bin_dir=d)
            units = []
            for part in PARTS:
                name = "rekindle-kraken-%s.service" % part
                with open(os.path.join(d, name), "w") as f:
                    f.write(render(name + ".j2", v))
                units.append("./" + name)
            p = subprocess.run(["systemd-analyze", "verify"] + units, cwd=d, capture_output=True, text=True)
            # redis-server.service is not installed here: only that may be said.
            findings = [l for l in (p.stdout + p.stderr).splitlines() if l and "redis-server.service" not in l]
            self.assertEqual(findings, [])


@unittest.skipUnless(role_checks.PLAYBOOK, "ansible-playbook is missing (apt-get install ansible-core)")
class Checks(unittest.TestCase):
    """tasks/check.yml refuses bad inventories, each with a message naming the variable."""

    @classmethod
    def setUpClass(cls):
        cls.play = role_checks.Play("kraken_herd")
        for part in PARTS:
            cls.play.stub("kraken-" + part)

    @classmethod
    def tearDownClass(cls):
        cls.play.close()

    def check(self, **change):
        values = {"rekindle_kraken_herd": True, "kraken_herd_registry": {"host": "registry.example:5000"},
                  "kraken_herd_ip": "10.0.0.3", "kraken_herd_bin_dir": self.play.dir}
        values.update(change)
        return self.play.run(values)

    def refused(self, needle, **change):
        rc, out = self.check(**change)
        self.assertNotEqual(rc, 0, "accepted: %s" % change)
        self.assertIn(needle, out)

    def test_a_good_inventory_passes(self):
        rc, out = self.check()
        self.assertEqual(rc, 0, out)

    def test_a_bad_registry_is_refused_naming_it(self):
        self.refused("kraken_herd_registry must be the one registry", kraken_herd_registry={})
        self.refused("kraken_herd_registry must be the one registry", kraken_herd_registry={"host": "registry.example"})
        self.refused("kraken_herd_registry must be the one registry",
                     kraken_herd_registry={"host": "r:5000", "scheme": "ftp"})
        self.refused("kraken_herd_registry must be the one registry",
                     kraken_herd_registry=[{"host": "a:5000"}, {"host": "b:5000"}])

    def test_no_address_or_a_bad_limit_is_refused(self):
        self.refused("kraken_herd_ip must be the address", kraken_herd_ip="")
        self.refused("kraken_origin_egress_bits_per_sec a whole number", kraken_origin_egress_bits_per_sec="80M")

    def test_missing_programs_are_refused_naming_them(self):
        d = self.play.dir
        os.rename(os.path.join(d, "kraken-origin"), os.path.join(d, "gone"))
        try:
            self.refused("%s/kraken-origin missing" % d)
        finally:
            os.rename(os.path.join(d, "gone"), os.path.join(d, "kraken-origin"))


if __name__ == "__main__":
    unittest.main()
