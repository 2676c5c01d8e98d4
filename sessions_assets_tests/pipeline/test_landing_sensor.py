"""The definitions load as ``dg`` loads them, and the landing sensor asks for what the plan says, in a form the
daemon accepts, evaluated against a real instance and real tables (no mocks): consecutive days in one run, a
changed day again, a day whose run failed only after its backoff."""

from __future__ import annotations

import json
import time
from datetime import date

import pytest

from sessions_assets.cli.runner import RunFailed
from sessions_assets.graph import planning
from sessions_assets.warehouse import pending
from sessions_assets.warehouse.storage import Storage
from sessions_assets_tests.helpers.landing import segment, write_day
from sessions_assets_tests.helpers.ticks import assert_the_daemon_accepts, days_requested, tick

A, B = date(2024, 3, 5), date(2024, 3, 12)  # event days far apart
R = date(2024, 3, 14)  # the received day that brings them


def test_the_definitions_load_from_the_defs_folder(runner):
    from sessions_assets.definitions import defs

    loaded = defs()
    assert {k.to_user_string() for k in loaded.resolve_asset_graph().get_all_asset_keys()} == {
        "raw_events",
        "rejected_events",
        "partition_map",
        "events",
        "sessions",
        "users",
        "daily_snapshot",
    }
    assert {s.name for s in loaded.sensors} == {"landing_sensor", "late_data_sensor", "forget_sensor"}
    assert {s.name for s in loaded.schedules} == {"daily_checks", "weekly_maintenance"}
    assert {j.name for j in loaded.jobs} == {
        "ingest_job",
        "process_job",
        "refresh_job",
        "table_maintenance",
        "forget_job",
    }
    turns = loaded.resolve_job_def("refresh_job").tags["sessions/refresh"]
    assert loaded.resolve_job_def("forget_job").tags["sessions/refresh"] == turns  # it takes turns with refreshes
    loaded.get_repository_def()  # resolves every job, schedule and sensor
    # The in-process runner runs the code location's instance, built from the same settings: the same jobs, their
    # resources under the same keys.
    assert {j.name for j in runner.defs.jobs} == {j.name for j in loaded.jobs}
    assert set(runner.resources) == set(loaded.resources) == {"spark", "pipeline"}
    for job in runner.defs.resolve_all_job_defs():
        assert set(job.resource_defs) - {"io_manager"} <= set(runner.resources), job.name


def test_landing_sensor_asks_for_consecutive_days_in_one_run_and_for_changed_days_again(runner, data_root):
    write_day(data_root, "2024-03-10", [segment("a", "u1", "2024-03-10 10:00")])
    write_day(data_root, "2024-03-11", [segment("b", "u1", "2024-03-11 10:00")])
    write_day(data_root, "2024-03-13", [segment("c", "u1", "2024-03-13 10:00")])
    (data_root / "landing" / "received_date=2024-13-45").mkdir()
    (data_root / "landing" / "notes").mkdir()
    write_day(data_root, "2019-06-01", [segment("old", "u1", "2019-06-01 10:00")])  # before SESSIONS_START_DATE
    write_day(data_root, "2099-01-01", [segment("new", "u1", "2099-01-01 10:00")])  # past today's partitions
    first = tick("landing_sensor", runner, data_root)
    assert [days_requested(r) for r in first.run_requests] == [("2024-03-10", "2024-03-11"), ("2024-03-13",) * 2]
    assert_the_daemon_accepts("landing_sensor", first.run_requests, runner.defs)
    reported = {"received_date=2024-13-45", "notes", "received_date=2019-06-01", "received_date=2099-01-01"}
    assert set(json.loads(first.cursor)["reported"]) == reported  # each reported once, none blocking the others

    runner.ingest_and_refresh(date(2024, 3, 10), date(2024, 3, 11))  # what the first requested run does
    later = tick("landing_sensor", runner, data_root, first.cursor)
    # The 13th's run was never launched here; under the daemon it would be in flight, and not asked for again.
    assert [days_requested(r) for r in later.run_requests] == [("2024-03-13",) * 2]

    write_day(data_root, "2024-03-10", [segment("d", "u1", "2024-03-10 11:00")], name="part-0001.jsonl")
    grown = tick("landing_sensor", runner, data_root)
    assert [days_requested(r) for r in grown.run_requests] == [("2024-03-10",) * 2, ("2024-03-13",) * 2]


def test_a_day_whose_run_failed_is_asked_for_again_after_its_backoff(runner, data_root):
    write_day(data_root, R, [segment("a", "u1", f"{R} 10:00")])
    blocker = data_root / "warehouse" / "raw_events"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a table")  # the store refuses the table: every attempt fails
    with pytest.raises(RunFailed) as failed:
        runner.ingest_and_refresh(R)
    assert len(str(failed.value).splitlines()) == 1  # what failed, in one line

    retrying = tick("landing_sensor", runner, data_root)
    assert not retrying.run_requests  # backing off
    attempts = planning.History.read(runner.instance, runner.names).ingest(R)
    assert attempts.failures == 1 and attempts.error and 0 < attempts.waiting(time.time()) <= planning.BACKOFF_SECONDS
    later = planning.ready(
        pending.arrivals(Storage(str(data_root)), runner.bounds()),
        planning.History.read(runner.instance, runner.names),
        now=time.time() + planning.BACKOFF_SECONDS + 1,
    )
    [(first, last, key)] = later.requests()
    assert (first, last) == (R, R) and key.endswith(":" + attempts.failed_run)  # a new key: the daemon launches it

    blocker.unlink()
    runner.ingest_and_refresh(R)  # what that run does, now that the store answers
    assert planning.History.read(runner.instance, runner.names).ingest(R).failures == 0
    assert not tick("landing_sensor", runner, data_root).run_requests
