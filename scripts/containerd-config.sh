#!/usr/bin/env bash
# containerd-config.sh DIR BINDIR: print a containerd config that keeps all
# of containerd's root, state, sockets and network namespaces under DIR, so
# a test run can be torn down completely and runs never collide. Rekindle's
# own settings come as on a provisioned host: DIR/rekindle.toml, which the
# config imports, is the Ansible role's drop-in template
# (ansible/roles/containerd/templates/rekindle.toml.j2) rendered with the
# test values below; this file adds only what a test run needs beside it.
#
# CONTAINERD_RESTORE_IMAGES is the TOML list of image name patterns whose
# checkpoint images this containerd restores (containerd-patches/checkpointimage-restore-only-the-checkpoint-images-t); by
# default the names the tests and the demo use: images made on this host
# (rekindle.local/...) and the tests' registries on loopback. Set it empty
# for an empty policy, the Ansible role's default: no checkpoint image
# restores then.
#
# CONTAINERD_RESTORE_KEYS (a TOML list of PEM public key files) and
# CONTAINERD_RESTORE_REQUIRE_SIGNATURE (true or false) set
# checkpoint_restore_keys and checkpoint_restore_require_signature
# (containerd-patches/checkpointimage-restore-only-signed-checkpoint-image); unset,
# no keys and no signature required, the role's defaults.
#
# CONTAINERD_DISABLE_READ_AHEAD=true sets disable_checkpoint_read_ahead: a
# restore's pages images are then read by CRIU alone
# (containerd-patches/tasks-read-a-checkpoint-s-pages-images-ahead-from-ta).
#
# CONTAINERD_PREHEAT_IMAGES (a TOML list of image names),
# CONTAINERD_PREHEAT_MAX_MEMORY and CONTAINERD_PREHEAT_INTERVAL set
# checkpoint_preheat_images, checkpoint_preheat_max_memory and
# checkpoint_preheat_interval (containerd-patches/tasks-keep-named-checkpoint-images-resident-checkpoi):
# none preheated by default.
# CONTAINERD_RESTORE_TIMEOUT (a Go duration) and
# CONTAINERD_RESTORE_MAX_DECODED_PAGES (a size) set checkpoint_restore_timeout
# and checkpoint_restore_max_decoded_pages
# (containerd-patches/runc-shim-kill-a-restore-that-outlasts-checkpoint_re,
# containerd-patches/runc-shim-bound-the-decoded-pages-images-by-the-cont);
# unset, 10 minutes and half the host's memory, the role's defaults.
#
# CONTAINERD_POD_ANNOTATIONS (a TOML list of annotation patterns) sets the
# runc runtime's pod_annotations: the pod annotations CRI passes into its
# containers' specs. 342-kubernetes-devshm.bats passes org.criu.config, the
# runc annotation that names a container's own CRIU configuration file
# (link-remap for its engine's dump), where a GPU host writes the host's
# /etc/criu/runc.conf (tests/gpu/prepare.sh, the Ansible role). Unset, none.
#
# CONTAINERD_REGISTRY_CONFIG_PATH, one folder of HOST[:PORT]/hosts.toml files
# (registry mirrors, docs/fleet.md), is the config_path of the CRI image
# service and of the transfer service. One folder, never a list: the
# transfer service's pulls skip the mirrors of a config_path that names two
# (containerd #12415, #12636).
set -euo pipefail
dir=$1 bin=$2
registry_config_path=${CONTAINERD_REGISTRY_CONFIG_PATH:-}
case "$registry_config_path" in *:*)
	echo "containerd-config.sh: CONTAINERD_REGISTRY_CONFIG_PATH=$registry_config_path names more than one folder: give one (containerd's transfer service skips the mirrors of a list)" >&2
	exit 2
	;;
esac
restore_images=${CONTAINERD_RESTORE_IMAGES-'["rekindle.local", "127.0.0.1:*"]'}
restore_keys=${CONTAINERD_RESTORE_KEYS:-}
require_signature=${CONTAINERD_RESTORE_REQUIRE_SIGNATURE:-}
disable_read_ahead=${CONTAINERD_DISABLE_READ_AHEAD:-}
restore_timeout=${CONTAINERD_RESTORE_TIMEOUT:-}
max_decoded_pages=${CONTAINERD_RESTORE_MAX_DECODED_PAGES:-}
preheat_images=${CONTAINERD_PREHEAT_IMAGES:-}
preheat_max=${CONTAINERD_PREHEAT_MAX_MEMORY:-}
preheat_interval=${CONTAINERD_PREHEAT_INTERVAL:-30s}
for v in CONTAINERD_RESTORE_REQUIRE_SIGNATURE CONTAINERD_DISABLE_READ_AHEAD; do
	case "${!v:-}" in '' | true | false) ;; *)
		echo "containerd-config.sh: $v=${!v}: want true or false" >&2
		exit 2
		;;
	esac
done
here=$(cd "$(dirname "$0")" && pwd)
# The role's variables, as the test chooses them (TOML lists read as such).
vars=$(python3 - "$dir" "$bin" "$restore_images" "$restore_keys" "${require_signature:-false}" \
	"${restore_timeout:-10m}" "$max_decoded_pages" "${CONTAINERD_TASK_STATE_TIMEOUT:-120s}" \
	"$preheat_images" "$preheat_max" "$preheat_interval" <<'PY'
import json, sys, tomllib
d, b, images, keys, require, timeout, pages, state, preheat, preheat_max, preheat_every = sys.argv[1:]
toml_list = lambda s: tomllib.loads("v = " + s)["v"] if s.strip() else []
print(json.dumps({
    "ansible_role_name": "containerd", "containerd_config_file": d + "/config.toml",
    "containerd_task_state_timeout": state,
    "containerd_restore_images": toml_list(images), "containerd_restore_key_files": toml_list(keys),
    "containerd_restore_require_signature": require == "true",
    "containerd_restore_timeout": timeout, "containerd_restore_max_decoded_pages": pages,
    "containerd_preheat_images": toml_list(preheat), "containerd_preheat_max_memory": preheat_max,
    "containerd_preheat_interval": preheat_every,
    "containerd_cdi_spec_dirs": ["/etc/cdi", "/var/run/cdi"], "containerd_enable_criu": True,
    # CRI restores checkpoint images (crictl) whatever the policy, which judges them.
    "containerd_restore_via_create": True, "containerd_runc": b + "/runc",
    # The registry config_path is this file's own (below), not the drop-in's.
    "containerd_registry_config_path": ""}))
PY
)
python3 "$here/render-template.py" "$here/../ansible/roles/containerd/templates/rekindle.toml.j2" "$vars" >"$dir/rekindle.toml.tmp"
mv "$dir/rekindle.toml.tmp" "$dir/rekindle.toml"
cat <<TOML
version = 4
root = "$dir/root"
state = "$dir/state"
# Nothing from the host's /etc/containerd: a test run sees this file and
# Rekindle's drop-in, written beside it from the role's template.
imports = ["$dir/rekindle.toml"]

[debug]
  level = "${CONTAINERD_LOG_LEVEL:-info}"

[plugins.'io.containerd.server.v1.grpc']
  address = "$dir/containerd.sock"

[plugins.'io.containerd.server.v1.ttrpc']
  address = "$dir/containerd.sock.ttrpc"

[plugins.'io.containerd.service.v1.tasks-service']
$([ -z "$disable_read_ahead" ] || echo "  disable_checkpoint_read_ahead = $disable_read_ahead")

[plugins.'io.containerd.cri.v1.runtime']
  netns_mounts_under_state_dir = true
  # Pod sandboxes ask for oom_score_adj -998; where containerd may not lower
  # it (no CAP_SYS_RESOURCE, as on the dev VM) they get containerd's own.
  restrict_oom_score_adj = true

[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["$bin/cni"]
  conf_dir = "$dir/cni/net.d"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  Root = "$dir/runc"
$([ -z "${CONTAINERD_POD_ANNOTATIONS:-}" ] || printf "\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\n  pod_annotations = %s\n" "$CONTAINERD_POD_ANNOTATIONS")

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
TOML
if [ -n "$registry_config_path" ]; then
	cat <<TOML

[plugins.'io.containerd.cri.v1.images'.registry]
  config_path = "$registry_config_path"

[plugins.'io.containerd.transfer.v1.local']
  config_path = "$registry_config_path"
TOML
fi
