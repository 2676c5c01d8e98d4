"""The definitions load as ``dg`` loads them, and the sensors ask for what the plan says, in a form the daemon
accepts, evaluated against a real instance and real tables (no mocks): consecutive days in one run, a day
whose run failed only after its backoff, a refresh only when the tables are behind and nothing ingests."""

from __future__ import annotations

import json
import time
from datetime import date

import dagster as dg
import pytest

from sessions_assets.cli.runner import RunFailed, Runner
from sessions_assets.defs import planning
from sessions_assets.defs.partitions import daily
from sessions_assets.defs.resources import PipelineResource
from sessions_assets.defs.sensors import landing_sensor, late_data_sensor
from sessions_assets.warehouse.storage import Storage
from sessions_assets_tests.expected import assert_tables_match_oracle
from sessions_assets_tests.landing import segment, write_day

A, B = date(2024, 3, 5), date(2024, 3, 12)  # event days far apart
R = date(2024, 3, 14)  # the received day that brings them


def assert_the_daemon_accepts(sensor: dg.SensorDefinition, requests: list[dg.RunRequest], defs: dg.Definitions) -> None:
    """What the daemon checks before it launches: each request targets the sensor's job, names partitions
    that exist (one, or a range by tags), and selects nothing outside the job."""
    [target] = sensor.targets
    job = defs.resolve_job_def(target.job_name)
    keys = set(daily.get_partition_keys())
    for request in requests:
        assert request.job_name in (None, target.job_name)
        named = [request.partition_key] if request.partition_key else [
            request.tags[planning.RANGE_START], request.tags[planning.RANGE_END]]  # fmt: skip
        assert set(named) <= keys, named
        assert set(request.asset_selection or []) <= set(job.asset_layer.executable_asset_keys)


def days_requested(request: dg.RunRequest) -> tuple[str, str]:
    if request.partition_key:
        return request.partition_key, request.partition_key
    return request.tags[planning.RANGE_START], request.tags[planning.RANGE_END]


def tick(sensor, runner: Runner, data_root, cursor: str | None = None):
    context = dg.build_sensor_context(
        instance=runner.instance, resources={"pipeline": PipelineResource(data_root=str(data_root))}, cursor=cursor
    )
    return sensor(context)


def test_the_definitions_load_from_the_defs_folder():
    from sessions_assets.definitions import defs

    loaded = defs()
    assert {k.to_user_string() for k in loaded.resolve_asset_graph().get_all_asset_keys()} == {
        "raw_events", "rejected_events", "partition_map", "events", "sessions", "daily_snapshot"}  # fmt: skip
    assert {s.name for s in loaded.sensors} == {"landing_sensor", "late_data_sensor"}
    assert {s.name for s in loaded.schedules} == {"daily_checks", "weekly_maintenance"}
    assert {j.name for j in loaded.jobs} == {"ingest_job", "process_job", "refresh_job", "table_maintenance"}
    loaded.get_repository_def()  # resolves every job, schedule and sensor


def test_landing_sensor_asks_for_consecutive_days_in_one_run_and_for_changed_days_again(runner, data_root):
    write_day(data_root, "2024-03-10", [segment("a", "u1", "2024-03-10 10:00")])
    write_day(data_root, "2024-03-11", [segment("b", "u1", "2024-03-11 10:00")])
    write_day(data_root, "2024-03-13", [segment("c", "u1", "2024-03-13 10:00")])
    (data_root / "landing" / "received_date=2024-13-45").mkdir()
    (data_root / "landing" / "notes").mkdir()
    write_day(data_root, "2019-06-01", [segment("old", "u1", "2019-06-01 10:00")])  # before SESSIONS_START_DATE
    write_day(data_root, "2099-01-01", [segment("new", "u1", "2099-01-01 10:00")])  # past today's partitions
    first = tick(landing_sensor, runner, data_root)
    assert [days_requested(r) for r in first.run_requests] == [("2024-03-10", "2024-03-11"), ("2024-03-13",) * 2]
    assert_the_daemon_accepts(landing_sensor, first.run_requests, runner.defs)
    reported = {"received_date=2024-13-45", "notes", "received_date=2019-06-01", "received_date=2099-01-01"}
    assert set(json.loads(first.cursor)) == reported  # each reported once, none blocking the others

    runner.ingest_and_refresh(date(2024, 3, 10), date(2024, 3, 11))  # what the first requested run does
    later = tick(landing_sensor, runner, data_root, first.cursor)
    # The 13th's run was never launched here; under the daemon it would be in flight, and not asked for again.
    assert [days_requested(r) for r in later.run_requests] == [("2024-03-13",) * 2]

    write_day(data_root, "2024-03-10", [segment("d", "u1", "2024-03-10 11:00")], name="part-0001.jsonl")
    grown = tick(landing_sensor, runner, data_root)
    assert [days_requested(r) for r in grown.run_requests] == [("2024-03-10",) * 2, ("2024-03-13",) * 2]


def test_a_new_instance_over_the_warehouse_asks_for_nothing_already_done(runner, data_root):
    write_day(data_root, R, [segment("a", "u1", f"{A} 10:00", f"{R} 08:00")])
    runner.process()
    with dg.instance_for_test() as fresh:
        again = Runner(fresh, runner.defs.resources)
        assert not tick(landing_sensor, again, data_root).run_requests
        assert isinstance(tick(late_data_sensor, again, data_root), dg.SkipReason)


def test_a_day_whose_run_failed_is_asked_for_again_after_its_backoff(runner, data_root):
    write_day(data_root, R, [segment("a", "u1", f"{R} 10:00")])
    blocker = data_root / "warehouse" / "raw_events"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a table")  # the store refuses the table: every attempt fails
    with pytest.raises(RunFailed) as failed:
        runner.ingest_and_refresh(R)
    assert len(str(failed.value).splitlines()) == 1  # what failed, in one line

    retrying = tick(landing_sensor, runner, data_root)
    assert not retrying.run_requests  # backing off
    attempts = planning.History.read(runner.instance).ingest(R)
    assert attempts.failures == 1 and attempts.error and 0 < attempts.waiting(time.time()) <= planning.BACKOFF_SECONDS
    later = planning.ready(planning.landing(Storage(str(data_root))), planning.History.read(runner.instance),
                           now=time.time() + planning.BACKOFF_SECONDS + 1)  # fmt: skip
    [(first, last, key)] = later.requests()
    assert (first, last) == (R, R) and key.endswith(":" + attempts.failed_run)  # a new key: the daemon launches it

    blocker.unlink()
    runner.ingest_and_refresh(R)  # what that run does, now that the store answers
    assert planning.History.read(runner.instance).ingest(R).failures == 0
    assert not tick(landing_sensor, runner, data_root).run_requests


def test_late_data_sensor_asks_for_one_refresh_of_what_was_ingested(runner, data_root):
    write_day(
        data_root, R, [segment("a", "u1", f"{A} 10:00", f"{R} 08:00"), segment("b", "u2", f"{B} 23:50", f"{R} 08:00")]
    )
    assert isinstance(tick(late_data_sensor, runner, data_root), dg.SkipReason)  # nothing ingested yet

    runner.ingest(R)  # an ingest alone, as a UI backfill of the landing assets runs
    request = tick(late_data_sensor, runner, data_root)
    assert isinstance(request, dg.RunRequest)
    assert_the_daemon_accepts(late_data_sensor, [request], runner.defs)
    assert request.partition_key == R.isoformat()  # the horizon; the changed days are recorded by the run
    assert request.tags[planning.RECEIVED_DAYS_TAG] == R.isoformat()

    runner.refresh(planning.backlog(Storage(str(data_root))))  # what the requested run does
    assert isinstance(tick(late_data_sensor, runner, data_root), dg.SkipReason)
    materialized = runner.instance.get_materialized_partitions(dg.AssetKey("events"))
    assert materialized == {A.isoformat(), B.isoformat(), R.isoformat()}  # exactly the days changed, and the run's
    sessions = runner.instance.get_materialized_partitions(dg.AssetKey("sessions"))
    assert sessions == {A.isoformat(), B.isoformat(), R.isoformat()}


def test_a_day_of_rejects_only_calls_for_a_refresh_that_moves_the_snapshot_horizon(runner, data_root):
    write_day(data_root, A, [segment("a", "u1", f"{A} 10:00")])
    runner.process()
    write_day(data_root, B, ["{not json"])
    runner.ingest(B)  # no accepted line: raw_events does not change, the horizon does
    due = planning.backlog(Storage(str(data_root)))
    assert due is not None and isinstance(tick(late_data_sensor, runner, data_root), dg.RunRequest)
    runner.refresh(due)
    assert planning.backlog(Storage(str(data_root))) is None
    assert_tables_match_oracle(runner.defs.resources["pipeline"].warehouse(runner.defs.resources["spark"]), data_root)
