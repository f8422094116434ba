#!/usr/bin/env bash
# Install the Debian packages the build and the tests need. Idempotent:
# it only calls apt-get when something is missing.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_root

pkgs=(
	# build
	build-essential pkg-config git jq xz-utils curl ca-certificates dpkg-dev
	libseccomp-dev
	libprotobuf-dev libprotobuf-c-dev protobuf-c-compiler protobuf-compiler python3-protobuf
	libnl-3-dev libnet1-dev libcap-dev libbsd-dev libgnutls28-dev uuid-dev libnftables-dev
	# mkfs.erofs from source (scripts/build-erofs-utils.sh)
	autoconf automake libtool
	# run and test
	iptables iproute2 kmod containernetworking-plugins bats skopeo docker-registry
	debootstrap umoci busybox-static python3 python3-pytest psmisc
	# htpasswd -B: the bcrypt password file of the basic-auth registry (tests/bats/420)
	apache2-utils
	# CRIU's zdtm tests (make test-criu)
	python3-yaml
	# provisioning (ansible/) and its tests: playbook, linter, systemd-analyze
	ansible-core ansible-lint systemd
	# benchmarks: bench/bench-report.py draws the timeline chart (make bench)
	python3-matplotlib
	# podman interop (docs/podman.md, tests/bats/430-podman.bats); nsenter
	# reaches the engine in the network namespace it was restored with
	podman util-linux
	# the fleet (fleet/, make bench-fleet): Kraken's components serve through
	# nginx, its tracker keeps peers in Redis
	nginx redis-server
)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	note "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq || die "apt-get update failed: check the apt sources in /etc/apt"
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
		die "apt-get install failed for: ${missing[*]}"
fi

# Debian's podman puts its "podman" CNI network into /etc/cni/net.d, where
# nerdctl reads its networks from, and nerdctl then lists it as one of its
# own. Rekindle's podman runs with its own network config directory.
rm -f /etc/cni/net.d/87-podman-bridge.conflist
