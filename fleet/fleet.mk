# Many nodes restoring one checkpoint image (docs/fleet.md): Kraken, the
# peer-to-peer image distribution each node's containerd pulls through as
# its registry mirror, built from its pinned module with kraken-patches/,
# and the fleet benchmark. Included by the top Makefile.

KRAKEN_BIN := $(BIN)/kraken
KRAKEN_COMPONENTS := agent origin tracker build-index
PIN_kraken = $(KRAKEN_VERSION) $(KRAKEN_SUM)

# sqlite3 (the origin's and build-index's local database) needs cgo; its C
# compiler warnings are sqlite's own and are dropped.
# The top Makefile defines its series function after including this file.
KRAKEN_PATCHES := kraken-patches/series $(wildcard kraken-patches/*.patch)

$(KRAKEN_BIN)/agent: $(PINS)/kraken scripts/apply-patches.sh $(KRAKEN_PATCHES) | $(BUILDDIR)/.deps
	scripts/fetch-module.sh $(KRAKEN_MODULE) $(KRAKEN_VERSION) $(KRAKEN_SUM) $(SRC)/kraken
	scripts/apply-patches.sh kraken-patches $(SRC)/kraken $(KRAKEN_MODULE)
	@mkdir -p $(KRAKEN_BIN)
	cd $(SRC)/kraken && CGO_ENABLED=1 CGO_CFLAGS="-w" $(GOBUILD) -ldflags "-s -w" \
		-o $(abspath $(KRAKEN_BIN))/ $(addprefix ./,$(KRAKEN_COMPONENTS))
	@touch $@

.PHONY: kraken test-kraken-patches bench-fleet
kraken: $(KRAKEN_BIN)/agent ## build Kraken's agent, origin, tracker and build-index (the fleet's image distribution) into build/bin/kraken

test-kraken-patches: $(KRAKEN_BIN)/agent ## the unit tests of kraken-patches/ in the patched Kraken tree
	scripts/test-patches.sh kraken-patches/tests $(SRC)/kraken $(ABSBIN) $(GO)
UNIT_TESTS += test-kraken-patches

bench-fleet: build kraken ## benchmark: N nodes restore one checkpoint image at once, from one slow registry, direct, through Kraken, Kraken preheated (FLEET_N: 1 2 4 8, FLEET_RATE: 200mbit)
	fleet/bench-fleet.sh
