#!/usr/bin/env bash
# build.sh SRC OUT: build etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet and kubectl at the versions.mk pins into OUT.
#
# k8s.io/kubernetes points its staging modules (k8s.io/api, client-go, ...)
# at ./staging, which its module zip leaves out, so it is built from a small
# module of our own in SRC that requires it and takes the published staging
# modules instead. go.sum is written through the checksum database, and the
# two pinned modules must hash as versions.mk says.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../scripts/lib.sh"
[ $# -eq 2 ] || die "usage: $0 SRC OUT"
src=$(realpath -m "$1") out=$(realpath -m "$2")
: "${KUBERNETES_MODULE:?} ${KUBERNETES_VERSION:?} ${KUBERNETES_SUM:?} ${KUBERNETES_STAGING:?}"
: "${ETCD_MODULE:?} ${ETCD_VERSION:?} ${ETCD_SUM:?}"
need_tool go jq
export GOFLAGS=-mod=mod CGO_ENABLED=0

# The staging modules k8s.io/kubernetes replaces, read from its own go.mod.
json=$(cd / && go mod download -json "$KUBERNETES_MODULE@$KUBERNETES_VERSION") ||
	die "cannot download $KUBERNETES_MODULE@$KUBERNETES_VERSION: $(jq -r .Error <<<"$json" 2>/dev/null)"
staging=$(awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$(jq -r .GoMod <<<"$json")")
[ -n "$staging" ] || die "no staging modules in $KUBERNETES_MODULE@$KUBERNETES_VERSION's go.mod"

rm -rf "$src" && mkdir -p "$src"
cd "$src"
go mod init rekindle.local/kubernetes-build >/dev/null 2>&1
go mod edit -require="$KUBERNETES_MODULE@$KUBERNETES_VERSION" -require="$ETCD_MODULE@$ETCD_VERSION"
for m in $staging; do go mod edit -replace="$m=$m@$KUBERNETES_STAGING"; done
cat >tools.go <<GO
//go:build tools

// Package tools names the commands build.sh builds, so go mod tidy keeps
// what they import.
package tools

import (
	_ "$ETCD_MODULE"
	_ "$KUBERNETES_MODULE/cmd/kube-apiserver"
	_ "$KUBERNETES_MODULE/cmd/kube-controller-manager"
	_ "$KUBERNETES_MODULE/cmd/kube-scheduler"
	_ "$KUBERNETES_MODULE/cmd/kubectl"
	_ "$KUBERNETES_MODULE/cmd/kubelet"
)
GO
note "resolving the modules of $KUBERNETES_MODULE $KUBERNETES_VERSION and etcd $ETCD_VERSION"
go mod tidy
for pin in "$KUBERNETES_MODULE $KUBERNETES_VERSION $KUBERNETES_SUM" "$ETCD_MODULE $ETCD_VERSION $ETCD_SUM"; do
	set -- $pin
	got=$(awk -v m="$1" -v v="$2" '$1 == m && $2 == v {print $3}' go.sum)
	[ "$got" = "$3" ] || die "checksum mismatch for $1@$2: pinned $3, go.sum has ${got:-nothing} (versions.mk)"
done

# What kubectl version and the node's status report.
minor=$(cut -d. -f2 <<<"$KUBERNETES_VERSION")
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $p.gitVersion=$KUBERNETES_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done
mkdir -p "$out.tmp"
note "building etcd and Kubernetes (several minutes on two cores)"
go build -trimpath -o "$out.tmp/etcd" "$ETCD_MODULE"
go build -trimpath -ldflags "$ldflags" -o "$out.tmp/" \
	"$KUBERNETES_MODULE/cmd/kube-apiserver" "$KUBERNETES_MODULE/cmd/kube-controller-manager" \
	"$KUBERNETES_MODULE/cmd/kube-scheduler" "$KUBERNETES_MODULE/cmd/kubectl" "$KUBERNETES_MODULE/cmd/kubelet"
rm -rf "$out" && mv "$out.tmp" "$out"
note "built $(ls "$out" | tr '\n' ' ')into $out"
