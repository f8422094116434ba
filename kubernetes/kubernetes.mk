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
