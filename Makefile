# Two set-up commands: `make run` (daemon on the embedded SQLite default) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CONFIG ?= examples/triggers.yaml
# The path the shipped unit runs (docs/operations.md installs there); `make systemd-unit
# TRIGGERS_BIN=...` renders the unit for another one.
TRIGGERS_BIN ?= /opt/triggers/bin/triggers
UNIT_OUT ?= build/triggers.service
# `systemd-analyze security` exposure, times ten (1.7 is 17): above this fails.
UNIT_EXPOSURE ?= 20

.PHONY: run test lint unit faults fault-tier faketime install install-test clean systemd-unit verify-unit screenshots

$(BIN)/triggers: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $(BIN)/triggers

$(VENV)/.test-deps: pyproject.toml $(BIN)/triggers
	$(BIN)/pip install --quiet -e ".[test]"
	touch $(VENV)/.test-deps

install: $(BIN)/triggers

install-test: $(VENV)/.test-deps

# Bytecode compiled as an installed wheel has it, also where PYTHONDONTWRITEBYTECODE
# is set: each CLI call then starts without compiling the project's modules.
run: install
	$(BIN)/python -m compileall -q triggers looms_runtime
	$(BIN)/triggers run --config $(CONFIG)

lint: install-test
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# The suite starts the CLI and the daemon hundreds of times: each start would compile
# the project's modules again (0.3 s of CPU) where PYTHONDONTWRITEBYTECODE is set.
test: lint
	$(BIN)/python -m compileall -q triggers looms_runtime
	$(BIN)/pytest -n 2 --dist loadgroup
	$(MAKE) --no-print-directory fault-tier

unit: install-test
	$(BIN)/pytest tests/unit

# The fault tests (real daemons killed, stopped, clock-jumped): see docs/reliability.md.
faults: install-test faketime
	$(BIN)/python -m compileall -q triggers looms_runtime
	$(MAKE) --no-print-directory fault-tier

# Two scenarios at a time (each module is one scenario: mostly waiting on its daemons),
# then alone the PostgreSQL restart, which takes the server away from anything beside it.
fault-tier:
	$(BIN)/pytest -m faults tests/faults -n 2 --dist loadscope --ignore tests/faults/test_pg_restart.py
	$(BIN)/pytest -m faults tests/faults/test_pg_restart.py

# libfaketime for the clock-jump fault test (Debian/Ubuntu package `faketime`).
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
faketime:
	@ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1 || \
		$(SUDO) apt-get install -y faketime || \
		{ $(SUDO) apt-get update && $(SUDO) apt-get install -y faketime; }
# The dashboard's screenshots in docs/dashboard/ (docs/dashboard.md), drawn by headless
# chromium (Debian's chromium and chromium-driver) against the real daemon.
screenshots: install-test
	$(BIN)/python -m tests.screenshots docs/dashboard

systemd-unit:
	mkdir -p $(dir $(UNIT_OUT))
	sed 's|/opt/triggers/bin/triggers|$(TRIGGERS_BIN)|g' systemd/triggers.service > $(UNIT_OUT)

# The unit as systemd reads it, with this checkout's `triggers` as its command.
verify-unit: install
	$(MAKE) --no-print-directory systemd-unit TRIGGERS_BIN=$(abspath $(BIN)/triggers) \
		UNIT_OUT=$(VENV)/unit/triggers.service
	systemd-analyze verify $(VENV)/unit/triggers.service
	systemd-analyze security --offline=yes --threshold=$(UNIT_EXPOSURE) \
		$(VENV)/unit/triggers.service > $(VENV)/unit/security.txt \
		|| { cat $(VENV)/unit/security.txt; exit 1; }
	tail -1 $(VENV)/unit/security.txt

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache
