# Entry points. Each target sets up what it needs (a .venv with pinned packages) on a fresh machine.
#   make demo   generate the bundled sample landing zone under ./data and run the whole pipeline
#   make test   run the test suite (what CI runs, via .ci/run)
#   make soak   the property tests only, with SOAK (20) times their examples: a nightly budget, not CI's
#   make dev    serve the Dagster UI and daemon with this project's definitions
#   make bench  time one more received day four ways after 30, 90 and 180 days (benchmarks/results/)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DATA_ROOT ?= data
export DAGSTER_HOME ?= $(CURDIR)/.dagster_home
export SESSIONS_DATA_ROOT ?= $(CURDIR)/$(DATA_ROOT)

.PHONY: setup demo test soak dev bench clean

$(BIN)/sessions-assets: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@

setup: $(BIN)/sessions-assets

$(DAGSTER_HOME)/dagster.yaml: dagster.yaml
	mkdir -p $(DAGSTER_HOME)
	cp dagster.yaml $@

demo: setup $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/sessions-assets generate --data-root $(SESSIONS_DATA_ROOT) --days 7 --users 100
	$(BIN)/sessions-assets run --data-root $(SESSIONS_DATA_ROOT)

# Two workers, one test file each at a time (module fixtures stay in one worker): 1,467 s -> 835 s here.
PYTEST_WORKERS ?= 2
test: setup
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile

SOAK ?= 20
soak: setup
	SESSIONS_SOAK=$(SOAK) $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile -m property

dev: setup $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/dagster dev -w workspace.yaml

BENCH_ARGS ?= --history 30 90 180 --events-per-day 5000
bench: setup
	$(BIN)/python -m pip install --quiet -e ".[test,bench]"
	$(BIN)/python benchmarks/incremental.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(DAGSTER_HOME) $(DATA_ROOT) *.egg-info
