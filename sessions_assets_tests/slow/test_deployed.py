"""The deployed path: ``dg dev`` with its daemon, sensors switched on, days dropped into the landing zone.

Nothing here runs the project's jobs itself: the daemon evaluates the sensors (with every check it makes
on their requests) and launches the runs in their own processes, and a partition backfill is launched
through the webserver's GraphQL API as the UI launches it. The tables must then equal the oracle's full
recompute, and no sensor tick, run or backfill may have failed.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from sessions_assets.cli.main import main as cli
from sessions_assets.defs import planning
from sessions_assets.warehouse.delta import Warehouse
from sessions_assets.warehouse.storage import Storage
from sessions_assets_tests.deployed import FAILED_RUNS, PROJECT, DagsterDev
from sessions_assets_tests.expected import assert_tables_match_oracle

pytestmark = pytest.mark.slow
SENSORS = ("landing_sensor", "late_data_sensor")
TIMEOUT = 300
INGEST_ASSETS = ["raw_events", "rejected_events", "partition_map"]


def _settled(dev: DagsterDev, instance: dg.DagsterInstance, received_days: list[str]) -> bool:
    """Every received day ingested, a refresh done after the last ingest, and nothing in flight."""
    ingested = instance.get_materialized_partitions(dg.AssetKey("partition_map"))
    return set(received_days) <= ingested and dev.idle() and planning.refresh_due(instance) is None


def _wait_until_settled(dev: DagsterDev, instance: dg.DagsterInstance, received_days: list[str], timeout: float):
    """Until the pipeline has caught up with the landing zone (twice in a row, a few seconds apart);
    fails at once on a failed sensor tick or run, with what the UI would show."""
    deadline, calm = time.monotonic() + timeout, 0
    while time.monotonic() < deadline:
        _assert_nothing_failed(dev)
        calm = calm + 1 if _settled(dev, instance, received_days) else 0
        if calm == 2:
            return
        time.sleep(3)
    pytest.fail(f"not settled within {timeout} s; runs: {dev.runs()}\n{dev.tail()}")


def _assert_nothing_failed(dev: DagsterDev) -> None:
    for name in SENSORS:
        failed = [t for t in dev.sensor(name)["ticks"] if t["status"] == "FAILURE"]
        assert not failed, f"{name} ticks failed: {failed[0]['error']['message'][:2000]}"
    assert not dev.runs(FAILED_RUNS), dev.runs(FAILED_RUNS)
    assert all(b["status"] not in ("FAILED", "COMPLETED_FAILED", "CANCELED") for b in dev.backfills()), dev.backfills()


def test_sensors_and_a_ui_backfill_under_the_daemon_build_exact_tables(tmp_path, spark):
    staging, data_root, home = tmp_path / "staging", tmp_path / "data", tmp_path / "dagster_home"
    assert cli(["generate", "--data-root", str(staging), "--days", "4", "--users", "15", "--seed", "5"]) == 0
    folders = sorted((staging / "landing").iterdir())
    (data_root / "landing").mkdir(parents=True)
    home.mkdir()
    shutil.copy(PROJECT / "dagster.yaml", home / "dagster.yaml")
    venv = Path(sys.executable).parent.parent
    env = {"SESSIONS_DATA_ROOT": str(data_root), "TZ": "UTC", "VIRTUAL_ENV": str(venv),
           "PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}  # fmt: skip
    command = [str(venv / "bin" / "dg"), "dev", "--use-active-venv"]

    with (
        DagsterDev(home, env, command, tmp_path / "dagster-dev.log") as dev,
        dg.DagsterInstance.from_config(str(home)) as instance,
    ):
        for name in SENSORS:
            dev.start_sensor(name)
            assert dev.sensor(name)["status"] == "RUNNING"

        # Two received days dropped in: the landing sensor ingests them, the late-data sensor rebuilds.
        for folder in folders[:2]:
            shutil.move(folder, data_root / "landing" / folder.name)
        days = [f.name.split("=")[1] for f in folders]
        _wait_until_settled(dev, instance, days[:2], timeout=TIMEOUT)

        # A user re-ingests both days from the UI: a partition backfill of the ingest assets.
        dev.launch_backfill(INGEST_ASSETS, days[:2])
        time.sleep(5)
        _wait_until_settled(dev, instance, days[:2], timeout=TIMEOUT)

        # Two more days, whose late events land on the first two days' partitions.
        for folder in folders[2:]:
            shutil.move(folder, data_root / "landing" / folder.name)
        _wait_until_settled(dev, instance, days, timeout=TIMEOUT)
        _assert_nothing_failed(dev)
        assert all(b["status"] == "COMPLETED_SUCCESS" for b in dev.backfills()), dev.backfills()
        refreshes = [r for r in dev.runs() if r["jobName"] == planning.REFRESH_JOB]
        assert refreshes and all(
            {"key": "dagster/sensor_name", "value": "late_data_sensor"} in r["tags"] for r in refreshes
        ), "the late-data sensor launched no refresh"
        # The partitions the late events touched are materialized, the days between them not.
        events = instance.get_materialized_partitions(dg.AssetKey("events"))
        assert events and events < set(_days_between(min(events), max(events)))

    assert_tables_match_oracle(Warehouse(spark, Storage(str(data_root))), data_root)


def _days_between(first: str, last: str) -> list[str]:
    from datetime import date, timedelta

    a, b = date.fromisoformat(first), date.fromisoformat(last)
    return [(a + timedelta(days=i)).isoformat() for i in range((b - a).days + 1)]
