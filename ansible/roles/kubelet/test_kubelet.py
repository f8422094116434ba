"""The kubelet role's templates and input checks (plain python3 with jinja2
and PyYAML, which ansible-core brings; the checks run through
ansible-playbook, the role's tasks/check.yml alone, no facts, no cluster).

The templates are rendered with scripts/render-template.py, as the harness
renders containerd's drop-in, with the values the role's tasks and vars
derive for a representative inventory (taints, labels: read back from an
ansible-playbook run of the same inventory), then parsed as the kubelet
would parse them."""
import json
import os
import subprocess
import sys
import unittest

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import role_checks  # noqa: E402  (ansible/role_checks.py)

HERE = os.path.dirname(os.path.abspath(__file__))
ROLES = os.path.dirname(HERE)
ROOT = os.path.join(ROLES, "..", "..")

# A CA certificate's shape; the checks look only at the PEM header.
CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"

# The inventory of a GPU node joining with a bootstrap token.
INVENTORY = {
    "rekindle_kubelet": True, "rekindle_cpu_only": False,
    "kubelet_api_server": "https://10.0.0.1:6443", "kubelet_ca_pem": CA_PEM,
    "kubelet_bootstrap_token": "abcdef.0123456789abcdef",
    "kubelet_cluster_dns": ["10.96.0.10"], "kubelet_cluster_domain": "cluster.local",
    "kubelet_node_name": "gpu-node-1",
    "kubelet_node_labels": {"example.com/pool": "h100", "node.kubernetes.io/exclude-from-external-load-balancers": "true"},
    "kubelet_taints": ["nvidia.com/gpu=present:NoSchedule", "rekindle.dev/restore-only:NoExecute"],
    "containerd_restore_images": ["registry.example.internal/inference"],
}

# What tasks/gpu.yml and tasks/runtime.yml would set on that node.
FACTS = {
    "kubelet_gpu_facts": {"rekindle.dev/gpu-model": "NVIDIA-H100-80GB-HBM3", "rekindle.dev/driver": "580.95.05"},
    "kubelet_cri_socket_used": "/run/containerd/containerd.sock", "kubelet_cgroup_driver_used": "systemd",
}

# Ansible's defaults for the paths (roles/common, roles/kubelet) on a real box.
PATHS = {
    "ansible_role_name": "kubelet", "kubelet_binary": "/usr/local/bin/kubelet",
    "kubelet_config_file": "/etc/kubernetes/kubelet-config.yaml", "kubelet_ca_dest": "/etc/kubernetes/pki/ca.crt",
    "kubelet_bootstrap_kubeconfig": "/etc/kubernetes/bootstrap-kubelet.conf",
    "kubelet_kubeconfig": "/etc/kubernetes/kubelet.conf", "kubelet_root_dir": "/var/lib/kubelet",
    "kubelet_runtime_request_timeout": "10m", "kubelet_server_tls_bootstrap": True, "kubelet_fail_swap_on": True,
    "kubelet_node_ip": "", "kubelet_extra_args": [],
}

# After the role's input checks, what the role derives from them
# (vars/main.yml), written to the file the test names.
DERIVED = """
    - name: What the role derives
      ansible.builtin.copy:
        dest: "{{ derived_out }}"
        content: "{{ {'kubelet_taint_list': kubelet_taint_list, 'kubelet_labels_arg': kubelet_labels_arg,
                      'kubelet_join': kubelet_join} | to_json }}"
        mode: "0644"
"""


def render(template, values):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "render-template.py"),
                           os.path.join(HERE, "templates", template), json.dumps(values)],
                          capture_output=True, text=True, check=True).stdout


def unit_sections(text):
    """A systemd unit's sections as {section: [(key, value)]}, continuation lines joined."""
    out, section, joined = {}, None, text.replace("\\\n", " ")
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            out[section] = []
        else:
            k, v = line.split("=", 1)
            out[section].append((k, v))
    return out


@unittest.skipUnless(role_checks.PLAYBOOK, "ansible-playbook is missing (apt-get install ansible-core)")
class Checks(unittest.TestCase):
    """tasks/check.yml refuses bad inventories, each with a message naming the variable."""

    @classmethod
    def setUpClass(cls):
        cls.play = role_checks.Play("kubelet", ("common", "containerd"), DERIVED)
        cls.kubelet = cls.play.stub("kubelet")

    @classmethod
    def tearDownClass(cls):
        cls.play.close()

    def check(self, **change):
        """Run the checks on INVENTORY with CHANGE over it (None removes a key): (rc, output, derived)."""
        values = dict(INVENTORY, kubelet_binary_src=self.kubelet, derived_out=os.path.join(self.play.dir, "derived.json"))
        for k, v in change.items():
            if v is None:
                values.pop(k, None)
            else:
                values[k] = v
        if os.path.exists(values["derived_out"]):
            os.unlink(values["derived_out"])
        rc, out = self.play.run(values)
        derived = None
        if os.path.exists(values["derived_out"]):
            with open(values["derived_out"]) as f:
                derived = json.load(f)
        return rc, out, derived

    def refused(self, needle, **change):
        rc, out, derived = self.check(**change)
        self.assertNotEqual(rc, 0, "accepted: %s" % change)
        self.assertIsNone(derived, "went past the checks")
        self.assertIn(needle, out)

    def test_a_good_inventory_passes_and_derives_the_flags(self):
        rc, out, derived = self.check()
        self.assertEqual(rc, 0, out[-2000:])
        self.assertEqual(derived["kubelet_join"], "token")
        self.assertEqual(derived["kubelet_taint_list"], [
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
            {"key": "rekindle.dev/restore-only", "value": "", "effect": "NoExecute"}])
        self.assertEqual(derived["kubelet_labels_arg"],
                         "example.com/pool=h100,node.kubernetes.io/exclude-from-external-load-balancers=true")

    def test_a_missing_api_server_is_refused(self):
        self.refused("kubelet_api_server is '': set it to the cluster's API server", kubelet_api_server=None)

    def test_a_plain_http_api_server_is_refused(self):
        self.refused("kubelet_api_server is 'http://10.0.0.1:8080'", kubelet_api_server="http://10.0.0.1:8080")

    def test_an_empty_restore_policy_is_refused(self):
        self.refused("This kubelet node would restore no checkpoint image: containerd_restore_images is empty",
                     containerd_restore_images=[])

    def test_restore_via_create_without_a_policy_is_refused(self):
        self.refused("containerd_restore_via_create is true but containerd_restore_images is empty",
                     containerd_restore_images=[], containerd_restore_via_create=True,
                     kubelet_require_restore_policy=False)

    def test_a_policy_with_restore_via_create_off_is_refused(self):
        self.refused("a kubelet restores through CRI's CreateContainer", containerd_restore_via_create=False)

    def test_an_empty_policy_is_allowed_when_not_required(self):
        rc, out, _ = self.check(containerd_restore_images=[], kubelet_require_restore_policy=False)
        self.assertEqual(rc, 0, out[-2000:])

    def test_no_credential_and_both_credentials_are_refused(self):
        self.refused("got neither", kubelet_bootstrap_token=None)
        self.refused("got both", kubelet_kubeconfig_src=os.path.join(self.play.dir, "check.yml"))

    def test_a_malformed_token_is_refused_without_showing_it(self):
        rc, out, _ = self.check(kubelet_bootstrap_token="not-a-token-secret")
        self.assertNotEqual(rc, 0)
        self.assertIn("got a token not of that form", out)
        self.assertNotIn("not-a-token-secret", out)

    def test_a_missing_ca_is_refused(self):
        self.refused("Set one of kubelet_ca_file", kubelet_ca_pem=None)
        self.refused("got no PEM certificate", kubelet_ca_pem="not a certificate")
        self.refused("got no file /nonexistent/ca.crt", kubelet_ca_pem=None, kubelet_ca_file="/nonexistent/ca.crt")

    def test_a_kubeconfig_join_needs_no_api_server_and_no_token(self):
        kc = os.path.join(self.play.dir, "kubelet.conf")
        with open(kc, "w") as f:
            yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "c", "cluster": {"server": "https://k:6443"}}],
                            "users": [{"name": "u", "user": {"client-certificate-data": "x"}}]}, f)
        rc, out, derived = self.check(kubelet_bootstrap_token=None, kubelet_api_server=None, kubelet_kubeconfig_src=kc)
        self.assertEqual(rc, 0, out[-2000:])
        self.assertEqual(derived["kubelet_join"], "kubeconfig")
        self.refused("(kubelet_kubeconfig_src) is missing on the controller or is not a kubeconfig",
                     kubelet_bootstrap_token=None, kubelet_kubeconfig_src=os.path.join(self.play.dir, "check.yml"))

    def test_a_restricted_label_is_refused(self):
        self.refused("Node label node-role.kubernetes.io/gpu= (kubelet_node_labels) is refused",
                     kubelet_node_labels={"node-role.kubernetes.io/gpu": ""})

    def test_a_bad_taint_is_refused(self):
        self.refused("Taint 'gpu:NoWay' (kubelet_taints)", kubelet_taints=["gpu:NoWay"])

    def test_no_cluster_dns_is_refused(self):
        self.refused("kubelet_cluster_dns must list the cluster DNS service", kubelet_cluster_dns=[])

    def test_a_missing_kubelet_program_is_refused(self):
        self.refused("(kubelet_binary_src) is missing on the controller: build it with 'make kubernetes'",
                     kubelet_binary_src=os.path.join(self.play.dir, "no-kubelet"))


class Templates(unittest.TestCase):
    """The rendered files hold what a kubelet reads from them."""

    values = dict(INVENTORY, **FACTS, **PATHS, kubelet_join="token", kubelet_labels_arg=(
        "rekindle.dev/gpu-model=NVIDIA-H100-80GB-HBM3,rekindle.dev/driver=580.95.05,example.com/pool=h100"),
        kubelet_taint_list=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])

    def test_kubelet_configuration(self):
        c = yaml.safe_load(render("kubelet-config.yaml.j2", self.values))
        self.assertEqual((c["apiVersion"], c["kind"]), ("kubelet.config.k8s.io/v1beta1", "KubeletConfiguration"))
        self.assertEqual(c["containerRuntimeEndpoint"], "unix:///run/containerd/containerd.sock")
        self.assertEqual(c["cgroupDriver"], "systemd")
        self.assertEqual(c["runtimeRequestTimeout"], "10m")
        self.assertEqual(c["authentication"], {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                                               "x509": {"clientCAFile": "/etc/kubernetes/pki/ca.crt"}})
        self.assertEqual(c["authorization"], {"mode": "Webhook"})
        self.assertEqual(c["readOnlyPort"], 0)
        self.assertIs(c["rotateCertificates"], True)
        self.assertIs(c["serverTLSBootstrap"], True)
        self.assertIs(c["failSwapOn"], True)
        self.assertEqual(c["clusterDNS"], ["10.96.0.10"])
        self.assertEqual(c["clusterDomain"], "cluster.local")
        self.assertEqual(c["registerWithTaints"], [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])

    def test_bootstrap_kubeconfig(self):
        k = yaml.safe_load(render("bootstrap-kubelet.conf.j2", self.values))
        self.assertEqual((k["apiVersion"], k["kind"]), ("v1", "Config"))
        ctx = {c["name"]: c["context"] for c in k["contexts"]}[k["current-context"]]
        cluster = {c["name"]: c["cluster"] for c in k["clusters"]}[ctx["cluster"]]
        user = {u["name"]: u["user"] for u in k["users"]}[ctx["user"]]
        self.assertEqual(cluster, {"server": "https://10.0.0.1:6443", "certificate-authority": "/etc/kubernetes/pki/ca.crt"})
        self.assertEqual(user, {"token": "abcdef.0123456789abcdef"})

    def test_unit_with_a_bootstrap_token(self):
        u = unit_sections(render("kubelet.service.j2", self.values))
        unit = dict(u["Unit"])
        self.assertIn("containerd.service", unit["After"].split())
        self.assertEqual(unit["Requires"], "containerd.service")
        args = dict(u["Service"])["ExecStart"].split()
        self.assertEqual(args[0], "/usr/local/bin/kubelet")
        self.assertIn("--config=/etc/kubernetes/kubelet-config.yaml", args)
        self.assertIn("--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", args)
        self.assertIn("--kubeconfig=/etc/kubernetes/kubelet.conf", args)
        self.assertIn("--hostname-override=gpu-node-1", args)
        self.assertIn("--node-labels=" + self.values["kubelet_labels_arg"], args)
        self.assertEqual(dict(u["Install"])["WantedBy"], "multi-user.target")

    def test_unit_with_a_kubeconfig_and_no_labels(self):
        v = dict(self.values, kubelet_join="kubeconfig", kubelet_labels_arg="", kubelet_node_ip="10.0.0.7",
                 kubelet_extra_args=["--max-pods=16"])
        args = dict(unit_sections(render("kubelet.service.j2", v))["Service"])["ExecStart"].split()
        self.assertFalse([a for a in args if a.startswith(("--bootstrap-kubeconfig", "--node-labels"))], args)
        self.assertIn("--node-ip=10.0.0.7", args)
        self.assertIn("--max-pods=16", args)


class ContainerdFacts(unittest.TestCase):
    """library/kubelet_containerd.py reads a `containerd config dump` as containerd 2.3 prints it."""

    DUMP = """version = 4
[plugins]
  [plugins.'io.containerd.cri.v1.runtime']
    enable_experimental_restore_via_create = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes]
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
          runtime_type = 'io.containerd.runc.v2'
          [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
            BinaryName = '/usr/local/bin/runc'
            SystemdCgroup = true
  [plugins.'io.containerd.server.v1.grpc']
    address = '/run/k/containerd.sock'
  [plugins.'io.containerd.service.v1.tasks-service']
    checkpoint_restore_images = ['registry.example.internal/inference']
"""

    def test_facts(self):
        sys.path.insert(0, os.path.join(HERE, "library"))
        try:
            from kubelet_containerd import facts
        finally:
            sys.path.pop(0)
        self.assertEqual(facts(self.DUMP), {
            "address": "/run/k/containerd.sock", "runtime": "runc", "systemd_cgroup": True,
            "restore_images": ["registry.example.internal/inference"], "restore_via_create": True})
        self.assertEqual(facts("version = 4\n")["systemd_cgroup"], False)


if __name__ == "__main__":
    unittest.main()
