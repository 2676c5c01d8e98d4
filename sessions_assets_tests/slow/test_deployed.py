"""The deployed path: ``dagster dev`` with its daemon, sensors switched on, days dropped into the landing zone.

Nothing here calls the project's Python: the daemon evaluates the sensors (with every check it makes on
their requests), launches the runs in their own processes, and a partition backfill is launched through
the webserver's GraphQL API as the UI launches it. The tables must then equal the oracle's full recompute,
and no sensor tick, run or backfill may have failed.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from sessions_assets.cli import main as cli
from sessions_assets.definitions import build_resources
from sessions_assets.tables import Warehouse
from sessions_assets_tests.compare import assert_tables_match_oracle
from sessions_assets_tests.deployed import FAILED_RUNS, PROJECT, DagsterDev

pytestmark = pytest.mark.slow
SENSORS = ("landing_sensor", "late_data_sensor")
INGEST_ASSETS = ["raw_events", "rejected_events", "partition_map"]


def _settled(dev: DagsterDev, instance: dg.DagsterInstance, received_days: list[str]) -> bool:
    """Every received day ingested, the snapshot built after the last ingest, and nothing in flight."""
    ingested = instance.get_materialized_partitions(dg.AssetKey("partition_map"))
    if not set(received_days) <= ingested or not dev.idle():
        return False
    last_map = instance.get_latest_materialization_event(dg.AssetKey("partition_map"))
    snapshot = instance.get_latest_materialization_event(dg.AssetKey("daily_snapshot"))
    return snapshot is not None and snapshot.timestamp > last_map.timestamp


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
    env = {"SESSIONS_DATA_ROOT": str(data_root), "TZ": "UTC", "SPARK_SHUFFLE_PARTITIONS": "2",
           "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}  # fmt: skip
    command = [str(Path(sys.executable).parent / "dagster"), "dev", "-w", "workspace.yaml"]

    with DagsterDev(home, env, command, tmp_path / "dagster-dev.log") as dev, dg.DagsterInstance.from_config(
        str(home)
    ) as instance:
        for name in SENSORS:
            dev.start_sensor(name)
            assert dev.sensor(name)["status"] == "RUNNING"

        # Two received days dropped in: the landing sensor ingests them, the late-data sensor rebuilds.
        for folder in folders[:2]:
            shutil.move(folder, data_root / "landing" / folder.name)
        days = [f.name.split("=")[1] for f in folders]
        _wait_until_settled(dev, instance, days[:2], timeout=900)

        # A user re-ingests both days from the UI: a partition backfill of the ingest assets.
        dev.launch_backfill(INGEST_ASSETS, days[:2])
        time.sleep(5)
        _wait_until_settled(dev, instance, days[:2], timeout=900)

        # Two more days, whose late events land on the first two days' partitions.
        for folder in folders[2:]:
            shutil.move(folder, data_root / "landing" / folder.name)
        _wait_until_settled(dev, instance, days, timeout=900)
        _assert_nothing_failed(dev)
        assert all(b["status"] == "COMPLETED_SUCCESS" for b in dev.backfills()), dev.backfills()
        late_runs = [r for r in dev.runs() if {"path": ["sessions"]} in (r["assetSelection"] or [])]
        assert late_runs, "the late-data sensor launched no run of sessions"

    wh = Warehouse(spark, build_resources(data_root=str(data_root))["settings"])
    assert_tables_match_oracle(wh, data_root)
