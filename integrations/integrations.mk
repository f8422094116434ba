# What goes into a user's own engine image to make it checkpointable: the
# SGLang and vLLM Dockerfiles (not built here: they need an image registry),
# vLLM's launcher and weight-set plugin (the vllm-engine reference image
# carries them too) and the weight set client. Included by the top Makefile
# (run make from the repo root).
#
#   make test-integrations   their unit tests (plain python3; no vLLM needed)

INTEGRATIONS_SRC := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
UNIT_TESTS += test-integrations

.PHONY: test-integrations
test-integrations: ## unit tests of the weight set client, and vLLM's and SGLang's serve.py and plugins (plain python3)
	cd $(INTEGRATIONS_SRC)/weights && python3 -B -m unittest test_rekindle_weights
	cd $(INTEGRATIONS_SRC)/vllm && python3 -B -m unittest test_serve test_rekindle_vllm test_rekindle_heap
	cd $(INTEGRATIONS_SRC)/sglang && python3 -B -m unittest test_serve test_rekindle_sglang
