# Entry points. Each target sets up what it needs (a .venv with pinned packages) on a fresh machine.
#   make demo       generate the bundled sample landing zone under ./data and run the whole pipeline, its partitions
#                   from the sample's first event day (LAYOUT=segment: laid out as Segment's S3 destination writes
#                   it; TIME_ZONE=America/Los_Angeles: local days of that zone; give either a DATA_ROOT of its own)
#   make test       lint, then every test tier (what CI runs, via .ci/run)
#   make test-fast  the engine and Dagster tiers (no multi-day pipeline scenarios, no processes): 2–4 minutes
#   make test-s3    the pipeline end to end on an S3-compatible server on loopback (downloads its jars)
#   make soak       the property tests only, with SOAK (20) times their examples: a nightly budget
#   make dev        serve the Dagster UI and daemon (dg dev), its runs attached to a Spark Connect server it starts
#   make bench      time one more received day, incremental against a full rebuild (benchmarks/results/)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DATA_ROOT ?= data
export SESSIONS_DATA_ROOT ?= $(CURDIR)/$(DATA_ROOT)
# The instance of a data root is <data root>/dagster_home, as the command line's default: the UI and
# sessions-assets read the same history.
export DAGSTER_HOME ?= $(SESSIONS_DATA_ROOT)/dagster_home
# Delta's jars, fetched once here and read from disk by every Spark start (sessions_assets/warehouse/jars.py).
JARS := $(VENV)/share/sessions-assets/jars/packages.txt
# Where make dev's Spark Connect server listens (loopback); its runs attach there (SPARK_REMOTE) with the token it
# keeps in its folder (only pyspark's "localhost" carries a token without TLS).
SPARK_CONNECT_PORT ?= 15002
SPARK_TOKEN_FILE := $(DAGSTER_HOME)/spark-server/token
# Test workers, one test file each at a time, so module fixtures stay in one worker: one per core (a third gains nothing
# on two cores: both are already busy).
TEST_WORKERS ?= 2
# Each run ends with its 25 slowest tests and each tier's summed time (sessions_assets_tests/conftest.py).
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=25

.PHONY: setup demo lint test test-fast test-s3 soak dev bench clean

$(BIN)/sessions-assets: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@

$(JARS): $(BIN)/sessions-assets
	$(BIN)/sessions-assets fetch-jars

setup: $(BIN)/sessions-assets $(JARS)

$(DAGSTER_HOME)/dagster.yaml: dagster.yaml
	mkdir -p $(DAGSTER_HOME)
	cp dagster.yaml $@

LAYOUT ?= received_date
# The time zone whose local days the demo's (and make dev's) derived tables and partitions use: an IANA name.
TIME_ZONE ?= UTC
demo dev: export SESSIONS_TIME_ZONE ?= $(TIME_ZONE)
# The demo's partitions start at its sample's first event day, which `generate` writes to the data root
# (sample_start_date, sessions_assets/cli/generate.py), unless SESSIONS_START_DATE is set; else the default's.
SAMPLE_START = $(SESSIONS_DATA_ROOT)/sample_start_date
START_DATE = $${SESSIONS_START_DATE:-$$(cat $(SAMPLE_START) 2>/dev/null || echo 2020-01-01)}
# The sample's own site: a referrer there is internal navigation, no channel (sessions_assets/cli/generate.py).
demo dev: export SESSIONS_OWN_DOMAINS ?= shop.example
demo: setup $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/sessions-assets generate --data-root $(SESSIONS_DATA_ROOT) --days 7 --users 100 --layout $(LAYOUT)
	SESSIONS_START_DATE=$(START_DATE) $(BIN)/sessions-assets run --data-root $(SESSIONS_DATA_ROOT)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(PYTEST) -m "not s3"

# The inner loop: half the property tests' examples (sessions_assets_tests/helpers/budget.py); `make test` draws them all.
test-fast: lint
	SESSIONS_SOAK=0.5 $(PYTEST) -m "not slow and not scenario and not s3"

test-s3: setup
	$(BIN)/python -m pip install --quiet -e ".[test,s3]"
	$(BIN)/python -m pytest -q -m s3

SOAK ?= 20
soak: setup
	SESSIONS_SOAK=$(SOAK) $(PYTEST) -m property

# The server is stopped when dg dev ends (Ctrl-C included). The token reaches dg dev's runs through the
# environment, never a command line.
dev: setup $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/sessions-assets spark-server start --port $(SPARK_CONNECT_PORT)
	trap '$(BIN)/sessions-assets spark-server stop' EXIT; trap 'exit 130' INT TERM; \
	SPARK_CONNECT_AUTHENTICATE_TOKEN="$$(cat '$(SPARK_TOKEN_FILE)')" SPARK_REMOTE=sc://localhost:$(SPARK_CONNECT_PORT) \
		SESSIONS_START_DATE=$(START_DATE) VIRTUAL_ENV=$(CURDIR)/$(VENV) PATH=$(CURDIR)/$(BIN):$$PATH \
		$(BIN)/dg dev --use-active-venv

BENCH_ARGS ?=
bench: setup
	$(BIN)/python benchmarks/incremental.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(DATA_ROOT) *.egg-info
