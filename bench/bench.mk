# The results page: docs/benchmarks.md's table of the newest run of each
# engine and size, and its chart docs/results.svg, rendered by
# bench/bench-report.py from bench/results.json. Included by the top
# Makefile (run make from the repo root).
#
#   make bench-page        write both again after editing bench/results.json
#   make test-bench-page   the renderer's unit tests, and both up to date

.PHONY: bench-page test-bench-page

bench-page: ## write docs/benchmarks.md's results table and docs/results.svg from bench/results.json
	python3 bench/bench-report.py --runs bench/results.json --page docs/benchmarks.md --svg docs/results.svg

test-bench-page: ## the results page's renderer, and the page and chart up to date with bench/results.json
	cd bench && python3 -B -m unittest test_results_page
	python3 -B bench/bench-report.py --runs bench/results.json --page docs/benchmarks.md --svg docs/results.svg --check

UNIT_TESTS += test-bench-page
