# Two set-up commands: `make run` (daemon on the embedded SQLite default) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CONFIG ?= examples/triggers.yaml

.PHONY: run test lint unit faults faketime install install-test clean

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

run: install
	$(BIN)/triggers run --config $(CONFIG)

lint: install-test
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

test: lint
	$(BIN)/pytest -n 2 --dist loadgroup
	$(BIN)/pytest -m faults tests/faults

unit: install-test
	$(BIN)/pytest tests/unit

# The fault tests (real daemons killed, stopped, clock-jumped): see docs/reliability.md.
faults: install-test faketime
	$(BIN)/pytest -m faults tests/faults

# libfaketime for the clock-jump fault test (Debian/Ubuntu package `faketime`).
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
faketime:
	@ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1 || \
		$(SUDO) apt-get install -y faketime || \
		{ $(SUDO) apt-get update && $(SUDO) apt-get install -y faketime; }

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
