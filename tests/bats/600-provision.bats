#!/usr/bin/env bats
# Provisioning: ansible/ is lint-clean, the systemd units verify, the playbook
# provisions this machine for real (local connection, CPU only, everything
# under a private root so the host is left alone) and changes nothing on a
# second run, and the stack it installed works. The containerd role keeps a
# kubeadm node's configuration, adding only the import of Rekindle's drop-in,
# and refuses one it cannot merge. The GPU tasks run in check mode against a
# fake driver. systemd/rekindle-cache-gc.sh prunes checkpoint cache
# entries in a real containerd.

load helpers

ANSIBLE_DIR=$REKINDLE_ROOT/ansible

setup_file() {
	export PROV=$BATS_FILE_TMPDIR/prov
	export PROV_ROOT=$PROV/root PROV_PREFIX=$PROV/root/opt/rekindle
	mkdir -p "$PROV"
	# The build in build/ is made for PREFIX=/usr/local (CRIU's plugin
	# directory): building for the private prefix would rebuild CRIU.
	cat >"$PROV/vars.yml" <<EOF
rekindle_root: $PROV_ROOT
rekindle_prefix: $PROV_PREFIX
stack_build_prefix: /usr/local
stack_stage_dir: $PROV/stage
EOF
	stack_up
}

teardown_file() {
	# The kubeadm test's containerd, should the test have failed with it up.
	[ ! -d "$PROV/kubeadm/rk" ] || REKINDLE_BIN=$BIN "$REKINDLE_ROOT/scripts/containerd-down.sh" "$PROV/kubeadm/rk" 3>&-
	stack_down
}

# playbook ARGS...: ansible-playbook site.yml with this file's private root.
playbook() {
	local expect=0
	case "$1" in [0-9]* | '?') expect=$1; shift ;; esac
	cd "$ANSIBLE_DIR"
	ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0 run_cmd "$expect" \
		ansible-playbook -i inventory/local.yml site.yml -e "@$PROV/vars.yml" "$@"
}

# recap FIELD: FIELD=N of the last playbook run's PLAY RECAP line.
recap() {
	grep -E '^localhost +:' <<<"$output" | tail -1 | grep -oE "$1=[0-9]+" | cut -d= -f2
}

# ---- ansible and systemd files ---------------------------------------------

@test "ansible-lint finds nothing in ansible/ (production profile)" {
	command -v ansible-lint >/dev/null || die "ansible-lint is missing: run 'make deps'"
	cd "$ANSIBLE_DIR"
	run_cmd ansible-lint --nocolor
	is "$output" "~Passed with production profile: 0 failure\(s\), 0 warning\(s\)" "ansible-lint summary"
}

@test "the playbook provisions this machine (CPU only, private root)" {
	playbook
	is "$(recap failed)" "0" "failed tasks"
	[ -x "$PROV_PREFIX/bin/containerd" ] || die "containerd not installed under $PROV_PREFIX"
	[ -x "$PROV_PREFIX/bin/rekindle-cache-gc" ] || die "cache pruner not installed"
	[ -f "$PROV_PREFIX/lib/criu/cuda_plugin.so" ] || die "CRIU's CUDA plugin not installed"
	[ -x "$PROV_PREFIX/libexec/cni/bridge" ] || die "CNI plugins not installed"
	cmp "$REKINDLE_ROOT/build/bin/containerd" "$PROV_PREFIX/bin/containerd" || die "installed containerd differs from the build"
	is "$(cat "$PROV_ROOT/etc/sysctl.d/90-rekindle.conf" | grep -v '^#')" "kernel.io_uring_disabled = 2" "sysctl file"
	is "$(cat "$PROV_ROOT/etc/criu/runc.conf")" "tcp-established
link-remap
ghost-limit 64M" "runc's CRIU configuration (what vLLM needs)"
	grep -qx "ExecStart=$PROV_PREFIX/bin/containerd --config $PROV_ROOT/etc/containerd/config.toml" \
		"$PROV_ROOT/etc/systemd/system/containerd.service.d/rekindle.conf" || die "drop-in does not start the installed containerd"
	grep -q "^Environment=PATH=$PROV_PREFIX/bin:" "$PROV_ROOT/etc/systemd/system/containerd.service.d/rekindle.conf" ||
		die "drop-in does not put the stack first on PATH"
	grep -qxF "imports = [\"$PROV_ROOT/etc/containerd/conf.d/rekindle.toml\"]" "$PROV_ROOT/etc/containerd/config.toml" ||
		die "config does not import Rekindle's drop-in"
	grep -q "BinaryName = \"$PROV_PREFIX/bin/runc\"" "$PROV_ROOT/etc/containerd/conf.d/rekindle.toml" || die "drop-in does not name our runc"
	# No restore policy by default: no checkpoint image restores, CRI's switch is off.
	grep -qx "  checkpoint_restore_images = \[\]" "$PROV_ROOT/etc/containerd/conf.d/rekindle.toml" || die "drop-in sets a restore policy by default"
	grep -qx "  enable_experimental_restore_via_create = false" "$PROV_ROOT/etc/containerd/conf.d/rekindle.toml" ||
		die "drop-in turns CRI's restore via create on without a policy"
	# No signature required by default, no keys installed.
	grep -qx "  checkpoint_restore_keys = \[\]" "$PROV_ROOT/etc/containerd/conf.d/rekindle.toml" || die "drop-in lists restore keys by default"
	grep -qx "  checkpoint_restore_require_signature = false" "$PROV_ROOT/etc/containerd/conf.d/rekindle.toml" ||
		die "drop-in requires a signature by default"
	[ ! -e "$PROV_ROOT/etc/rekindle/keys" ] || die "restore keys installed by default"
	# Not a systemd host, or a staged install: nothing was enabled or started.
	is "$output" "~TASK \[systemd : Enable and start the services\] \*+[[:space:]]+skipping" "services left alone"
	# The health check started the installed containerd on a private socket.
	is "$output" "~Version:  [0-9.]+\+rekindle" "health check: containerd answered"
	is "$output" "~plugins loaded: io.containerd.snapshotter.v1 overlayfs" "health check: plugins"
	# The running kernel was not touched.
	is "$output" "~TASK \[host : Apply the kernel parameters that differ\] \*+[[:space:]]+skipping" "no live sysctl"
}

@test "a second run of the playbook changes nothing" {
	[ -x "$PROV_PREFIX/bin/containerd" ] || skip "the first run did not install the stack"
	playbook
	is "$(recap failed)" "0" "failed tasks"
	is "$(recap changed)" "0" "changed tasks on the second run"
	echo "# $(grep -E '^localhost +:' <<<"$output")" >&3
}

@test "systemd-analyze verify accepts the installed units" {
	command -v systemd-analyze >/dev/null ||
		skip "systemd-analyze is missing (Debian package systemd; 'make deps' installs it)"
	local d=$PROV_ROOT/etc/systemd/system
	[ -f "$d/containerd.service" ] || skip "the playbook did not install the units"
	cd "$d"
	run_cmd systemd-analyze verify ./containerd.service ./rekindle-cache-gc.service ./rekindle-cache-gc.timer ./rekindle-cuda-hold.service
	is "$output" "" "systemd-analyze findings"
	# The drop-in is read with the unit: a broken one must show.
	cp -r "$d" "$BATS_TEST_TMPDIR/units"
	echo "ExecStartPre=relative/path" >>"$BATS_TEST_TMPDIR/units/containerd.service.d/rekindle.conf"
	cd "$BATS_TEST_TMPDIR/units"
	run_cmd '?' systemd-analyze verify ./containerd.service
	is "$output" "~rekindle.conf.*(relative|absolute)" "a bad drop-in is reported"
}

@test "the installed stack runs: containerd on a private socket, a container, criu check" {
	[ -x "$PROV_PREFIX/bin/containerd" ] || skip "the first run did not install the stack"
	local dir=$BATS_TEST_TMPDIR/rk-installed
	REKINDLE_BIN=$PROV_PREFIX/bin "$REKINDLE_ROOT/scripts/containerd-up.sh" "$dir" 3>&-
	local ctr=("$PROV_PREFIX/bin/ctr" --address "$dir/containerd.sock")
	run_cmd "${ctr[@]}" version
	is "$output" "~Server:.*Version: +[0-9.]+\+rekindle" "server version"
	run_cmd "${ctr[@]}" images import --all-platforms "$IMAGES/base.tar"
	run_cmd "${ctr[@]}" run --rm "$BASE_IMAGE" prov-check python3 -c 'print(6 * 7)'
	local out=${lines[-1]}
	REKINDLE_BIN=$PROV_PREFIX/bin "$REKINDLE_ROOT/scripts/containerd-down.sh" "$dir" 3>&-
	is "$out" "42" "a container ran with the installed runc"
	run_cmd "$PROV_PREFIX/bin/criu" check
	is "$output" "~Looks good" "criu check with the installed criu"
}

# ---- over an existing containerd configuration ----------------------------

# kubeadm_config DIR: a kubeadm node's containerd configuration (version 3,
# systemd cgroup driver, its own sandbox image, CNI plugins in /opt/cni/bin,
# a registry mirror through config_path) under the private root DIR/root,
# with containerd's root, state and socket under DIR/rk. Prints its path.
kubeadm_config() {
	local dir=$1 etc=$1/root/etc
	mkdir -p "$etc/containerd/certs.d/docker.io" "$etc/cni/net.d"
	cat >"$etc/containerd/certs.d/docker.io/hosts.toml" <<EOF
server = "https://registry-1.docker.io"
[host."https://mirror.example.internal"]
  capabilities = ["pull", "resolve"]
EOF
	cat >"$etc/containerd/config.toml" <<EOF
# A kubeadm node's: systemd cgroups, the cluster's pause image, Calico's
# plugins in /opt/cni/bin, a pull-through registry mirror.
version = 3
root = "$dir/rk/root"
state = "$dir/rk/state"

[grpc]
  address = "$dir/rk/containerd.sock"

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "registry.k8s.io/pause:3.10"

[plugins.'io.containerd.cri.v1.images'.registry]
  config_path = "$etc/containerd/certs.d"

[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["/opt/cni/bin"]
  conf_dir = "$etc/cni/net.d"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  SystemdCgroup = true
EOF
	echo "$etc/containerd/config.toml"
}

# dump_has CONFIG LINE...: `containerd config dump` of CONFIG, its imports
# merged as containerd merges them, holds each LINE (indentation ignored).
dump_has() {
	local config=$1 line dump
	shift
	dump=$("$BIN/containerd" --config "$config" config dump 2>/dev/null) ||
		die "containerd config dump of $config failed"
	dump=$(sed 's/^ *//' <<<"$dump")
	for line in "$@"; do
		grep -qxF -- "$line" <<<"$dump" || die "config dump of $config lacks: $line"
	done
}

# flat: the last playbook run's output on one line, as Ansible's YAML
# callback wraps long messages and doubles their single quotes.
flat() {
	tr -s ' \n' ' ' <<<"$output" | sed "s/''/'/g"
}

# tree_sums DIR: a checksum line for every file under DIR.
tree_sums() {
	(cd "$1" && find . -type f -exec sha256sum {} + | sort -k2)
}

@test "over a kubeadm node's configuration: only its imports line changes, its settings stay" {
	local k=$PROV/kubeadm config dropin
	config=$(kubeadm_config "$k")
	dropin=$k/root/etc/containerd/conf.d/rekindle.toml
	cp "$config" "$k/before.toml"

	# A node with a restore policy requiring a signature by team.pub (made
	# as docs/operations.md says): CRI's restore via create is on, the key
	# is installed under /etc/rekindle/keys.
	mkdir -p "$k/controller"
	openssl genpkey -algorithm ed25519 -out "$k/controller/team.key" 2>/dev/null || die "openssl cannot make an Ed25519 key"
	openssl pkey -in "$k/controller/team.key" -pubout -out "$k/controller/team.pub"
	local policy
	policy=$(jq -nc --arg key "$k/controller/team.pub" '{containerd_restore_images: ["registry.example.internal/inference"],
		containerd_restore_keys: [$key], containerd_restore_require_signature: true}')
	playbook --check --tags containerd -e "rekindle_root=$k/root" -e "$policy"
	is "$(recap failed)" "0" "failed tasks in check mode"
	cmp "$k/before.toml" "$config" || die "check mode changed $config"
	[ ! -e "$dropin" ] || die "check mode wrote the drop-in"

	playbook --tags containerd -e "rekindle_root=$k/root" -e "$policy"
	is "$(flat)" "~$config: kept" "the existing configuration is kept"
	is "$(diff "$k/before.toml" "$config" | grep '^[<>]')" "> imports = [\"$dropin\"]" "the one line added"
	local backup
	backup=$(ls "$config".*~) || die "no backup of $config"
	cmp "$k/before.toml" "$backup" || die "the backup differs from the configuration as it was"
	# What containerd makes of the two files: the node's settings and Rekindle's.
	dump_has "$config" "SystemdCgroup = true" "sandbox = 'registry.k8s.io/pause:3.10'" \
		"bin_dirs = ['/opt/cni/bin']" "conf_dir = '$k/root/etc/cni/net.d'" \
		"config_path = '$k/root/etc/containerd/certs.d'" \
		"BinaryName = '$PROV_PREFIX/bin/runc'" "enable_cdi = true" "enable_criu = true" \
		"enable_experimental_restore_via_create = true" "'io.containerd.timeout.task.state' = '120s'" \
		"checkpoint_restore_images = ['registry.example.internal/inference']" \
		"checkpoint_restore_keys = ['$k/root/etc/rekindle/keys/team.pub']" "checkpoint_restore_require_signature = true"
	cmp "$k/controller/team.pub" "$k/root/etc/rekindle/keys/team.pub" || die "the restore key is not installed"

	tree_sums "$k/root" >"$k/after-first"
	playbook --tags containerd -e "rekindle_root=$k/root" -e "$policy"
	is "$(recap changed)" "0" "changed tasks on a second run"
	is "$(tree_sums "$k/root")" "$(cat "$k/after-first")" "files under the root after a second run"
}

@test "the kept kubeadm configuration runs: CRI sees both sets of settings, a container runs" {
	local k=$PROV/kubeadm
	local config=$k/root/etc/containerd/config.toml sock=$k/rk/containerd.sock bin=$BIN
	[ -f "$k/root/etc/containerd/conf.d/rekindle.toml" ] || skip "the kubeadm configuration was not provisioned"
	[ ! -x "$PROV_PREFIX/bin/containerd" ] || bin=$PROV_PREFIX/bin
	mkdir -p "$k/rk"
	PATH=$bin:$PATH setsid "$bin/containerd" --config "$config" >"$k/rk/containerd.log" 2>&1 </dev/null 3>&- &
	echo $! >"$k/rk/containerd.pid"
	wait_for "containerd on $sock" 20 "$bin/ctr" --address "$sock" version
	local info
	info=$("$BIN/crictl" --runtime-endpoint "unix://$sock" info 2>/dev/null) || die "crictl info failed"
	is "$(jq -c '.config.containerd.runtimes.runc.options | [.SystemdCgroup, .BinaryName]' <<<"$info")" \
		"[true,\"$PROV_PREFIX/bin/runc\"]" "CRI's runc options: the node's cgroup driver, Rekindle's runc"
	is "$(jq -c '.config.cni.binDirs' <<<"$info")" '["/opt/cni/bin"]' "CRI's CNI plugin directories"
	is "$(jq -c '.config | [.enableCDI, .enableCRIU, .enableExperimentalRestoreViaCreate]' <<<"$info")" \
		"[true,true,true]" "CRI: CDI, CRIU, restore via create"
	# The tasks service read the installed key: the policy requires a signature by it.
	grep -q "checkpoint restore policy: .*signed by one of the keys \[sha256:[0-9a-f]* ($k/root/etc/rekindle/keys/team.pub)\]" "$k/rk/containerd.log" ||
		die "containerd's restore policy does not require a signature by the installed key"
	run_cmd "$bin/ctr" --address "$sock" images import --all-platforms "$IMAGES/base.tar"
	run_cmd "$bin/ctr" --address "$sock" run --rm "$BASE_IMAGE" kubeadm-check python3 -c 'print(6 * 7)'
	local out=${lines[-1]}
	REKINDLE_BIN=$bin "$REKINDLE_ROOT/scripts/containerd-down.sh" "$k/rk" 3>&-
	is "$out" "42" "a container ran under the kept configuration"
}

@test "a configuration that cannot take the drop-in is refused, naming file, setting and fix, and left as it was" {
	local k=$PROV/conflict config
	config=$(kubeadm_config "$k")
	# The NVIDIA toolkit's runtime wrapper, set in a file the main one imports.
	sed -i "/^version = 3/a imports = [\"$k/root/etc/containerd/conf.d/*.toml\"]" "$config"
	mkdir -p "$k/root/etc/containerd/conf.d"
	cat >"$k/root/etc/containerd/conf.d/99-nvidia.toml" <<EOF
version = 3
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  BinaryName = "/usr/bin/nvidia-container-runtime"
EOF
	tree_sums "$k/root" >"$k/before"
	playbook 2 --tags containerd -e "rekindle_root=$k/root"
	is "$output" "~cannot be merged into $config \(read with $k/root/etc/containerd/conf.d/99-nvidia.toml\)" "names the files"
	is "$output" "~99-nvidia.toml sets plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options.BinaryName = \"/usr/bin/nvidia-container-runtime\"; Rekindle needs \"$PROV_PREFIX/bin/runc\"" "names the setting and both values"
	is "$output" "~Remove that line" "says how to fix it"
	is "$(tree_sums "$k/root")" "$(cat "$k/before")" "files under the root after the refusal"

	# containerd 1.x's format, which containerd 2.3 would migrate on every start.
	rm "$k/root/etc/containerd/conf.d/99-nvidia.toml"
	printf 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n' >"$config"
	tree_sums "$k/root" >"$k/before"
	playbook 2 --tags containerd -e "rekindle_root=$k/root"
	is "$(flat)" "~$config is a version 2 containerd configuration" "names the file and its version"
	is "$(flat)" "~containerd --config $config config migrate > new.toml" "says how to fix it"
	is "$(tree_sums "$k/root")" "$(cat "$k/before")" "files under the root after the refusal"
}

@test "containerd_import edits only the imports line, whatever its shape" {
	local py
	py=$(sed -n '1s/^#! *//p' "$(command -v ansible-playbook)")
	PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$ANSIBLE_DIR/roles/containerd/library run_cmd "$py" - <<'PY'
import tomllib
from containerd_import import add_import

ours = "/etc/containerd/conf.d/rekindle.toml"
cases = [  # (config.toml, the same with the import added)
    ('version = 3\n[grpc]\n  address = "/s"\n',
     'version = 3\nimports = ["%s"]\n[grpc]\n  address = "/s"\n' % ours),
    ('# kubeadm\nversion = 3 # v3\n\nroot = "/r"\n',
     '# kubeadm\nversion = 3 # v3\nimports = ["%s"]\n\nroot = "/r"\n' % ours),
    ('version = 3\r\nroot = "/r"\r\n',
     'version = 3\r\nimports = ["%s"]\r\nroot = "/r"\r\n' % ours),
    ('version = 4\nimports = []\n', 'version = 4\nimports = ["%s"]\n' % ours),
    ('version = 4\n  imports = ["/a.toml"]  # ours\n[x]\n',
     'version = 4\n  imports = ["/a.toml", "%s"]  # ours\n[x]\n' % ours),
    ('version = 3\nimports = [\n  "/a.toml",\n  "/b.toml",\n]\nroot = "/r"\n',
     'version = 3\nimports = ["/a.toml", "/b.toml", "%s"]\nroot = "/r"\n' % ours),
    # No top-level version line to add it after, an imports key in a table.
    ('[plugins]\n  x = 1\n', None),
]
bad = 0
for before, want in cases:
    got = add_import(before, tomllib.loads(before), ours)
    if got != want:
        bad += 1
        print("for %r\n  got  %r\n  want %r" % (before, got, want))
print("%d of %d cases differ" % (bad, len(cases)))
PY
	is "${lines[-1]}" "0 of 7 cases differ" "edits"
}

# ---- check mode ------------------------------------------------------------

# fake_driver VERSION [open]: a stand-in for /proc/driver/nvidia/version, of
# the proprietary kernel module or (open) the open one, whose line was read
# on a lent H100.
fake_driver() {
	local f=$BATS_TEST_TMPDIR/nvidia-version
	if [ "${2:-}" = open ]; then
		printf 'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  (nixbld@)  \nGCC version:  gcc version 15.3.0 (GCC) \n' "$1" >"$f"
	else
		printf 'NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  Sun Jan  1 00:00:00 UTC 2026\nGCC version:  gcc version 12.2.0\n' "$1" >"$f"
	fi
	echo "$f"
}

@test "check mode: the GPU tasks run against a driver 580 (forced on a CPU host)" {
	playbook --check --tags nvidia -e nvidia_force=true -e "nvidia_driver_version_file=$(fake_driver 580.95.05)"
	is "$output" "~NVIDIA driver 580.95.05" "driver accepted"
	is "$output" "~TASK \[nvidia : Generate the CDI spec for driver 580.95.05\]" "CDI spec task reached"
	is "$output" "~TASK \[nvidia : Record the driver version the spec was made for\] \*+[[:space:]]+changed" "version would be recorded"
	[ ! -e "$PROV_ROOT/var/lib/rekindle/cdi-driver-version" ] || die "check mode wrote the driver record"
}

@test "check mode: the open kernel module's version line is read too" {
	playbook --check --tags nvidia -e nvidia_force=true -e "nvidia_driver_version_file=$(fake_driver 580.159.04 open)"
	is "$output" "~NVIDIA driver 580.159.04" "driver accepted"
}

@test "check mode: a driver older than 580 is refused, saying why" {
	playbook 2 --check --tags nvidia -e nvidia_force=true -e "nvidia_driver_version_file=$(fake_driver 550.54.14)"
	is "$output" "~NVIDIA driver 550.54.14 is older than 580" "refusal names the driver and the minimum"
}

@test "check mode: a host without the NVIDIA driver is refused, saying why" {
	! nvidia-smi -L >/dev/null 2>&1 || skip "this host has a working NVIDIA driver"
	playbook 2 --check --tags nvidia -e nvidia_force=true -e nvidia_driver_version_file=/nonexistent
	is "$output" "~No NVIDIA driver found" "refusal"
	is "$output" "~or set rekindle_cpu_only=true" "says how to go on"
}

@test "check mode: applying the kernel settings live leaves the kernel alone" {
	local before
	before=$(cat /proc/sys/kernel/io_uring_disabled)
	playbook --check --tags host -e host_apply_live=true
	is "$(recap failed)" "0" "failed tasks"
	is "$output" "~TASK \[host : Read the live kernel parameters\] \*+[[:space:]]+ok: \[localhost\] => \(item=kernel.io_uring_disabled\)" "live value read"
	is "$(cat /proc/sys/kernel/io_uring_disabled)" "$before" "kernel.io_uring_disabled after --check"
}

# ---- systemd/rekindle-cache-gc.sh ------------------------------------------

# snap NS ARGS...: ctr snapshots in namespace NS of this file's containerd.
snap() {
	local ns=$1
	shift
	"$BIN/ctr" --address "$RK_DIR/containerd.sock" -n "$ns" snapshots "$@"
}

# commit_with NS KEY PARENT MIB: commit snapshot KEY on PARENT holding MIB MiB.
commit_with() {
	local ns=$1 key=$2 parent=$3 mib=$4 dir tmp=tmp-$RANDOM$RANDOM
	# shellcheck disable=SC2086 # no parent: no argument
	snap "$ns" prepare --mounts "$tmp" $parent >"$BATS_TEST_TMPDIR/m.json"
	# A bind mount without a parent, an overlay on one: write into its upper dir.
	dir=$(jq -r '.[0] | if .Type == "bind" then .Source else (.Options[] | select(startswith("upperdir=")) | ltrimstr("upperdir=")) end' "$BATS_TEST_TMPDIR/m.json")
	[ -d "$dir" ] || die "no directory for snapshot $tmp"
	[ "$mib" -eq 0 ] || dd if=/dev/urandom of="$dir/blob" bs=1M count="$mib" status=none
	snap "$ns" commit "$key" "$tmp"
}

# cache_entry NS LAYER MIB: a cache entry laid out as restore/checkpointimage/cache.go
# makes it: data (MIB MiB), data-view, rootfs/<chain> on the namespace's base.
# The patch keeps its entries alive with a back reference to the checkpoint
# layer; these stand-ins, with no image behind them, carry a GC root label
# instead (ctr commit adds one, ctr snapshots view does not).
cache_entry() {
	local ns=$1 layer=$2 mib=$3 key
	snap "$ns" info base >/dev/null 2>&1 || commit_with "$ns" base "" 1
	commit_with "$ns" "checkpoint-cache/$layer/data" "" "$mib"
	# Until it is labelled, the view is garbage: containerd's collector may
	# take it between the two calls (CI saw it), so make it again then.
	local try
	for try in 1 2 3; do
		snap "$ns" view "checkpoint-cache/$layer/data-view" "checkpoint-cache/$layer/data" >/dev/null 2>&1 || true
		snap "$ns" label "checkpoint-cache/$layer/data-view" "containerd.io/gc.root=$(date -u +%FT%TZ)" >/dev/null 2>&1 && break
	done
	snap "$ns" info "checkpoint-cache/$layer/data-view" >/dev/null || die "cannot make the view of cache entry $layer"
	commit_with "$ns" "checkpoint-cache/$layer/rootfs/base" base 0
	for key in data data-view rootfs/base; do
		snap "$ns" label "checkpoint-cache/$layer/$key" "containerd.io/checkpoint.cache.layer=$layer" >/dev/null
	done
}

# entry_keys NS LAYER: the snapshots of one entry.
entry_keys() {
	snap "$1" ls | awk -v k="checkpoint-cache/$2/" 'index($1, k) == 1 {print $1}' | sort
}

cache_gc() {
	local expect=0
	case "$1" in [0-9]* | '?') expect=$1; shift ;; esac
	run_cmd "$expect" "$REKINDLE_ROOT/systemd/rekindle-cache-gc.sh" --address "$RK_DIR/containerd.sock" "$@"
}

L_OLD=sha256:0000000000000000000000000000000000000000000000000000000000000a01
L_USED=sha256:0000000000000000000000000000000000000000000000000000000000000a02
L_BUILD=sha256:0000000000000000000000000000000000000000000000000000000000000a03
L_NEW=sha256:0000000000000000000000000000000000000000000000000000000000000a04

@test "cache-gc --max-age: old entries go, entries in use or being built stay" {
	local ns=gc-age
	cache_entry $ns $L_OLD 2
	cache_entry $ns $L_USED 1
	cache_entry $ns $L_BUILD 1
	# A restored container's root on the cache; a restore still building.
	snap $ns prepare container-rootfs "checkpoint-cache/$L_USED/rootfs/base" >/dev/null
	snap $ns prepare "checkpoint-cache/$L_BUILD/rootfs/base2/building-0123" base >/dev/null
	sleep 5
	cache_entry $ns $L_NEW 1

	cache_gc -n $ns --max-age 4s --dry-run
	is "$output" "~checkpoint-cache/$L_OLD [0-9.]+MiB age [0-9]+s: would remove \(older than 4s\)" "dry run names the old entry"
	is "$output" "~would remove 1, " "dry run summary"
	is "$(entry_keys $ns $L_OLD | wc -l)" "3" "entry still there after --dry-run"

	cache_gc -n $ns --max-age 4s
	is "$output" "~checkpoint-cache/$L_OLD .*: removed \(older than 4s\)" "old entry removed"
	is "$output" "~checkpoint-cache/$L_USED .*: keep \(in use by snapshot container-rootfs\)" "entry in use kept"
	is "$output" "~checkpoint-cache/$L_BUILD .*: keep \(being built by a restore\)" "entry being built kept"
	is "$(grep -c "checkpoint-cache/$L_NEW .*: keep$" <<<"$output")" "1" "young entry kept"
	is "$output" "~4 entries, .*; removed 1, 2\.[0-9]MiB" "summary"
	is "$(entry_keys $ns $L_OLD)" "" "snapshots of the removed entry"
	is "$(entry_keys $ns $L_USED | wc -l)" "3" "snapshots of the entry in use"
	is "$(entry_keys $ns $L_NEW | wc -l)" "3" "snapshots of the young entry"
	snap $ns info base >/dev/null || die "the base snapshot under the cache went too"
}

@test "cache-gc --max-size: the oldest entries go until the cache fits" {
	local ns=gc-size l
	for l in b01 b02 b03; do
		cache_entry $ns "sha256:$l" 2
		sleep 1.1
	done
	cache_gc -n $ns --max-size 5M
	is "$output" "~checkpoint-cache/sha256:b01 .*: removed \(cache over 5.0MiB\)" "oldest removed"
	is "$output" "~checkpoint-cache/sha256:b02 .*: keep" "second kept"
	is "$output" "~checkpoint-cache/sha256:b03 .*: keep" "newest kept"
	is "$(entry_keys $ns sha256:b01)" "" "snapshots of the oldest"
	# Under budget: nothing more goes.
	cache_gc -n $ns --max-size 5M --max-age 1d
	is "$output" "~2 entries, .*; removed 0, 0B" "second run"
}

@test "cache-gc from the installed prefix, as its unit runs it, over every namespace" {
	[ -x "$PROV_PREFIX/bin/rekindle-cache-gc" ] || skip "the playbook did not install the pruner"
	local unit=$PROV_ROOT/etc/systemd/system/rekindle-cache-gc.service
	grep -q "^ExecStart=$PROV_PREFIX/bin/rekindle-cache-gc --ctr $PROV_PREFIX/bin/ctr" "$unit" ||
		die "the unit does not run the installed pruner"
	run_cmd "$PROV_PREFIX/bin/rekindle-cache-gc" --ctr "$PROV_PREFIX/bin/ctr" \
		--address "$RK_DIR/containerd.sock" --max-age 14d --max-size 500G
	is "$output" "~cache-gc: [0-9]+ entries, .*; removed 0, 0B" "nothing young removed"
}

@test "cache-gc refuses bad limits and a containerd that does not answer" {
	cache_gc 2 --max-age 3x
	is "$output" "~bad age '3x'" "bad age"
	cache_gc 2 --max-size 10Q
	is "$output" "~bad size '10Q'" "bad size"
	run_cmd 2 "$REKINDLE_ROOT/systemd/rekindle-cache-gc.sh" --address "$BATS_TEST_TMPDIR/none.sock"
	is "$output" "~containerd does not answer on $BATS_TEST_TMPDIR/none.sock" "no containerd"
}
