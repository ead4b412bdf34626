# The two commands of the README: `make demo` and `make test`.
# Each does all the set-up first (skipped in seconds when done).
.PHONY: setup demo test test-faults test-v2 test-v2-fast test-secure

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/chaoslog demo

# Every tier CI runs, in two lanes side by side (scripts/lanes.py says why):
# the suites then the five-minute V2 tier, beside the unit and end-to-end
# tests then one run per fault kind. About 30 minutes on the 2-core box.
UNITS = .venv/bin/pytest tests --durations=20
SUITES = .venv/bin/pytest suites -m "not catalogue" --durations=20
FAULTS = .venv/bin/pytest suites -m catalogue --durations=10
V2_FAST = .venv/bin/pytest suites -m v2_fast --chaoslog-coordination v2 --durations=10
SECURE = .venv/bin/pytest suites -m any_security --chaoslog-security SASL_SSL --durations=10

test: setup
	.venv/bin/python scripts/lanes.py --lane '$(SUITES)' '$(V2_FAST)' '$(SECURE)' --lane '$(UNITS)' '$(FAULTS)'

# One run per fault kind of the catalogue (suites/test_suite_faults.py),
# about 9 minutes.
test-faults: setup
	$(FAULTS)

# The suites that run in both coordination modes, in V2 (docs/design.md#v2),
# the fault-kind runs among them.
test-v2: setup
	.venv/bin/pytest suites -m "any_coordination or v2_only" --chaoslog-coordination v2

# The tests marked any_security on SASL_SSL clusters (docs/design.md#security):
# the lead pressure run and the secure chaos run, about 4 minutes. `make test`
# runs it.
test-secure: setup
	$(SECURE)

# The five-minute V2 tier (issue 35): the tests marked v2_fast, in V2. `make
# test` runs it; the whole of `make test-v2` (about 15 minutes) runs nightly.
test-v2-fast: setup
	$(V2_FAST)
