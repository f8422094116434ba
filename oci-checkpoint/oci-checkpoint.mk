# oci-checkpoint and the rekindle-wake helper. Included by the top Makefile.
# rekindle-wake is static (no cgo): it is copied into engine containers of
# any distribution. oci-checkpoint check decides with the restore engine's
# policy code (restore/checkpointimage), so its sources are oci-checkpoint's
# too.

OCI_CHECKPOINT_SRC := $(shell find oci-checkpoint -name '*.go' -not -path '*/cuda-checkpoint/*') \
	oci-checkpoint/go.mod oci-checkpoint/go.sum $(shell find contract -type f) \
	$(shell find restore -name '*.go' -not -name '*_test.go') restore/go.mod

$(BIN)/oci-checkpoint: $(OCI_CHECKPOINT_SRC) | $(BUILDDIR)/.deps
	cd oci-checkpoint && $(GOBUILD) -ldflags "-X main.version=$(shell git describe --always --dirty 2>/dev/null || echo dev)" \
		-o $(ABSBIN)/oci-checkpoint ./cmd/oci-checkpoint

$(BIN)/rekindle-wake: $(OCI_CHECKPOINT_SRC) | $(BUILDDIR)/.deps
	cd oci-checkpoint && CGO_ENABLED=0 $(GOBUILD) -ldflags "-s -w" -o $(ABSBIN)/rekindle-wake ./cmd/rekindle-wake

# The weight-set service and its OCI hook (docs/weights.md); static, as
# runc runs the hook with an empty environment.
$(BIN)/rekindle-weights: $(OCI_CHECKPOINT_SRC) | $(BUILDDIR)/.deps
	cd oci-checkpoint && CGO_ENABLED=0 $(GOBUILD) -ldflags "-X main.version=$(shell git describe --always --dirty 2>/dev/null || echo dev)" \
		-o $(ABSBIN)/rekindle-weights ./cmd/rekindle-weights

test-oci-checkpoint: ## unit tests of oci-checkpoint and of the contract module it shares with containerd's restore (go test)
	cd contract && $(GO) vet ./... && $(GO) test ./...
	cd oci-checkpoint && GOFLAGS=-mod=mod $(GO) test ./...

BUILD_EXTRA += $(BIN)/oci-checkpoint $(BIN)/rekindle-wake $(BIN)/rekindle-weights
UNIT_TESTS += test-oci-checkpoint

bench-zstd: ## benchmark: a zstd checkpoint layer, one stream against frames on every core (REKINDLE_BENCH_PAGES=FILE: a real pages image)
	cd oci-checkpoint && GOFLAGS=-mod=mod $(GO) test -run '^$$' -bench ZstdLayer -benchtime 3x ./pkg/checkpoint/
