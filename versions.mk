# Every pinned version and checksum of the stack, in one place.
# Go modules: the h1: hash is what go.sum records and sum.golang.org serves;
# scripts/fetch-module.sh refuses a download whose hash differs.
# Debian sources: the SHA-256 from the package's .dsc.

GO_VERSION          := 1.26.8

CONTAINERD_MODULE   := github.com/containerd/containerd/v2
CONTAINERD_VERSION  := v2.3.7
CONTAINERD_SUM      := h1:7PGbgAVKE4ieQjFPv7+kwAv7f9dCtRpExZwjExHD/Fk=

RUNC_MODULE         := github.com/opencontainers/runc
RUNC_VERSION        := v1.5.2
RUNC_SUM            := h1:eUUowc2WJCnFYzI87C1WqRcu356Dk/wsoi90y+2wEfE=

NERDCTL_MODULE      := github.com/containerd/nerdctl/v2
NERDCTL_VERSION     := v2.2.1
NERDCTL_SUM         := h1:eXBu4HddMEXtLmZsJncfvOiJ6a8DemOzWhOxypNIEG0=

NVCTK_MODULE        := github.com/NVIDIA/nvidia-container-toolkit
NVCTK_VERSION       := v1.19.0
NVCTK_SUM           := h1:iuttW93jclh0+y3RdBw8DR7v6Gfv6h+HjjY87cTyn9M=

CNI_MODULE          := github.com/containernetworking/plugins
CNI_VERSION         := v1.8.0
CNI_SUM             := h1:WjGbV/0UQyo8A4qBsAh6GaDAtu1hevxVxsEuqtBqUFk=

CHECKPOINTCTL_MODULE  := github.com/checkpoint-restore/checkpointctl
CHECKPOINTCTL_VERSION := v1.5.0
CHECKPOINTCTL_SUM     := h1:Uu+D2cOf/GUyCMk23Y8L69P6YoATTe6pH+Au64O3y28=
# The go-criu it asks for (v8.1.0) is not served by the module proxy; runc's is.
CHECKPOINTCTL_GOCRIU  := github.com/checkpoint-restore/go-criu/v8@v8.3.0

CRIU_VERSION        := 4.2.1
CRIU_DEB_VERSION    := 4.2.1-1
CRIU_SHA256         := 29ec0ee09e296479fe7048c80980e8ef1d0684d0b0204c2b101dfea19f6725b9

# mkfs.erofs for reading a checkpoint layer in place (--tar=i needs 1.7 or
# later; Debian 12 ships 1.5), built from Debian trixie's source.
EROFS_UTILS_VERSION     := 1.8.6
EROFS_UTILS_DEB_VERSION := 1.8.6-1
EROFS_UTILS_SHA256      := 5b221dc3fd6d151425b30534ede46fb7a90dc233a8659cba0372796b0a066547

# Debian release the offline base image is bootstrapped from.
BASE_SUITE          := bookworm

# cri-tools (crictl) for the CRI path tests. sum.golang.org has no record of
# this version (404), so the Makefile skips the sumdb for it; the pin below
# is then the only check and fetch-module.sh enforces it.
CRITOOLS_MODULE     := sigs.k8s.io/cri-tools
CRITOOLS_VERSION    := v1.34.0
CRITOOLS_SUM        := h1:KqL9EJ+WgHtz1HR1exezm91n+o8O2uMLs/eHzHJHAWw=

# A single-node Kubernetes for the kubelet tests (tests/bats/340-kubernetes.bats),
# built by kubernetes/kubernetes.mk. k8s.io/kubernetes's module zip leaves
# out its staging modules, which are published on their own at
# KUBERNETES_STAGING (v0.N.M for v1.N.M); etcd is the API server's store.
KUBERNETES_MODULE   := k8s.io/kubernetes
KUBERNETES_VERSION  := v1.36.3
KUBERNETES_SUM      := h1:qDQdoMiluAE2Eab6Fa52YV+WjiGz9mZFFoagEA6cI+o=
KUBERNETES_STAGING  := v0.36.3
ETCD_MODULE         := go.etcd.io/etcd/server/v3
ETCD_VERSION        := v3.6.16
ETCD_SUM            := h1:sLkpvz3RFtiNd/yPrZBKz5kT+XO1ZJkhmuUJeqc7OmA=

# Kraken, the peer-to-peer image distribution of a fleet of nodes (fleet/,
# docs/fleet.md), patched with kraken-patches/ and built by fleet/fleet.mk.
# Its components front their servers with nginx and keep the tracker's peer
# sets in Redis (Debian's nginx and redis-server, scripts/deps.sh).
KRAKEN_MODULE       := github.com/uber/kraken
KRAKEN_VERSION      := v0.1.4
KRAKEN_SUM          := h1:8ThZp5WU9vpJ/ZpKBK86xgtqs2zUmDB67v8pCf35wEY=

# NVIDIA's device plugin gives the GPU kubelet test's pods their GPU through
# CDI (tests/bats/540-kubernetes-gpu.bats; make device-plugin). v0.18.0 is
# the oldest the Go proxy serves here (v0.17.x is refused).
NVIDIA_DEVICE_PLUGIN_MODULE  := github.com/NVIDIA/k8s-device-plugin
NVIDIA_DEVICE_PLUGIN_VERSION := v0.18.0
NVIDIA_DEVICE_PLUGIN_SUM     := h1:zTAcR+pU90bEFwLD6WVFn2F77h8bDzqpIuqn+O2Sl/s=
