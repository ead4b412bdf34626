# The two commands of the README: `make demo` and `make test`.
# Each does all the set-up first (skipped in seconds when done).
.PHONY: setup demo test

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/chaoslog demo

test: setup
	.venv/bin/pytest
