#!/usr/bin/env bash
# containerd-config.sh DIR BINDIR: print a containerd config that keeps all
# of containerd's root, state, sockets and network namespaces under DIR, so
# a test run can be torn down completely and runs never collide.
#
# CONTAINERD_RESTORE_IMAGES is the TOML list of image name patterns whose
# checkpoint images this containerd restores (containerd-patches/checkpointimage-restore-only-the-checkpoint-images-t); by
# default the names the tests and the demo use: images made on this host
# (rekindle.local/...) and the tests' registries on loopback. Set it empty
# to leave the option out, as a host without a policy has it: no checkpoint
# image restores then.
#
# CONTAINERD_RESTORE_KEYS (a TOML list of PEM public key files) and
# CONTAINERD_RESTORE_REQUIRE_SIGNATURE (true or false) set
# checkpoint_restore_keys and checkpoint_restore_require_signature
# (containerd-patches/checkpointimage-restore-only-signed-checkpoint-image); unset,
# the default, they are left out: no signature is required.
#
# CONTAINERD_DISABLE_READ_AHEAD=true sets disable_checkpoint_read_ahead: a
# restore's pages images are then read by CRIU alone
# (containerd-patches/tasks-read-a-checkpoint-s-pages-images-ahead-from-ta).
#
# CONTAINERD_RESTORE_TIMEOUT (a Go duration) and
# CONTAINERD_RESTORE_MAX_DECODED_PAGES (a size) set checkpoint_restore_timeout
# and checkpoint_restore_max_decoded_pages
# (containerd-patches/runc-shim-kill-a-restore-that-outlasts-checkpoint_re,
# containerd-patches/runc-shim-bound-the-decoded-pages-images-by-the-cont);
# unset, they are left out: 10 minutes, half the host's memory.
set -euo pipefail
dir=$1 bin=$2
restore_images=${CONTAINERD_RESTORE_IMAGES-'["rekindle.local", "127.0.0.1:*"]'}
restore_keys=${CONTAINERD_RESTORE_KEYS:-}
require_signature=${CONTAINERD_RESTORE_REQUIRE_SIGNATURE:-}
disable_read_ahead=${CONTAINERD_DISABLE_READ_AHEAD:-}
restore_timeout=${CONTAINERD_RESTORE_TIMEOUT:-}
max_decoded_pages=${CONTAINERD_RESTORE_MAX_DECODED_PAGES:-}
for v in CONTAINERD_RESTORE_REQUIRE_SIGNATURE CONTAINERD_DISABLE_READ_AHEAD; do
	case "${!v:-}" in '' | true | false) ;; *)
		echo "containerd-config.sh: $v=${!v}: want true or false" >&2
		exit 2
		;;
	esac
done
cat <<TOML
version = 4
root = "$dir/root"
state = "$dir/state"
# Nothing from the host's /etc/containerd: a test run sees only this file.
imports = []

# A task's state is asked for (nerdctl's log driver does) while runc restores
# it, which takes as long as CRIU does; at the default 2 s the caller gives
# up and closes the container's stdio pipes, and the restored engine dies on
# its first write. Seen with a 2 GB checkpoint (make bench).
[timeouts]
  "io.containerd.timeout.task.state" = "${CONTAINERD_TASK_STATE_TIMEOUT:-120s}"

[debug]
  level = "${CONTAINERD_LOG_LEVEL:-info}"

[plugins.'io.containerd.server.v1.grpc']
  address = "$dir/containerd.sock"

[plugins.'io.containerd.server.v1.ttrpc']
  address = "$dir/containerd.sock.ttrpc"

[plugins.'io.containerd.service.v1.tasks-service']
$(
	[ -z "$restore_images" ] || echo "  checkpoint_restore_images = $restore_images"
	[ -z "$restore_keys" ] || echo "  checkpoint_restore_keys = $restore_keys"
	[ -z "$require_signature" ] || echo "  checkpoint_restore_require_signature = $require_signature"
	[ -z "$disable_read_ahead" ] || echo "  disable_checkpoint_read_ahead = $disable_read_ahead"
	[ -z "$restore_timeout" ] || echo "  checkpoint_restore_timeout = \"$restore_timeout\""
	[ -z "$max_decoded_pages" ] || echo "  checkpoint_restore_max_decoded_pages = \"$max_decoded_pages\""
)

[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  netns_mounts_under_state_dir = true
  # CRI CreateContainer restores checkpoint images (crictl, kubelet), those
  # that checkpoint_restore_images allows.
  enable_experimental_restore_via_create = true
  # Pod sandboxes ask for oom_score_adj -998; where containerd may not lower
  # it (no CAP_SYS_RESOURCE, as on the dev VM) they get containerd's own.
  restrict_oom_score_adj = true

[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["$bin/cni"]
  conf_dir = "$dir/cni/net.d"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  Root = "$dir/runc"

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
TOML
