# The two commands of the README: `make demo` and `make test`.
# Each does all the set-up first (skipped in seconds when done).
.PHONY: setup demo test test-faults test-v2 test-v2-fast

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/chaoslog demo

test: setup
	.venv/bin/pytest --durations=30 -m "not catalogue"

# One run per fault kind of the catalogue (suites/test_suite_faults.py),
# about 9 minutes: apart from `make test` to keep that under 45 minutes.
test-faults: setup
	.venv/bin/pytest suites -m catalogue

# The suites that run in both coordination modes, in V2 (docs/design.md#v2),
# the fault-kind runs among them.
test-v2: setup
	.venv/bin/pytest suites -m "any_coordination or v2_only" --chaoslog-coordination v2

# The five-minute V2 tier (issue 35): the tests marked v2_fast, in V2. CI runs
# it; the whole of `make test-v2` (about 15 minutes) runs nightly.
test-v2-fast: setup
	.venv/bin/pytest suites -m "v2_fast" --chaoslog-coordination v2
