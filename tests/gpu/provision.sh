#!/usr/bin/env bash
# provision.sh BUNDLE WHEELS_DIR: on a GPU host without build tools, unpack the stack
# into /opt/rekindle (tests/gpu/prepare.sh), then run the playbook's roles
# that need a GPU box for real: host, nvidia (driver check, persistence mode, CDI spec),
# containerd and healthcheck (containerd answers, criu check, the CUDA
# checkpoint/restore smoke test). The stack role is left out: it builds from
# source, and the machine has no network or Go; the bundle stands in for it.
# A second run must report changed=0. ansible-core comes from WHEELS_DIR
# (the machine has jinja2, PyYAML and packaging, not ansible).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -eq 2 ] || { echo "usage: $0 BUNDLE WHEELS_DIR"; exit 2; }
bundle=$1 wheels=$2
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
"$root/tests/gpu/prepare.sh" "$bundle" "$out/cdi.log" || exit 1
site=/tmp/rekindle-ansible
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$wheels"/*.whl ||
	{ echo "FAIL: cannot install ansible-core from $wheels"; exit 1; }
playbook() {
	PYTHONPATH=$site ANSIBLE_CONFIG=$root/ansible/ansible.cfg python3 -m ansible playbook \
		-i localhost, -c local -e ansible_python_interpreter="$(command -v python3)" \
		-e '{"rekindle_cpu_only": false}' -e rekindle_prefix=/opt/rekindle -e rekindle_src_dir="$root" \
		--tags host,nvidia,containerd,healthcheck "$root/ansible/site.yml"
}
rc=0
for run in 1 2; do
	echo "== playbook run $run"
	playbook 2>&1 | tee "$out/provision-$run.log"
	[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "FAIL: playbook run $run failed"; rc=1; break; }
done
if [ $rc -eq 0 ]; then
	grep -q 'changed=0 ' "$out/provision-2.log" || { echo "FAIL: the second run changed something"; rc=1; }
fi
exit $rc
