# The single-node Kubernetes the kubelet tests run on (kube-up.sh), built
# from the pins in versions.mk. Included by the top Makefile; `make test`
# builds it, `make build` (the demo, an install) does not.

KUBE_BIN := $(BIN)/kube
PIN_kubernetes = $(KUBERNETES_VERSION) $(KUBERNETES_SUM) $(KUBERNETES_STAGING) $(ETCD_VERSION) $(ETCD_SUM)

$(KUBE_BIN)/kubelet: $(PINS)/kubernetes kubernetes/build.sh | $(BUILDDIR)/.deps
	KUBERNETES_MODULE=$(KUBERNETES_MODULE) KUBERNETES_VERSION=$(KUBERNETES_VERSION) \
	KUBERNETES_SUM=$(KUBERNETES_SUM) KUBERNETES_STAGING=$(KUBERNETES_STAGING) \
	ETCD_MODULE=$(ETCD_MODULE) ETCD_VERSION=$(ETCD_VERSION) ETCD_SUM=$(ETCD_SUM) \
		kubernetes/build.sh $(SRC)/kubernetes $(KUBE_BIN)

.PHONY: kubernetes
kubernetes: $(KUBE_BIN)/kubelet ## build etcd, the API server, controller manager, scheduler, kubelet and kubectl (the kubelet tests' cluster)

# NVIDIA's device plugin, for the GPU kubelet test (540) only: it advertises
# nvidia.com/gpu and hands the kubelet CDI device names (--device-list-strategy
# cdi-cri). cgo: go-nvml resolves libnvidia-ml's symbols when the plugin
# loads it, hence the linker flags of the plugin's own Makefile.
PIN_device-plugin = $(NVIDIA_DEVICE_PLUGIN_VERSION) $(NVIDIA_DEVICE_PLUGIN_SUM)

$(KUBE_BIN)/nvidia-device-plugin: $(PINS)/device-plugin | $(BUILDDIR)/.deps
	scripts/fetch-module.sh $(NVIDIA_DEVICE_PLUGIN_MODULE) $(NVIDIA_DEVICE_PLUGIN_VERSION) \
		$(NVIDIA_DEVICE_PLUGIN_SUM) $(SRC)/k8s-device-plugin
	cd $(SRC)/k8s-device-plugin && CGO_ENABLED=1 $(GOBUILD) -ldflags "-s -w \
		-extldflags=-Wl,--export-dynamic,--unresolved-symbols=ignore-in-object-files \
		-X $(NVIDIA_DEVICE_PLUGIN_MODULE)/internal/info.version=$(NVIDIA_DEVICE_PLUGIN_VERSION)" \
		-o $(abspath $@) ./cmd/nvidia-device-plugin

.PHONY: device-plugin
device-plugin: $(KUBE_BIN)/nvidia-device-plugin ## build NVIDIA's k8s device plugin (GPUs for the GPU kubelet test's pods)
