"""The deployed path: ``dg dev`` with its daemon, sensors switched on, days dropped into the landing zone.

Nothing here runs the project's jobs itself: the daemon evaluates the sensors (with every check it makes
on their requests) and launches the runs in their own processes, and a partition backfill is launched
through the webserver's GraphQL API as the UI launches it. The instance keeps its runs, events and sensor
state in PostgreSQL, as a deployment's does. The tables must then equal the oracle's full recompute, no sensor
tick, run or backfill may have failed, and the CLI, on the same instance, must find nothing left to do.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml

from sessions_assets.cli.main import main
from sessions_assets.defs import planning
from sessions_assets.warehouse.delta import Warehouse
from sessions_assets.warehouse.storage import Storage
from sessions_assets_tests.deployed import FAILED_RUNS, PROJECT, DagsterDev
from sessions_assets_tests.expected import assert_tables_match_oracle
from sessions_assets_tests.slow.commands import cli

pytestmark = pytest.mark.slow
SENSORS = ("landing_sensor", "late_data_sensor")
TIMEOUT = 600  # per wait; a refresh under dg dev waits for its sensor tick and a Spark start
INGEST_ASSETS = ["raw_events", "rejected_events", "partition_map"]


def _settled(dev: DagsterDev, storage: Storage) -> bool:
    """Every received day ingested, every derived table current, and nothing in flight."""
    return not planning.landing(storage).due and planning.backlog(storage) is None and dev.idle()


def _wait_until_settled(dev: DagsterDev, storage: Storage, timeout: float, failures_allowed: bool = False):
    """Until the pipeline has caught up with the landing zone (twice in a row, a few seconds apart);
    fails at once on a failed sensor tick, or run (unless ``failures_allowed``), with what the UI would show."""
    deadline, calm = time.monotonic() + timeout, 0
    while time.monotonic() < deadline:
        _assert_nothing_failed(dev, runs_may_fail=failures_allowed)
        calm = calm + 1 if _settled(dev, storage) else 0
        if calm == 2:
            return
        time.sleep(3)
    pytest.fail(f"not settled within {timeout} s; runs: {dev.runs()}\n{dev.tail()}")


def _assert_nothing_failed(dev: DagsterDev, runs_may_fail: bool = False) -> None:
    for name in SENSORS:
        failed = [t for t in dev.sensor(name)["ticks"] if t["status"] == "FAILURE"]
        assert not failed, f"{name} ticks failed: {failed[0]['error']['message'][:2000]}"
    if runs_may_fail:
        return
    assert not dev.runs(FAILED_RUNS), dev.runs(FAILED_RUNS)
    assert all(b["status"] not in ("FAILED", "COMPLETED_FAILED", "CANCELED") for b in dev.backfills()), dev.backfills()


def test_sensors_and_a_ui_backfill_under_the_daemon_build_exact_tables(tmp_path, spark, postgres):
    """Also a fresh machine's first days: a new home (no Ivy cache) and two days dropped at once; no run may
    resolve a package. Then days whose first run fails, healed with no one acting."""
    staging, data_root, home = tmp_path / "staging", tmp_path / "data", tmp_path / "dagster_home"
    user_home = tmp_path / "home"
    user_home.mkdir()
    assert main(["generate", "--data-root", str(staging), "--days", "5", "--users", "15", "--seed", "5"]) == 0
    folders = sorted((staging / "landing").iterdir())
    (data_root / "landing").mkdir(parents=True)
    home.mkdir()
    shutil.copy(PROJECT / "dagster.yaml", home / "dagster.yaml")
    with open(home / "dagster.yaml", "a") as config:
        config.write("\n" + yaml.safe_dump(postgres.instance_storage(), sort_keys=False))
    venv = Path(sys.executable).parent.parent
    env = {
        "SESSIONS_DATA_ROOT": str(data_root),
        "TZ": "UTC",
        "VIRTUAL_ENV": str(venv),
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(user_home),
        # Java takes its home (and Ivy's cache) from user.home, not $HOME.
        "JAVA_TOOL_OPTIONS": f"-Duser.home={user_home}",
    }
    storage = Storage(str(data_root))
    command = [str(venv / "bin" / "dg"), "dev", "--use-active-venv"]

    with (
        DagsterDev(home, env, command, tmp_path / "dagster-dev.log") as dev,
        dg.DagsterInstance.from_config(str(home)) as instance,
    ):
        assert type(instance.run_storage).__name__ == "PostgresRunStorage", type(instance.run_storage)
        for name in SENSORS:
            dev.start_sensor(name)
            assert dev.sensor(name)["status"] == "RUNNING"

        # Two received days dropped in at once: one run ingests both and refreshes what they touched.
        for folder in folders[:2]:
            shutil.move(folder, data_root / "landing" / folder.name)
        days = [f.name.split("=")[1] for f in folders]
        _wait_until_settled(dev, storage, timeout=TIMEOUT)
        [first] = dev.runs()
        assert first["jobName"] == "process_job" and _tag(first, "dagster/sensor_name") == "landing_sensor"
        assert (_tag(first, planning.RANGE_START), _tag(first, planning.RANGE_END)) == (days[0], days[1])

        # A user re-ingests both days from the UI: a partition backfill of the ingest assets, one run; the
        # late-data sensor then refreshes once.
        dev.launch_backfill(INGEST_ASSETS, days[:2])
        time.sleep(5)
        _wait_until_settled(dev, storage, timeout=TIMEOUT)
        assert len([r for r in dev.runs() if _tag(r, "dagster/backfill")]) == 1
        refreshes = [r for r in dev.runs() if r["jobName"] == "refresh_job"]
        assert len(refreshes) == 1 and _tag(refreshes[0], "dagster/sensor_name") == "late_data_sensor"

        # The store refuses the next days' first attempt (a table's folder is briefly a file): the run fails in
        # one line, and the days are ingested afterwards with no one acting.
        table = data_root / "warehouse" / "raw_events"
        table.rename(table.with_suffix(".away"))
        table.write_text("the store is down")
        for folder in folders[2:]:  # days whose late events land on the first two days' partitions
            shutil.move(folder, data_root / "landing" / folder.name)
        deadline = time.monotonic() + TIMEOUT
        while not dev.runs(FAILED_RUNS) and time.monotonic() < deadline:
            time.sleep(2)
        table.unlink()
        table.with_suffix(".away").rename(table)
        _wait_until_settled(dev, storage, timeout=TIMEOUT, failures_allowed=True)
        [failed, *_] = dev.runs(FAILED_RUNS)
        assert failed["jobName"] == "process_job"
        assert all(b["status"] == "COMPLETED_SUCCESS" for b in dev.backfills()), dev.backfills()
        # The partitions the late events touched are materialized, the days between them not.
        events = instance.get_materialized_partitions(dg.AssetKey("events"))
        assert events and events < set(_days_between(min(events), max(events)))

    assert_tables_match_oracle(Warehouse(spark, storage), data_root)
    # No run resolved a package: the jars came from disk, and no Ivy cache appeared in the new home.
    assert not list(user_home.glob(".ivy2*")), list(user_home.iterdir())
    assert ":: resolution report ::" not in dev.tail(10**9)

    # The CLI on the same instance sees what the daemon did: nothing is due.
    on_the_instance = {**env, "DAGSTER_HOME": str(home)}
    status = cli("status", "--data-root", str(data_root), cwd=home, env=on_the_instance)
    assert "received days to ingest: none" in status and "refresh due: no" in status, status
    assert "Nothing to do" in cli("run", "--data-root", str(data_root), cwd=home, env=on_the_instance)


def _tag(run: dict, key: str) -> str | None:
    return next((t["value"] for t in run["tags"] if t["key"] == key), None)


def _days_between(first: str, last: str) -> list[str]:
    from datetime import date, timedelta

    a, b = date.fromisoformat(first), date.fromisoformat(last)
    return [(a + timedelta(days=i)).isoformat() for i in range((b - a).days + 1)]
