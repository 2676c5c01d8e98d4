"""Crashes and overlapping runs leave every table whole; the next run finishes what was interrupted."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import date
from pathlib import Path

import dagster as dg
import pytest
from delta.tables import DeltaTable

from sessions_assets.cli import main
from sessions_assets.definitions import build_resources
from sessions_assets.ingest import landing_days
from sessions_assets.conflicts import is_write_conflict
from sessions_assets.tables import Warehouse
from sessions_assets_tests.compare import assert_tables_match_oracle
from sessions_assets_tests.landing import segment, write_by_received_day, write_day

PROJECT = Path(__file__).resolve().parents[1]


def _late_stream(root: Path) -> list:
    """Three received days whose late events extend, merge and move sessions of the earlier days."""
    lines = [
        segment("a1", "u1", "2024-03-01 23:50"), segment("a2", "u1", "2024-03-02 00:10"),
        segment("a0", "u1", "2024-03-01 23:30", "2024-03-03 08:00"),  # extends u1's session backwards
        segment("b1", "u2", "2024-03-01 10:00"), segment("b2", "u2", "2024-03-01 10:40"),
        segment("b3", "u2", "2024-03-01 10:20", "2024-03-03 09:00"),  # merges u2's two sessions
        segment("c1", "u3", "2024-03-02 12:00"),
        segment("c1", "u3", "2024-03-02 12:00", "2024-03-03 12:00"),  # a re-delivery
        segment("d1", "u4", "2024-03-03 07:00"), segment("d2", "u4", "2024-03-01 07:00", "2024-03-03 07:01"),
    ]  # fmt: skip
    days = write_by_received_day(root, lines)
    write_day(root, days[1], ["not json", '{"messageId": "x"}'], name="part-0001.jsonl")
    return days


def _cli(data_root: Path, *args: str) -> list[str]:
    """The ``sessions-assets`` command line, as a deployment would run it."""
    return [sys.executable, "-m", "sessions_assets.cli", *args, "--data-root", str(data_root)]


def _deployed_home(tmp_path: Path) -> Path:
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT / "dagster.yaml", home / "dagster.yaml")  # pools on, as deployed
    # Storage is created once, as a deployment does; two processes creating it at once race in SQLite.
    with dg.DagsterInstance.from_config(str(home)):
        pass
    return home


def _env(data_root: Path, home: Path) -> dict:
    return {**os.environ, "DAGSTER_HOME": str(home), "SESSIONS_DATA_ROOT": str(data_root), "TZ": "UTC",
            "SPARK_SHUFFLE_PARTITIONS": "2"}  # fmt: skip


def test_two_overlapping_runs_equal_a_serial_run(tmp_path, spark, data_root):
    """Two ``run`` processes start together on the same days (a daily run and a backfill, say)."""
    _, middle, _ = _late_stream(data_root)
    shutil.rmtree(data_root / "landing" / f"received_date={middle}")  # two days overlap enough, and faster
    home = _deployed_home(tmp_path)
    processes = [
        subprocess.Popen(_cli(data_root, "run"), env=_env(data_root, home), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
        for _ in range(2)
    ]  # fmt: skip
    outputs = [p.communicate(timeout=900)[0].decode() for p in processes]
    assert [p.returncode for p in processes] == [0, 0], "\n".join(o[-2000:] for o in outputs)
    wh = Warehouse(spark, build_resources(data_root=str(data_root))["settings"])
    assert_tables_match_oracle(wh, data_root)


_CREATE_AT_TIMES = """
import sys, time
from dagster_pyspark import LazyPySparkResource
from sessions_assets.config import PipelineSettings
from sessions_assets.resources import spark_config
from sessions_assets.tables import PARTITION_MAP, Warehouse
spark = LazyPySparkResource(spark_config=spark_config(master="local[1]", shuffle_partitions=1, ui=False)).spark_session
print("ready", flush=True)
start = float(sys.stdin.readline())
for n, root in enumerate(sys.argv[1:]):
    time.sleep(max(0.0, start + n * 0.5 - time.time()))
    Warehouse(spark, PipelineSettings(data_root=root)).delta(PARTITION_MAP)
"""


def test_two_processes_creating_a_table_at_once_both_get_it(spark, tmp_path):
    """Two first runs on an empty warehouse: the slower creation of each table waits for the faster one's."""
    from sessions_assets.config import PipelineSettings
    from sessions_assets.tables import PARTITION_MAP

    roots = [str(tmp_path / f"warehouse{n}") for n in range(12)]
    log = tmp_path / "other.log"
    with open(log, "w") as errors:
        other = subprocess.Popen([sys.executable, "-c", _CREATE_AT_TIMES, *roots], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=errors, text=True)  # fmt: skip
    assert other.stdout.readline().strip() == "ready", log.read_text()[-3000:]
    start = time.time() + 1.0
    other.stdin.write(f"{start}\n")
    other.stdin.flush()
    for n, root in enumerate(roots):  # the same table at the same moments, from this process's Spark
        time.sleep(max(0.0, start + n * 0.5 - time.time()))
        Warehouse(spark, PipelineSettings(data_root=root)).delta(PARTITION_MAP)
    assert other.wait(timeout=300) == 0, log.read_text()[-3000:]
    for root in roots:
        assert DeltaTable.forPath(spark, PipelineSettings(data_root=root).table_path("partition_map")).toDF().count() == 0


def test_concurrent_writes_to_one_partition_are_recognised_as_conflicts(warehouse, spark):
    """What the retry policy keys on: Delta refusing the later of two overlapping commits."""
    from sessions_assets.tables import PARTITION_MAP

    day = date(2024, 3, 1)
    errors: list[BaseException] = []

    def write(n: int) -> None:
        rows = spark.createDataFrame([(day, day, n, str(n))], PARTITION_MAP.schema)
        try:
            warehouse.replace_partitions(PARTITION_MAP, rows, day, day)
        except Exception as error:  # noqa: BLE001 - inspected below
            errors.append(error)

    warehouse.delta(PARTITION_MAP)
    for attempt in range(6):
        threads = [threading.Thread(target=write, args=(attempt * 2 + k,)) for k in (1, 2)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        if errors:
            break
    assert errors, "two overlapping overwrites of one partition never collided"
    assert all(is_write_conflict(e) for e in errors), errors
    assert warehouse.read(PARTITION_MAP).count() == 1  # the winner's row, whole


def _parquet_files(table: Path) -> set[Path]:
    return set(table.glob("*/*.parquet")) | set(table.glob("*.parquet"))


def _kill_mid_write(command: list[str], env: dict, warehouse: Path, timeout: float = 600) -> None:
    """Run ``command``; once day one is fully processed, SIGKILL it as soon as a new ``sessions``
    data file appears, i.e. between writing a commit's files and committing them."""
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline, seen = time.monotonic() + timeout, None
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"the run ended before the kill point:\n{process.stdout.read().decode()[-3000:]}")
            if seen is None and (warehouse / "daily_snapshot" / "_delta_log" / f"{1:020d}.json").exists():
                seen = _parquet_files(warehouse / "sessions")
            elif seen is not None and _parquet_files(warehouse / "sessions") - seen:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                return
            time.sleep(0.01)
        pytest.fail("the kill point was never reached")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def test_a_retried_snapshot_correction_is_not_applied_twice(warehouse, spark):
    """A correction is a difference: its write carries the ``user_states`` version it was computed from,
    and Delta ignores a second write with the same version (a retry after dying before ``user_states``)."""
    from sessions_assets.tables import DAILY_SNAPSHOT

    day = date(2024, 3, 1)

    def write(on_hand: int, version: int) -> bool:
        rows = spark.createDataFrame([(day, "active", on_hand, 0, 0, 0.0, 0)], DAILY_SNAPSHOT.schema)
        return warehouse.replace_partitions(DAILY_SNAPSHOT, rows, day, day, txn=("corrections", version))

    write(5, 3)
    write(6, 3)  # the retry of version 3, computed from the already corrected table: ignored
    assert [r.users_on_hand for r in warehouse.read(DAILY_SNAPSHOT).collect()] == [5]
    write(7, 4)  # the next correction goes through
    assert [r.users_on_hand for r in warehouse.read(DAILY_SNAPSHOT).collect()] == [7]


def test_killed_run_leaves_committed_tables_and_the_next_run_repairs(tmp_path, spark, data_root, monkeypatch, capsys):
    _late_stream(data_root)
    home = _deployed_home(tmp_path)
    warehouse = data_root / "warehouse"
    _kill_mid_write(_cli(data_root, "run"), _env(data_root, home), warehouse)

    for table in sorted(p for p in warehouse.iterdir() if (p / "_delta_log").is_dir()):
        commits = sorted(int(f.stem) for f in (table / "_delta_log").glob("*.json"))
        delta = DeltaTable.forPath(spark, str(table))
        assert delta.history(1).head().version == commits[-1], table.name  # at its last committed version
        delta.toDF().count()  # and readable: uncommitted files of the killed write are not in it

    monkeypatch.setenv("DAGSTER_HOME", str(home))
    assert main(["status", "--data-root", str(data_root)]) == 0
    assert "state: out of sync" in capsys.readouterr().out
    assert main(["run", "--data-root", str(data_root)]) == 0
    printed = capsys.readouterr().out
    assert "its process is gone" in printed and "Finishing an interrupted run" in printed
    wh = Warehouse(spark, build_resources(data_root=str(data_root))["settings"])
    assert_tables_match_oracle(wh, data_root)
    assert main(["status", "--data-root", str(data_root)]) == 0
    assert "state: standard" in capsys.readouterr().out
    assert len(landing_days(wh.settings)) == 3
