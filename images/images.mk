# Image recipes: six OCI image archives in build/images/, which
# `ctr images import` and `nerdctl load` read: the offline Debian base image
# (base.tar), the CPU reference engine (cpu-engine.tar), the GPU reference
# engine (gpu-engine.tar), the same engine on transformers (hf-engine.tar),
# on the host's vLLM (vllm-engine.tar), which carries integrations/vllm's
# serve.py and plugin, and on the host's SGLang (sglang-engine.tar,
# integrations/sglang/serve.py). These are the reference engines: the demo's, the
# tests' and the benchmarks'. Included by the top Makefile (run make from the
# repo root).
#
#   make images        build the six archives (a second run rebuilds nothing)
#   make test-images   unit tests of the CPU and GPU engines (plain python3, no
#                      containers)

IMAGES_SRC           := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
IMAGES_OUT           ?= $(or $(BUILDDIR),build)/images
BASE_SUITE           ?= bookworm
BASE_IMAGE_REF       ?= rekindle.local/base:$(BASE_SUITE)
BASE_IMAGE_TAR       := $(IMAGES_OUT)/base.tar
CPU_ENGINE_IMAGE_REF ?= rekindle.local/cpu-engine:latest
CPU_ENGINE_IMAGE_TAR := $(IMAGES_OUT)/cpu-engine.tar
# Size of the CPU engine's seeded weights file (MiB), fixed at image build.
ENGINE_WEIGHTS_MB    ?= 64
# GPU reference engine: no torch inside (it runs the GPU host's), so it builds
# here; GPU_ENGINE_PARAMS_GB is only the default model size in its config.
GPU_ENGINE_IMAGE_REF ?= rekindle.local/gpu-engine:latest
GPU_ENGINE_IMAGE_TAR := $(IMAGES_OUT)/gpu-engine.tar
GPU_ENGINE_PARAMS_GB ?= 1
# The same engine with transformers' model code, torch.compile and CUDA graphs.
HF_ENGINE_IMAGE_REF  ?= rekindle.local/hf-engine:latest
HF_ENGINE_IMAGE_TAR  := $(IMAGES_OUT)/hf-engine.tar
# The same base running the host's vLLM (integrations/vllm/serve.py) on a bound model.
VLLM_ENGINE_IMAGE_REF ?= rekindle.local/vllm-engine:latest
VLLM_ENGINE_IMAGE_TAR := $(IMAGES_OUT)/vllm-engine.tar
# And running the host's SGLang (integrations/sglang/serve.py) on a bound model.
SGLANG_ENGINE_IMAGE_REF ?= rekindle.local/sglang-engine:latest
SGLANG_ENGINE_IMAGE_TAR := $(IMAGES_OUT)/sglang-engine.tar

IMAGE_TARS := $(BASE_IMAGE_TAR) $(CPU_ENGINE_IMAGE_TAR) $(GPU_ENGINE_IMAGE_TAR) $(HF_ENGINE_IMAGE_TAR) $(VLLM_ENGINE_IMAGE_TAR) \
	$(SGLANG_ENGINE_IMAGE_TAR)
BUILD_EXTRA += $(IMAGE_TARS)
UNIT_TESTS += test-images

.PHONY: images test-images

images: $(IMAGE_TARS) ## build the six image archives (base, cpu-engine, gpu-engine, hf-engine, vllm-engine, sglang-engine) into build/images/

# A parameter file changes only when its values do, so a changed suite, name
# or weights size rebuilds that image and nothing else.
$(IMAGES_OUT)/.params-%: FORCE
	@mkdir -p $(@D)
	@echo '$(IMAGE_PARAMS_$*)' | cmp -s - $@ || echo '$(IMAGE_PARAMS_$*)' > $@
IMAGE_PARAMS_base       = $(BASE_SUITE) $(BASE_IMAGE_REF)
IMAGE_PARAMS_cpu-engine = $(CPU_ENGINE_IMAGE_REF) $(ENGINE_WEIGHTS_MB)
IMAGE_PARAMS_gpu-engine = $(GPU_ENGINE_IMAGE_REF) $(GPU_ENGINE_PARAMS_GB)
IMAGE_PARAMS_hf-engine  = $(HF_ENGINE_IMAGE_REF) $(GPU_ENGINE_PARAMS_GB)
IMAGE_PARAMS_vllm-engine = $(VLLM_ENGINE_IMAGE_REF)
IMAGE_PARAMS_sglang-engine = $(SGLANG_ENGINE_IMAGE_REF)

$(BASE_IMAGE_TAR): $(IMAGES_OUT)/.params-base $(IMAGES_SRC)/base/build.sh \
		$(IMAGES_SRC)/base/packages $(IMAGES_SRC)/lib.sh
	BASE_SUITE=$(BASE_SUITE) BASE_IMAGE_REF=$(BASE_IMAGE_REF) $(IMAGES_SRC)/base/build.sh $@

$(CPU_ENGINE_IMAGE_TAR): $(BASE_IMAGE_TAR) $(IMAGES_OUT)/.params-cpu-engine \
		$(IMAGES_SRC)/cpu-engine/build.sh $(IMAGES_SRC)/cpu-engine/server.py $(IMAGES_SRC)/engine_http.py $(IMAGES_SRC)/lib.sh
	BASE_IMAGE_REF=$(BASE_IMAGE_REF) CPU_ENGINE_IMAGE_REF=$(CPU_ENGINE_IMAGE_REF) \
		ENGINE_WEIGHTS_MB=$(ENGINE_WEIGHTS_MB) $(IMAGES_SRC)/cpu-engine/build.sh $(BASE_IMAGE_TAR) $@

GPU_ENGINE_FILES := $(addprefix $(IMAGES_SRC)/gpu-engine/,build.sh server.py hf_model.py launch.sh host-python.sh cc) \
		$(IMAGES_SRC)/engine_http.py integrations/weights/rekindle_weights.py \
		integrations/weights/rekindle_model_set.py $(IMAGES_SRC)/lib.sh

$(GPU_ENGINE_IMAGE_TAR): $(IMAGES_OUT)/.params-gpu-engine $(GPU_ENGINE_FILES)
	GPU_ENGINE_IMAGE_REF=$(GPU_ENGINE_IMAGE_REF) \
		GPU_ENGINE_PARAMS_GB=$(GPU_ENGINE_PARAMS_GB) $(IMAGES_SRC)/gpu-engine/build.sh $@

$(HF_ENGINE_IMAGE_TAR): $(IMAGES_OUT)/.params-hf-engine $(GPU_ENGINE_FILES)
	GPU_ENGINE_BACKEND=transformers GPU_ENGINE_IMAGE_REF=$(HF_ENGINE_IMAGE_REF) \
		GPU_ENGINE_PARAMS_GB=$(GPU_ENGINE_PARAMS_GB) $(IMAGES_SRC)/gpu-engine/build.sh $@

$(VLLM_ENGINE_IMAGE_TAR): $(IMAGES_OUT)/.params-vllm-engine $(GPU_ENGINE_FILES) integrations/vllm/serve.py \
		integrations/vllm/rekindle_vllm.py integrations/vllm/rekindle_heap.py $(wildcard integrations/vllm/rekindle_vllm-1.0.dist-info/*)
	GPU_ENGINE_BACKEND=vllm GPU_ENGINE_IMAGE_REF=$(VLLM_ENGINE_IMAGE_REF) $(IMAGES_SRC)/gpu-engine/build.sh $@

$(SGLANG_ENGINE_IMAGE_TAR): $(IMAGES_OUT)/.params-sglang-engine $(GPU_ENGINE_FILES) integrations/sglang/serve.py \
		integrations/sglang/rekindle_sglang.py $(wildcard integrations/sglang/rekindle_sglang-1.0.dist-info/*)
	GPU_ENGINE_BACKEND=sglang GPU_ENGINE_IMAGE_REF=$(SGLANG_ENGINE_IMAGE_REF) $(IMAGES_SRC)/gpu-engine/build.sh $@

test-images: ## unit tests of the CPU and GPU reference engines (plain python3; torch and CUDA tests skip without them)
	cd $(IMAGES_SRC)/cpu-engine && python3 -m pytest -q -p no:cacheprovider test_engine.py
	cd $(IMAGES_SRC)/gpu-engine && python3 -m pytest -q -p no:cacheprovider test_engine.py
