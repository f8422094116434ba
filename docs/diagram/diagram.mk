# The data-path diagram in docs/architecture.md, written by
# docs/diagram/datapath.py from the tree and the patch series. Included by
# the top Makefile (run make from the repo root).
#
#   make diagram        write it into docs/architecture.md again
#   make test-diagram   check that the committed diagram is the script's output

.PHONY: diagram test-diagram

diagram: ## write the data-path diagram into docs/architecture.md (docs/diagram/datapath.py)
	python3 docs/diagram/datapath.py --write

test-diagram: ## check that docs/architecture.md's diagram is docs/diagram/datapath.py's output
	cd docs/diagram && python3 -B -m unittest test_datapath

UNIT_TESTS += test-diagram
