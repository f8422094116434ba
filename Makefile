# Rekindle: build the patched stack from pinned sources, run the demo and the tests.
# Every version and checksum lives in versions.mk.

include versions.mk

PREFIX    ?= /usr/local
DESTDIR   ?=
# Where make install puts systemd/'s units (empty: not at all; the playbook
# installs them itself, rewritten for its root). The units name the stack
# under /usr/local; install rewrites that to PREFIX.
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
BUILDDIR  ?= build
BIN       := $(BUILDDIR)/bin
SRC       := $(BUILDDIR)/src
PINS      := $(BUILDDIR)/pins
ABSBIN    := $(abspath $(BIN))
GO        ?= go
# Any Go >= 1.21 builds with exactly this toolchain, fetched through the
# module proxy when it differs; scripts/ensure-go.sh installs one if needed.
export GOTOOLCHAIN := go$(GO_VERSION)
export PATH := $(PATH):/usr/lib/go-1.23/bin
GOBUILD   := GOFLAGS=-mod=mod $(GO) build -trimpath
CONTAINERD_BUILDTAGS ?= urfave_cli_no_docs no_btrfs
RUNC_BUILDTAGS       ?= seccomp
CNI_PLUGINS          := bridge loopback host-local portmap firewall tuning

STACK := $(BIN)/containerd $(BIN)/runc $(BIN)/criu $(BIN)/nerdctl $(BIN)/nvidia-ctk $(BIN)/nvidia-cdi-hook \
	$(BIN)/checkpointctl $(BIN)/crictl $(BIN)/cni/bridge $(BIN)/mkfs.erofs

.PHONY: help deps build stack install provision test test-cuda-checkpoint test-patches test-restore test-guard test-criu fuzz chaos demo bench bench-load bench-criu clean distclean FORCE

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z][a-z-]*:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

deps: $(BUILDDIR)/.deps ## install the Debian packages the build and tests need (root)
$(BUILDDIR)/.deps: scripts/deps.sh scripts/ensure-go.sh
	@mkdir -p $(@D)
	scripts/deps.sh
	scripts/ensure-go.sh $(GO_VERSION)
	@touch $@

# A pin file changes only when its component's pin does, so editing one
# version in versions.mk rebuilds that component alone.
$(PINS)/%: FORCE
	@mkdir -p $(@D)
	@echo '$(PIN_$*)' | cmp -s - $@ || echo '$(PIN_$*)' > $@
PIN_containerd    = $(CONTAINERD_VERSION) $(CONTAINERD_SUM) $(CONTAINERD_BUILDTAGS)
PIN_runc          = $(RUNC_VERSION) $(RUNC_SUM) $(RUNC_BUILDTAGS)
PIN_criu          = $(CRIU_DEB_VERSION) $(CRIU_SHA256) $(PREFIX)
PIN_nerdctl       = $(NERDCTL_VERSION) $(NERDCTL_SUM)
PIN_nvctk         = $(NVCTK_VERSION) $(NVCTK_SUM)
PIN_checkpointctl = $(CHECKPOINTCTL_VERSION) $(CHECKPOINTCTL_SUM) $(CHECKPOINTCTL_GOCRIU)
PIN_critools      = $(CRITOOLS_VERSION) $(CRITOOLS_SUM)
PIN_cni           = $(CNI_VERSION) $(CNI_SUM) $(CNI_PLUGINS)
PIN_erofs         = $(EROFS_UTILS_DEB_VERSION) $(EROFS_UTILS_SHA256)

# Fragments add their outputs to BUILD_EXTRA and their unit-test targets to UNIT_TESTS.
BUILD_EXTRA :=
UNIT_TESTS :=
-include images/images.mk
-include integrations/integrations.mk

CUDA_CHECKPOINT_SRC := $(wildcard oci-checkpoint/cuda-checkpoint/*.[ch]) oci-checkpoint/cuda-checkpoint/Makefile
$(BIN)/cuda-checkpoint: $(CUDA_CHECKPOINT_SRC)
	$(MAKE) -C oci-checkpoint/cuda-checkpoint
	$(MAKE) -C oci-checkpoint/cuda-checkpoint install DESTDIR= PREFIX=$(abspath $(BUILDDIR))
test-cuda-checkpoint:
	$(MAKE) -C oci-checkpoint/cuda-checkpoint test
BUILD_EXTRA += $(BIN)/cuda-checkpoint
UNIT_TESTS += test-cuda-checkpoint
-include oci-checkpoint/oci-checkpoint.mk
-include docs/diagram/diagram.mk
-include bench/bench.mk
-include kubernetes/kubernetes.mk
-include fleet/fleet.mk

build: stack $(BUILD_EXTRA) ## build the whole stack, our tools and the images into build/
stack: $(STACK)

# series DIR: the patch files DIR/series lists.
series = $(addprefix $(1)/,$(shell sed -e 's/\#.*//' $(1)/series 2>/dev/null))
# The series hooks Rekindle's restore engine (restore/, its own module) into
# containerd; both import Rekindle's contract module (contract/, which
# oci-checkpoint imports too): the patched tree is told where they are.
CONTRACT_SRC := $(shell find contract -type f)
RESTORE_SRC := $(shell find restore -type f)
$(BIN)/containerd: $(PINS)/containerd scripts/apply-patches.sh $(call series,containerd-patches) $(CONTRACT_SRC) $(RESTORE_SRC) | $(BUILDDIR)/.deps
	scripts/fetch-module.sh $(CONTAINERD_MODULE) $(CONTAINERD_VERSION) $(CONTAINERD_SUM) $(SRC)/containerd
	scripts/apply-patches.sh containerd-patches $(SRC)/containerd $(CONTAINERD_MODULE)
	cd $(SRC)/containerd && $(GO) mod edit -replace=rekindle.local/contract=$(abspath contract) \
		-replace=rekindle.local/restore=$(abspath restore)
	cd $(SRC)/containerd && $(GOBUILD) -tags "$(CONTAINERD_BUILDTAGS)" \
		-ldflags "-X github.com/containerd/containerd/v2/version.Version=$(CONTAINERD_VERSION:v%=%)+rekindle" \
		-o $(ABSBIN)/ ./cmd/containerd ./cmd/ctr ./cmd/containerd-shim-runc-v2
	@touch $@

# The series hooks Rekindle's image guard (guard/, its own module) into runc.
GUARD_SRC := $(shell find guard -type f)
$(BIN)/runc: $(PINS)/runc scripts/apply-patches.sh $(call series,runc-patches) $(GUARD_SRC) | $(BUILDDIR)/.deps
	scripts/fetch-module.sh $(RUNC_MODULE) $(RUNC_VERSION) $(RUNC_SUM) $(SRC)/runc
	scripts/apply-patches.sh runc-patches $(SRC)/runc $(RUNC_MODULE)
	cd $(SRC)/runc && $(GO) mod edit -replace=rekindle.local/guard=$(abspath guard)
	cd $(SRC)/runc && CGO_ENABLED=1 $(GOBUILD) -tags "$(RUNC_BUILDTAGS)" \
		-ldflags "-X main.version=$(RUNC_VERSION:v%=%)+rekindle" -o $(ABSBIN)/runc .

# The patch series' own unit tests, run in the patched trees: each series
# lists its packages and test names in its tests file (scripts/test-patches.sh).
test-patches: $(BIN)/containerd $(BIN)/runc $(BIN)/nerdctl $(BIN)/mkfs.erofs
	scripts/test-patches.sh containerd-patches/tests $(SRC)/containerd $(ABSBIN) $(GO)
	scripts/test-patches.sh runc-patches/tests $(SRC)/runc $(ABSBIN) $(GO) -tags "$(RUNC_BUILDTAGS)"
	scripts/test-patches.sh nerdctl-patches/tests $(SRC)/nerdctl $(ABSBIN) $(GO)
UNIT_TESTS += test-patches

# The restore engine's own tests in a plain checkout, against the pinned
# containerd release (tests that need the series' applier skip, naming why;
# make test-patches runs them all in the patched tree).
test-restore: $(BIN)/mkfs.erofs ## vet and unit-test the restore engine (restore/) against the pinned containerd release
	@grep -q '^	github.com/containerd/containerd/v2 $(CONTAINERD_VERSION)$$' restore/go.mod || \
		{ echo "restore/go.mod requires another containerd than versions.mk's $(CONTAINERD_VERSION): change it there too" >&2; exit 1; }
	cd restore && GOFLAGS=-mod=mod $(GO) vet ./... && GOFLAGS=-mod=mod $(GO) test ./checkpointimage/bounds/ ./cri/ ./coldstart/ ./devshm/ ./zstdframes/ && \
		GOFLAGS=-mod=mod $(GO) test ./shim/ -test.root && \
		PATH=$(ABSBIN):$$PATH GOFLAGS=-mod=mod $(GO) test ./inplace/ && \
		PATH=$(ABSBIN):$$PATH GOFLAGS=-mod=mod $(GO) test ./checkpointimage/ -test.root
UNIT_TESTS += test-restore

# The image guard's own tests in a plain checkout, against the pinned runc
# release: the checks of CRIU's images, the restore jail, the RPC peer.
test-guard: ## vet and unit-test the image guard (guard/) that the runc series calls
	@grep -q '^	github.com/opencontainers/runc $(RUNC_VERSION)$$' guard/go.mod || \
		{ echo "guard/go.mod requires another runc than versions.mk's $(RUNC_VERSION): change it there too" >&2; exit 1; }
	cd guard && GOFLAGS=-mod=mod $(GO) vet ./... && GOFLAGS=-mod=mod $(GO) test -count=1 ./...
UNIT_TESTS += test-guard

# CRIU's own zdtm memory tests, run against the patched tree.
test-criu: $(BIN)/criu
	scripts/test-criu-zdtm.sh $(SRC)/criu
UNIT_TESTS += test-criu

$(BIN)/criu: $(PINS)/criu scripts/build-criu.sh scripts/apply-patches.sh $(call series,criu-patches) | $(BUILDDIR)/.deps
	PREFIX=$(PREFIX) scripts/build-criu.sh $(CRIU_VERSION) $(CRIU_DEB_VERSION) $(CRIU_SHA256) $(SRC)/criu $(BUILDDIR)
	@touch $@

# The module zip lacks nerdctl's nested test module mod/tigron; only test
# helpers import it, so drop them and the requirement.
$(BIN)/nerdctl: $(PINS)/nerdctl scripts/apply-patches.sh $(call series,nerdctl-patches) | $(BUILDDIR)/.deps
	scripts/fetch-module.sh $(NERDCTL_MODULE) $(NERDCTL_VERSION) $(NERDCTL_SUM) $(SRC)/nerdctl
	scripts/apply-patches.sh nerdctl-patches $(SRC)/nerdctl $(NERDCTL_MODULE)
	cd $(SRC)/nerdctl && rm -f cmd/nerdctl/helpers/testing_linux.go && \
		$(GO) mod edit -dropreplace=github.com/containerd/nerdctl/mod/tigron \
			-droprequire=github.com/containerd/nerdctl/mod/tigron && \
		$(GOBUILD) -ldflags "-X github.com/containerd/nerdctl/v2/pkg/version.Version=$(NERDCTL_VERSION:v%=%)" \
			-o $(ABSBIN)/nerdctl ./cmd/nerdctl

# nvidia-cdi-hook is what the CDI specs nvidia-ctk writes run as hooks.
$(BIN)/nvidia-ctk $(BIN)/nvidia-cdi-hook &: $(PINS)/nvctk | $(BUILDDIR)/.deps
	scripts/fetch-module.sh $(NVCTK_MODULE) $(NVCTK_VERSION) $(NVCTK_SUM) $(SRC)/nvidia-container-toolkit
	cd $(SRC)/nvidia-container-toolkit && $(GOBUILD) -o $(ABSBIN)/nvidia-ctk ./cmd/nvidia-ctk && \
		$(GOBUILD) -o $(ABSBIN)/nvidia-cdi-hook ./cmd/nvidia-cdi-hook

$(BIN)/checkpointctl: $(PINS)/checkpointctl | $(BUILDDIR)/.deps
	scripts/fetch-module.sh $(CHECKPOINTCTL_MODULE) $(CHECKPOINTCTL_VERSION) $(CHECKPOINTCTL_SUM) $(SRC)/checkpointctl
	cd $(SRC)/checkpointctl && $(GO) mod edit -require=$(CHECKPOINTCTL_GOCRIU) && \
		$(GOBUILD) -o $(ABSBIN)/checkpointctl . && \
		$(GOBUILD) -o $(ABSBIN)/crit github.com/checkpoint-restore/go-criu/v8/crit/cmd

$(BIN)/crictl: $(PINS)/critools | $(BUILDDIR)/.deps
	GONOSUMDB=$(CRITOOLS_MODULE) scripts/fetch-module.sh $(CRITOOLS_MODULE) $(CRITOOLS_VERSION) $(CRITOOLS_SUM) $(SRC)/cri-tools
	cd $(SRC)/cri-tools && $(GOBUILD) -o $(ABSBIN)/crictl ./cmd/crictl

$(BIN)/cni/bridge: $(PINS)/cni | $(BUILDDIR)/.deps
	scripts/fetch-module.sh $(CNI_MODULE) $(CNI_VERSION) $(CNI_SUM) $(SRC)/cni-plugins
	cd $(SRC)/cni-plugins && for p in $(CNI_PLUGINS); do \
		dir=$$(ls -d plugins/*/$$p) && $(GOBUILD) -o $(ABSBIN)/cni/$$p ./$$dir || exit 1; done
	@touch $@

# The units in systemd/ and what each one runs from PREFIX/bin besides the
# built stack: scripts installed under another name (systemd/rekindle-cache-gc.sh,
# beside its unit, as rekindle-cache-gc).
UNITS := $(wildcard systemd/*.service systemd/*.timer systemd/*.service.d/*.conf)

# build/bin/kube, the kubelet tests' cluster, is not installed: the playbook's
# kubelet role installs a node's kubelet. Of build/bin/kraken (make kraken), the
# fleet's image distribution, the agent and the herd's programs are, as
# kraken-agent, kraken-tracker, kraken-origin and kraken-build-index, where
# they are built (the kraken and kraken_herd roles need them).
install: ## copy the built stack, the units and what they run under $(DESTDIR)$(PREFIX) (run 'make build' first)
	@for f in $(STACK) $(filter $(BIN)/%,$(BUILD_EXTRA)); do [ -e $$f ] || { echo "rekindle: error: $$f is not built: run 'make build' first" >&2; exit 1; }; done
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/criu $(DESTDIR)$(PREFIX)/libexec/cni
	install -m 0755 $(filter-out $(BIN)/cni $(KUBE_BIN) $(KRAKEN_BIN),$(wildcard $(BIN)/*)) $(DESTDIR)$(PREFIX)/bin/
	install -m 0755 $(BIN)/cni/* $(DESTDIR)$(PREFIX)/libexec/cni/
	install -m 0644 $(BUILDDIR)/lib/criu/cuda_plugin.so $(DESTDIR)$(PREFIX)/lib/criu/
	install -m 0755 systemd/rekindle-cache-gc.sh $(DESTDIR)$(PREFIX)/bin/rekindle-cache-gc
	@for k in agent tracker origin build-index; do [ ! -e $(KRAKEN_BIN)/$$k ] || { \
		echo "install $(KRAKEN_BIN)/$$k -> $(DESTDIR)$(PREFIX)/bin/kraken-$$k"; \
		install -m 0755 $(KRAKEN_BIN)/$$k $(DESTDIR)$(PREFIX)/bin/kraken-$$k || exit 1; }; done
ifneq ($(SYSTEMDUNITDIR),)
	@for u in $(UNITS:systemd/%=%); do \
		echo "install $$u -> $(DESTDIR)$(SYSTEMDUNITDIR)/$$u"; \
		install -d "$(DESTDIR)$(SYSTEMDUNITDIR)/$$(dirname $$u)" && \
		sed 's|/usr/local/|$(PREFIX)/|g' "systemd/$$u" >"$(DESTDIR)$(SYSTEMDUNITDIR)/$$u.tmp" && \
		chmod 0644 "$(DESTDIR)$(SYSTEMDUNITDIR)/$$u.tmp" && \
		mv "$(DESTDIR)$(SYSTEMDUNITDIR)/$$u.tmp" "$(DESTDIR)$(SYSTEMDUNITDIR)/$$u" || exit 1; \
	done
endif

provision: build ## provision this host with ansible/ (root; CPU-only unless ANSIBLE_ARGS says otherwise)
	cd ansible && ansible-playbook site.yml $(ANSIBLE_ARGS)

# The test harness writes containerd's drop-in from the role's template
# (scripts/containerd-config.sh); this holds the template and the key list
# the role checks existing configurations against to the same keys. The
# kubelet role's templates are parsed as a kubelet reads them, and its input
# checks run through ansible-playbook (no cluster).
test-ansible: ## the containerd role's drop-in against its key list, the kubelet, kraken and kraken_herd roles' templates and checks (plain python3)
	cd ansible/roles/containerd && python3 -B -m unittest test_dropin
	cd ansible/roles/kubelet && python3 -B -m unittest test_kubelet
	cd ansible/roles/kraken && python3 -B -m unittest test_kraken
	cd ansible/roles/kraken_herd && python3 -B -m unittest test_kraken_herd
UNIT_TESTS += test-ansible

test: build kubernetes kraken ## build, then run every test (CPU; GPU tests skip without a GPU)
	REKINDLE_UNIT_TESTS="$(UNIT_TESTS)" tests/run.sh

# The hostile-image fuzzer (tests/fuzz/fuzz-images.py), longer than 475's
# fixed-seed run: FUZZ_CASES cases from FUZZ_SEED (empty: a random seed, which
# it prints); the failing cases' images are kept in FUZZ_KEEP for --replay.
FUZZ_CASES ?= 300
FUZZ_SEED  ?=
FUZZ_KEEP  ?= $(BUILDDIR)/fuzz-failed
fuzz: ## restore FUZZ_CASES (300) randomly mutated checkpoint images beside canaries (root; run 'make build' first)
	tests/fuzz/fuzz-images.py --runc $(BIN)/runc --crit $(BIN)/crit --cases $(FUZZ_CASES) \
		$(if $(FUZZ_SEED),--seed $(FUZZ_SEED)) --keep $(FUZZ_KEEP)

# The fault matrix (tests/chaos/chaos.sh, outside tests/bats so make test
# skips it): a restore's CRIU, runc, shim, containerd or client SIGKILLed at
# each phase, and oci-checkpoint create at each of its phases; one line per
# case. CHAOS_CASES=N (CHAOS_SEED) runs N random restore cases instead,
# CHAOS_GC=1 prunes the cache in a loop beside them; chaos.sh lists the rest.
chaos: ## SIGKILL each part of a restore and create at each phase, check leftovers and the next restore (root; run 'make build' first)
	tests/chaos/chaos.sh

demo: build ## checkpoint a running engine and restore it with nerdctl run, printing phase times
	scripts/demo.sh

bench: build ## benchmarks: restore phase times, first vs cached; then the load figures (bench-load)
	bench/bench.sh
	bench/bench-load.sh

# Its own target too: a private containerd and result of its own, so the load
# figures can be taken again without bench.sh's repetitions.
bench-load: build ## benchmark: N = 1, 4, 8, 16 restores at once of one image, new entry and cached (BENCH_LOAD_N)
	bench/bench-load.sh

# mkfs.erofs: containerd indexes a checkpoint layer with it, so the restore
# reads the layer in place (containerd-patches/diff-apply-keep-a-layer-that-asks-for-it-as-an-EROFS).
$(BIN)/mkfs.erofs: $(PINS)/erofs scripts/build-erofs-utils.sh | $(BUILDDIR)/.deps
	scripts/build-erofs-utils.sh $(EROFS_UTILS_VERSION) $(EROFS_UTILS_DEB_VERSION) $(EROFS_UTILS_SHA256) $(SRC)/erofs-utils $(BUILDDIR)

# Stock CRIU, the same pinned release without criu-patches/, for bench-criu.
$(BUILDDIR)/stock/bin/criu: $(PINS)/criu scripts/build-criu.sh | $(BUILDDIR)/.deps
	STOCK=1 PREFIX=$(PREFIX) scripts/build-criu.sh $(CRIU_VERSION) $(CRIU_DEB_VERSION) $(CRIU_SHA256) $(SRC)/criu-stock $(BUILDDIR)/stock
	@touch $@

bench-criu: $(BIN)/criu $(BUILDDIR)/stock/bin/criu ## benchmark: CRIU restore of a synthetic process, stock vs criu-patches/
	BENCH_CRIU_STOCK=$(BUILDDIR)/stock/bin/criu bench/bench-criu.sh

clean: ## remove built binaries (keeps fetched sources and downloads)
	rm -rf $(BIN) $(PINS) $(BUILDDIR)/lib

distclean: ## remove everything under build/
	rm -rf $(BUILDDIR)

FORCE:
