# Image recipes: offline Debian base image and the CPU reference engine,
# written as OCI image archives that `ctr images import` and `nerdctl load`
# read. Included by the top Makefile (run make from the repo root).
#
#   make images        build both archives (a second run rebuilds nothing)
#   make test-images   unit tests of the CPU engine (plain python3, no containers)

IMAGES_SRC           := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
IMAGES_OUT           ?= $(or $(BUILDDIR),build)/images
BASE_SUITE           ?= bookworm
BASE_IMAGE_REF       ?= rekindle.local/base:$(BASE_SUITE)
BASE_IMAGE_TAR       := $(IMAGES_OUT)/base.tar
CPU_ENGINE_IMAGE_REF ?= rekindle.local/cpu-engine:latest
CPU_ENGINE_IMAGE_TAR := $(IMAGES_OUT)/cpu-engine.tar
# Size of the CPU engine's seeded weights file (MiB), fixed at image build.
ENGINE_WEIGHTS_MB    ?= 64

IMAGE_TARS := $(BASE_IMAGE_TAR) $(CPU_ENGINE_IMAGE_TAR)
BUILD_EXTRA += $(IMAGE_TARS)
UNIT_TESTS += test-images

.PHONY: images test-images

images: $(IMAGE_TARS) ## build the base and CPU engine image archives into build/images/

# A parameter file changes only when its values do, so a changed suite, name
# or weights size rebuilds that image and nothing else.
$(IMAGES_OUT)/.params-%: FORCE
	@mkdir -p $(@D)
	@echo '$(IMAGE_PARAMS_$*)' | cmp -s - $@ || echo '$(IMAGE_PARAMS_$*)' > $@
IMAGE_PARAMS_base       = $(BASE_SUITE) $(BASE_IMAGE_REF)
IMAGE_PARAMS_cpu-engine = $(CPU_ENGINE_IMAGE_REF) $(ENGINE_WEIGHTS_MB)

$(BASE_IMAGE_TAR): $(IMAGES_OUT)/.params-base $(IMAGES_SRC)/base/build.sh \
		$(IMAGES_SRC)/base/packages $(IMAGES_SRC)/lib.sh
	BASE_SUITE=$(BASE_SUITE) BASE_IMAGE_REF=$(BASE_IMAGE_REF) $(IMAGES_SRC)/base/build.sh $@

$(CPU_ENGINE_IMAGE_TAR): $(BASE_IMAGE_TAR) $(IMAGES_OUT)/.params-cpu-engine \
		$(IMAGES_SRC)/cpu-engine/build.sh $(IMAGES_SRC)/cpu-engine/server.py $(IMAGES_SRC)/lib.sh
	BASE_IMAGE_REF=$(BASE_IMAGE_REF) CPU_ENGINE_IMAGE_REF=$(CPU_ENGINE_IMAGE_REF) \
		ENGINE_WEIGHTS_MB=$(ENGINE_WEIGHTS_MB) $(IMAGES_SRC)/cpu-engine/build.sh $(BASE_IMAGE_TAR) $@

test-images: ## unit tests of the CPU reference engine (plain python3)
	cd $(IMAGES_SRC)/cpu-engine && python3 -m pytest -q -p no:cacheprovider test_engine.py
