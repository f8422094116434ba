#!/usr/bin/env bash
# kube-down.sh DIR: stop the Kubernetes that kube-up.sh started on DIR and
# remove what it left: its pods (through the CRI, so their networks are
# released), the kubelet's mounts, the pod cgroups, the CNI bridge and
# config, the log links in /var/log/containers, the kernel tunables the
# kubelet set (put back as they were) and DIR/kube. containerd
# keeps running (containerd-down.sh DIR stops it). Safe to run twice, or
# after a killed run.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
[ $# -eq 1 ] || die "usage: $0 DIR"
need_root
dir=$(realpath -m "$1")
bin=${REKINDLE_BIN:-$(dirname "$here")/build/bin}
k=$dir/kube
[ -d "$k" ] || exit 0
bridge= cgroot=
# shellcheck disable=SC1091 # written by kube-up.sh
[ -f "$k/names" ] && . "$k/names"
cgroot=${cgroot#/}

stop() { # stop NAME: TERM, then KILL after 10 s
	local p=$k/$1.pid pid
	[ -f "$p" ] || return 0
	pid=$(cat "$p")
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid"
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$pid" 2>/dev/null
	fi
	rm -f "$p"
}
# The kubelet first, so nothing starts pods again; then the control plane.
stop kubelet
for c in kube-scheduler kube-controller-manager kube-apiserver etcd; do stop "$c"; done
# The kernel tunables the kubelet set, as they were before it.
if [ -f "$k/sysctls" ]; then
	while read -r t v; do echo "$v" >"/proc/sys/$t" 2>/dev/null; done <"$k/sysctls"
fi

# The pods the kubelet ran, through the CRI: containerd tears their
# networks down and removes their containers.
sock=$dir/containerd.sock
if [ -S "$sock" ] && [ -x "$bin/crictl" ]; then
	crictl=("$bin/crictl" --runtime-endpoint "unix://$sock" --image-endpoint "unix://$sock" --timeout 60s)
	for p in $("${crictl[@]}" pods -q 2>/dev/null); do
		"${crictl[@]}" stopp "$p" >/dev/null 2>&1
		"${crictl[@]}" rmp -f "$p" >/dev/null 2>&1
	done
fi

# The kubelet's volume mounts (tmpfs for projected tokens), deepest first.
mounts_under() { awk -v d="$k/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo; }
mounts_under | sort -r | while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done

# What is still in the pod cgroups (the CRI could not remove it: a
# containerd that is gone) is killed, so that the cgroups can go.
procs() { cat ${cgroot:+/sys/fs/cgroup/*/"$cgroot"/**/cgroup.procs /sys/fs/cgroup/"$cgroot"/**/cgroup.procs} 2>/dev/null | sort -u; }
shopt -s globstar nullglob
for _ in 1 2 3 4 5; do
	p=$(procs)
	[ -n "$p" ] || break
	kill -KILL $p 2>/dev/null
	sleep 0.5
done

# Pod cgroups, leaves first; a cgroup with a process left in it stays and is named.
left=
for c in ${cgroot:+/sys/fs/cgroup/*/"$cgroot" /sys/fs/cgroup/"$cgroot"}; do
	[ -d "$c" ] || continue
	while read -r d; do rmdir "$d" 2>/dev/null || left+=" $d"; done < <(find "$c" -depth -type d)
done

rm -f "$dir/cni/net.d/10-rekindle-kube.conflist"
[ -z "$bridge" ] || ip link del "$bridge" 2>/dev/null
for l in /var/log/containers/*.log; do
	[ -L "$l" ] || continue
	case $(readlink "$l") in "$k"/*) rm -f "$l" ;; esac
done
[ -z "$(mounts_under)" ] || die "mounts still under $k: $(mounts_under | tr '\n' ' ')"
[ -z "$left" ] || die "cgroups still in use:$left"
rm -rf "$k"
exit 0
