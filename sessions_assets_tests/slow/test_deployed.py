"""The deployed path: ``dg dev`` with its daemon, sensors switched on, days dropped into the landing zone as
Segment's S3 destination writes them (``segment-logs/<source>/<day in ms>/``, three sources), in a business's time
zone (Los Angeles): the received days are UTC days, the derived assets' partitions its local days.

Nothing here runs the project's jobs itself: the daemon evaluates the sensors (with every check it makes
on their requests) and launches the runs in their own processes, attached to the tests' Spark Connect server,
and a partition backfill is launched through the webserver's GraphQL API as the UI launches it. The instance keeps its runs, events and sensor
state in PostgreSQL, as a deployment's does. The tables must then equal the oracle's full recompute, no sensor
tick, run or backfill may have failed, and the CLI, on the same instance, must find nothing left to do.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml

from sessions_assets.cli.main import main
from sessions_assets.graph import planning
from sessions_assets.warehouse.delta import DeltaLog, Warehouse
from sessions_assets.warehouse.spark import TOKEN_VARIABLE
from sessions_assets.warehouse.storage import Storage
from sessions_assets.warehouse.tables import EVENTS, PARTITION_MAP, RAW_EVENTS, RECEIVED_DAYS, REJECTED_EVENTS
from sessions_assets_tests.helpers.deployed import FAILED_RUNS, IN_FLIGHT_RUNS, PROJECT, SENSORS, DagsterDev, tag
from sessions_assets_tests.helpers.expected import assert_tables_match_oracle
from sessions_assets_tests.slow.commands import cli

pytestmark = pytest.mark.slow
TIMEOUT = 600  # per wait; a refresh under dg dev waits for its sensor tick and a Spark start
INGEST_ASSETS = ["raw_events", "rejected_events", "partition_map"]
ZONE = "America/Los_Angeles"


def test_sensors_and_a_ui_backfill_under_the_daemon_build_exact_tables(tmp_path, spark, postgres, connect_server):
    """Also a fresh machine's first days: a new home (no Ivy cache) and two days dropped at once; no run may
    resolve a package. Then days whose run loses its Spark Connect server in the middle of its refresh: the server
    is started again at once, as a supervisor would, and the days are refreshed with no one acting."""
    staging, data_root, home = tmp_path / "staging", tmp_path / "data", tmp_path / "dagster_home"
    user_home = tmp_path / "home"
    user_home.mkdir()
    generate = ["generate", "--data-root", str(staging), "--days", "5", "--users", "15", "--seed", "5"]
    assert main([*generate, "--layout", "segment"]) == 0
    by_day: dict[str, list[Path]] = {}  # a received day: its folder in each source's folder
    for folder in Storage(str(staging)).landing_folders():
        by_day.setdefault(folder.day.isoformat(), []).append(Path(folder.uri.removeprefix("file:")))
    days = sorted(by_day)
    (data_root / "landing").mkdir(parents=True)
    home.mkdir()
    shutil.copy(PROJECT / "dagster.yaml", home / "dagster.yaml")
    with open(home / "dagster.yaml", "a") as config:
        config.write("\n" + yaml.safe_dump(postgres.instance_storage(), sort_keys=False))
    venv = Path(sys.executable).parent.parent
    env = {
        "SESSIONS_DATA_ROOT": str(data_root),
        "SESSIONS_TIME_ZONE": ZONE,
        "TZ": "UTC",
        "VIRTUAL_ENV": str(venv),
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(user_home),
        "SPARK_REMOTE": connect_server.running()["url"],  # a server of the test's own: it is killed below
        TOKEN_VARIABLE: connect_server.token(),  # kept across its restart
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

        # Two received days dropped in at once (every source's folders of both, moved in in one rename): one run
        # ingests both and refreshes what they touched.
        _drop(by_day, days[:2], tmp_path / "gathered" / "segment-logs")
        shutil.move(tmp_path / "gathered" / "segment-logs", data_root / "landing" / "segment-logs")
        dev.wait_until_settled(storage, timeout=TIMEOUT)
        [first] = dev.runs()
        assert first["jobName"] == "process_job" and tag(first, "dagster/sensor_name") == "landing_sensor"
        # It ingests the two received days and is recorded under their local days, a day earlier in Los Angeles.
        assert tag(first, planning.INGEST_TAG) == f"{days[0]}..{days[1]}"
        assert (tag(first, planning.RANGE_START), tag(first, planning.RANGE_END)) == (
            _before(days[0]),
            _before(days[1]),
        )

        # A user re-ingests both days from the UI: a partition backfill of the ingest assets, one run, which finds
        # no new or changed file and writes nothing; no refresh follows.
        landing = (RAW_EVENTS, REJECTED_EVENTS, PARTITION_MAP, RECEIVED_DAYS)
        written = {t.name: DeltaLog(storage, t).version() for t in landing}
        dev.launch_backfill(INGEST_ASSETS, days[:2])  # requested at once: not settled until the daemon ends it
        dev.wait_until_settled(storage, timeout=TIMEOUT)
        [backfilled] = [r for r in dev.runs() if tag(r, "dagster/backfill")]
        assert backfilled["status"] == "SUCCESS", backfilled
        assert {t.name: DeltaLog(storage, t).version() for t in landing} == written
        assert not [r for r in dev.runs() if r["jobName"] == "refresh_job"]

        # The Spark Connect server dies while the next days are refreshed: the run fails in one line, the server is
        # back seconds later, and the daemon's retry completes the days with no one acting.
        events, port = DeltaLog(storage, EVENTS), int(env["SPARK_REMOTE"].rsplit(":", 1)[1])
        before = events.version()
        _drop(by_day, days[2:], data_root / "landing" / "segment-logs")  # late events reach the first days
        deadline = time.monotonic() + TIMEOUT
        while events.version() == before:  # their run's refresh has written events
            assert time.monotonic() < deadline, f"no refresh in time: {dev.runs()}\n{dev.tail()}"
            time.sleep(0.2)
        assert dev.runs(IN_FLIGHT_RUNS), "the run ended before its server could be killed"
        os.killpg(connect_server.running()["pid"], signal.SIGKILL)
        while connect_server.running():  # gone, as a supervisor would see it, before it is started again
            time.sleep(0.1)
        connect_server.start(port=port)
        dev.wait_until_settled(storage, timeout=TIMEOUT, failures_allowed=True)
        # The run that lost its server failed, and so did any retry the daemon launched before the server
        # listened again, or a second run of the days in flight with it: each says so in one line.
        failed = dev.runs(FAILED_RUNS)
        assert failed, "no run failed: the server was killed after the refresh"
        step_failure = dg.DagsterEventType.STEP_FAILURE
        for run in failed:
            assert run["jobName"] == "process_job", run
            [record] = instance.get_records_for_run(run["runId"], of_type=step_failure, limit=1).records
            said = record.event_log_entry.dagster_event.event_specific_data.error.message
            # Down, or (back before the run's retries ran out) without the run's session.
            expected = f"server at {env['SPARK_REMOTE']} (does not answer|no longer holds this run's session)"
            assert re.search(expected, said), (run, said)
        assert all(b["status"] == "COMPLETED_SUCCESS" for b in dev.backfills()), dev.backfills()
        # The partitions the late events touched are materialized, the days between them not.
        events = instance.get_materialized_partitions(dg.AssetKey("events"))
        assert events and events < set(_days_between(min(events), max(events)))
        oracle = assert_tables_match_oracle(Warehouse(spark, storage), data_root, time_zone=ZONE)
        # The first run's (it was not killed) are local days: every one its received days' events fall on.
        first_days = {e["event_date"].isoformat() for e in oracle["events"] if e["received_date"] in days[:2]}
        assert first_days <= events, first_days - events

        # A user backfills two local days of sessions from the UI: one run, which recomputes those days.
        local = sorted({s["session_date"].isoformat() for s in oracle["sessions"]})[-2:]
        dev.launch_backfill(["sessions"], local)
        dev.wait_until_settled(storage, timeout=TIMEOUT, failures_allowed=True)
        [rerun] = [
            r for r in dev.runs() if tag(r, "dagster/backfill") and r["assetSelection"] == [{"path": ["sessions"]}]
        ]
        assert rerun["status"] == "SUCCESS" and (tag(rerun, planning.RANGE_START), tag(rerun, planning.RANGE_END)) == (
            local[0],
            local[1],
        )
        records = instance.get_records_for_run(rerun["runId"], of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
        said = [r.event_log_entry.asset_materialization.metadata for r in records.records]
        assert {m["refresh"].value for m in said if "refresh" in m} == {"repaired"}

    assert_tables_match_oracle(Warehouse(spark, storage), data_root, time_zone=ZONE)
    # No run resolved a package: the jars came from disk, and no Ivy cache appeared in the new home.
    assert not list(user_home.glob(".ivy2*")), list(user_home.iterdir())
    assert ":: resolution report ::" not in dev.tail(10**9)

    # The CLI on the same instance sees what the daemon did: nothing is due.
    on_the_instance = {**env, "DAGSTER_HOME": str(home)}
    status = cli("status", "--data-root", str(data_root), cwd=home, env=on_the_instance)
    assert "received days to ingest: none" in status and "refresh due: no" in status, status
    assert "Nothing to do" in cli("run", "--data-root", str(data_root), cwd=home, env=on_the_instance)


def _drop(by_day: dict[str, list[Path]], days: list[str], into: Path) -> None:
    """Move the days' folders into ``into`` (a ``segment-logs`` folder), each under its source."""
    for day in days:
        for folder in by_day[day]:
            (into / folder.parent.name).mkdir(parents=True, exist_ok=True)
            shutil.move(folder, into / folder.parent.name / folder.name)


def _before(day: str) -> str:
    from datetime import date, timedelta

    return (date.fromisoformat(day) - timedelta(days=1)).isoformat()


def _days_between(first: str, last: str) -> list[str]:
    from datetime import date, timedelta

    a, b = date.fromisoformat(first), date.fromisoformat(last)
    return [(a + timedelta(days=i)).isoformat() for i in range((b - a).days + 1)]
