"""A role's input checks (its tasks/check.yml) run alone through
ansible-playbook on localhost, with no facts, for the roles' unit tests
(roles/*/test_*.py): each check refuses a bad inventory with a message
naming the variable, before anything is written."""
import json
import os
import shutil
import subprocess
import tempfile

PLAYBOOK = shutil.which("ansible-playbook")
ROLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "roles")

PLAY = """
- name: The {role} role's input checks
  hosts: localhost
  connection: local
  gather_facts: false
  vars_files: {vars_files}
  tasks:
    - name: Checks
      ansible.builtin.include_role: {{name: {role}, tasks_from: check, public: true}}
{more}"""


class Play:
    """ROLE's checks, with the defaults of the roles VARS_FROM loaded first
    and MORE (YAML tasks) after them, in a folder of its own."""

    def __init__(self, role, vars_from=("common",), more=""):
        self.dir = tempfile.mkdtemp(prefix="test-%s-" % role)
        self.path = os.path.join(self.dir, "check.yml")
        files = [os.path.join(ROLES, r, "defaults", "main.yml") for r in vars_from]
        with open(self.path, "w") as f:
            f.write(PLAY.format(role=role, vars_files=json.dumps(files), more=more))

    def stub(self, name):
        """An executable stand-in for a program, in the folder; its path."""
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(path, 0o755)
        return path

    def run(self, values):
        """Run the play with VALUES as extra variables: (exit status, output on one line)."""
        env = dict(os.environ, ANSIBLE_ROLES_PATH=ROLES, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0",
                   ANSIBLE_INVENTORY_UNPARSED_WARNING="0", ANSIBLE_RETRY_FILES_ENABLED="0")
        p = subprocess.run([PLAYBOOK, "-i", "localhost,", self.path, "-e", json.dumps(values)],
                           capture_output=True, text=True, env=env, cwd=self.dir)
        return p.returncode, " ".join((p.stdout + p.stderr).split())

    def close(self):
        shutil.rmtree(self.dir)
