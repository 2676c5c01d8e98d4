"""One Spark Connect server for the whole test run, a session of it per test process, and a fresh data root per test.

The server is started once, by the process that collects the tests (``pytest_configure``), and every test worker,
every process a test starts (the CLI, ``dg dev``'s runs) and every in-process run attaches to it through
``SPARK_REMOTE``, as a deployment's runs do: one warm JVM for everything, and no test process can reach a JVM of
its own. They show it its token, ``SPARK_CONNECT_AUTHENTICATE_TOKEN``, inherited like ``SPARK_REMOTE``. Tests of
runs with a driver of their own unset ``SPARK_REMOTE`` in the processes they start.

Tiers: the engine tests (``engine/``) call the DataFrame functions and the oracle; the Dagster tests
(``pipeline/``) run the real jobs in-process against a test instance and real Delta tables, and those marked
``scenario`` run the whole pipeline over several received days against the oracle; the slow tests (``slow/``,
marked ``slow``) start processes: the CLI, ``dg dev``, a Spark cluster, PostgreSQL, S3. ``make test-fast`` runs
the first two, ``make test`` all but S3.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import settings

os.environ["TZ"] = "UTC"  # Python-side datetimes from Spark are rendered in the process time zone
time.tzset()
# The Makefile's DAGSTER_HOME is the demo's instance: a test's data root keeps its own (and its forget key) beside it.
os.environ.pop("DAGSTER_HOME", None)

# Property tests: in CI the same examples every run (a failure repeats); elsewhere new ones each run, with
# failures kept in .hypothesis/ and replayed first. A failing example is printed with its reproduction blob.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

SLOW_TIER = "sessions_assets_tests/slow/"
# Heaviest first: files are handed to the workers in this order, so the many quick engine files fill in around
# the few long ones instead of leaving one worker alone with a long file at the end.
TIERS = (SLOW_TIER, "sessions_assets_tests/pipeline/", "sessions_assets_tests/engine/")


def pytest_collection_modifyitems(items):
    """The slow tier, then the Dagster tier, then the engine tier (each file's tests in their order)."""
    items.sort(key=lambda item: next((n for n, t in enumerate(TIERS) if item.nodeid.startswith(t)), len(TIERS)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under ``--dist loadfile`` the slow tier counts as one file: a worker runs its tests one after the other.
    Each starts several processes (``dg dev`` and its runs, a Spark cluster, CLI runs), and two of them side by
    side on two cores slowed each other more than they took in turn. Files go out in collection order (the
    tiers above), not xdist's default of most tests first, which left the long pipeline files for last."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False

    class FileOrSlowTier(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::")[0]
            return SLOW_TIER if path.startswith(SLOW_TIER) else path

    return FileOrSlowTier(config, log)


# tier -> (its tests, their summed time): reports from every xdist worker reach this process's hook.
_TIME_BY_TIER: dict[str, tuple[set[str], float]] = {}


def pytest_runtest_logreport(report):
    """Each test's time (set-up, call and tear-down), summed by tier for the run's summary."""
    tier = next((t.split("/")[1] for t in TIERS if report.nodeid.startswith(t)), "other")
    tests, seconds = _TIME_BY_TIER.setdefault(tier, (set(), 0.0))
    tests.add(report.nodeid)
    _TIME_BY_TIER[tier] = (tests, seconds + report.duration)


def pytest_terminal_summary(terminalreporter):
    """Where the minutes went: each tier's tests and their summed time (spread over the workers)."""
    if _TIME_BY_TIER:
        terminalreporter.section("time by tier")
        for tier, (tests, seconds) in sorted(_TIME_BY_TIER.items(), key=lambda kv: -kv[1][1]):
            terminalreporter.write_line(f"{tier:<9} {len(tests):>4} tests {seconds:>9.1f} s")


def pytest_configure(config):
    """Start the run's Spark Connect server, unless ``SPARK_REMOTE`` names one already: a server a developer keeps
    running between runs (``sessions-assets spark-server start``, its token exported as
    ``SPARK_CONNECT_AUTHENTICATE_TOKEN``), or the one the controller of these xdist workers started."""
    if os.environ.get("SPARK_REMOTE"):
        return
    from sessions_assets.cli.server import Server
    from sessions_assets.warehouse.spark import TOKEN_VARIABLE
    from sessions_assets_tests.helpers.deployed import free_port

    server = Server(Path(tempfile.mkdtemp(prefix="sessions-assets-test-spark-")))
    server.start(port=free_port())
    config.stash[SERVER] = server
    os.environ["SPARK_REMOTE"] = server.running()["url"]
    os.environ[TOKEN_VARIABLE] = server.token()


def pytest_unconfigure(config):
    server = config.stash.get(SERVER, None)
    if server is not None:
        server.stop()
        shutil.rmtree(server.folder, ignore_errors=True)


SERVER = pytest.StashKey()


@pytest.fixture(scope="session")
def spark():
    """This process's session on the run's Spark Connect server."""
    from sessions_assets.warehouse import spark

    return spark.session(spark.spark_config(), spark.remote())


@pytest.fixture
def data_root(tmp_path) -> Path:
    root = tmp_path / "data"
    (root / "landing").mkdir(parents=True)
    return root


@pytest.fixture
def settings(data_root):
    from sessions_assets.settings import Settings

    return Settings(data_root=str(data_root))


@pytest.fixture
def warehouse(spark, settings):
    from sessions_assets.warehouse.delta import Warehouse
    from sessions_assets.warehouse.storage import Storage

    return Warehouse(spark, Storage(settings.data_root))


@pytest.fixture
def runner(spark, data_root):
    """The project's jobs run in-process against a test instance (what ``sessions-assets run`` does)."""
    from sessions_assets_tests.helpers.arrivals import running

    with running(data_root) as runner:
        yield runner
