"""The definitions load as ``dg`` loads them, and the sensors ask for what the plan says, in a form the daemon
accepts, evaluated against a real instance with real ingests (no mocks)."""

from __future__ import annotations

import json
from datetime import date

import dagster as dg

from sessions_assets.defs import planning
from sessions_assets.defs.partitions import daily
from sessions_assets.defs.resources import PipelineResource
from sessions_assets.defs.sensors import landing_sensor, late_data_sensor
from sessions_assets_tests.landing import segment, write_day

A, B = date(2024, 3, 5), date(2024, 3, 12)  # event days far apart
R = date(2024, 3, 14)  # the received day that brings them


def assert_the_daemon_accepts(sensor: dg.SensorDefinition, requests: list[dg.RunRequest], defs: dg.Definitions) -> None:
    """What the daemon checks before it launches: each request targets the sensor's job, names a partition
    that exists, and selects nothing outside the job."""
    [target] = sensor.targets
    job = defs.resolve_job_def(target.job_name)
    keys = set(daily.get_partition_keys())
    for request in requests:
        assert request.job_name in (None, target.job_name)
        assert request.partition_key in keys, request.partition_key
        assert set(request.asset_selection or []) <= set(job.asset_layer.executable_asset_keys)


def test_the_definitions_load_from_the_defs_folder():
    from sessions_assets.definitions import defs

    loaded = defs()
    assert {k.to_user_string() for k in loaded.resolve_asset_graph().get_all_asset_keys()} == {
        "raw_events", "rejected_events", "partition_map", "events", "sessions", "daily_snapshot"}  # fmt: skip
    assert {s.name for s in loaded.sensors} == {"landing_sensor", "late_data_sensor"}
    assert {s.name for s in loaded.schedules} == {"daily_checks", "weekly_maintenance"}
    assert {j.name for j in loaded.jobs} >= {"ingest_job", "refresh_job", "table_maintenance"}
    loaded.get_repository_def()  # resolves every job, schedule and sensor


def test_landing_sensor_asks_for_new_and_changed_days_once(runner, data_root):
    pipeline = PipelineResource(data_root=str(data_root))
    write_day(data_root, "2024-03-10", [segment("a", "u1", "2024-03-10 10:00")])
    write_day(data_root, "2024-03-11", [segment("b", "u1", "2024-03-11 10:00")])
    (data_root / "landing" / "received_date=2024-13-45").mkdir()
    (data_root / "landing" / "notes").mkdir()
    write_day(data_root, "2019-06-01", [segment("old", "u1", "2019-06-01 10:00")])  # before SESSIONS_START_DATE
    write_day(data_root, "2099-01-01", [segment("new", "u1", "2099-01-01 10:00")])  # past today's partitions
    context = dg.build_sensor_context(instance=runner.instance, resources={"pipeline": pipeline})
    first = landing_sensor(context)
    assert [r.partition_key for r in first.run_requests] == ["2024-03-10", "2024-03-11"]
    assert_the_daemon_accepts(landing_sensor, first.run_requests, runner.defs)
    reported = {"received_date=2024-13-45", "notes", "received_date=2019-06-01", "received_date=2099-01-01"}
    assert set(json.loads(first.cursor)) == reported  # each reported once, none blocking the others

    runner.ingest(date(2024, 3, 10))  # what the requested run does
    later = landing_sensor(dg.build_sensor_context(instance=runner.instance, resources={"pipeline": pipeline},
                                                   cursor=first.cursor))  # fmt: skip
    assert [r.partition_key for r in later.run_requests] == ["2024-03-11"]  # the same run key: not launched twice

    write_day(data_root, "2024-03-10", [segment("c", "u1", "2024-03-10 11:00")], name="part-0001.jsonl")
    grown = landing_sensor(dg.build_sensor_context(instance=runner.instance, resources={"pipeline": pipeline}))
    assert [r.partition_key for r in grown.run_requests] == ["2024-03-10", "2024-03-11"]
    assert grown.run_requests[0].run_key != first.run_requests[0].run_key


def test_late_data_sensor_asks_for_one_refresh_of_what_was_ingested(runner, data_root):
    write_day(
        data_root, R, [segment("a", "u1", f"{A} 10:00", f"{R} 08:00"), segment("b", "u2", f"{B} 23:50", f"{R} 08:00")]
    )
    context = lambda: dg.build_sensor_context(instance=runner.instance, repository_def=runner.defs.get_repository_def())  # noqa: E731
    assert isinstance(late_data_sensor(context()), dg.SkipReason)  # nothing ingested yet

    runner.ingest(R)
    request = late_data_sensor(context())
    assert isinstance(request, dg.RunRequest)
    assert_the_daemon_accepts(late_data_sensor, [request], runner.defs)
    assert request.partition_key == R.isoformat()  # the horizon; the changed days are recorded by the run
    assert request.tags[planning.RECEIVED_DAYS] == R.isoformat()

    due = planning.refresh_due(runner.instance)
    runner.refresh(due)  # what the requested run does
    assert isinstance(late_data_sensor(context()), dg.SkipReason)
    materialized = runner.instance.get_materialized_partitions(dg.AssetKey("events"))
    assert materialized == {A.isoformat(), B.isoformat(), R.isoformat()}  # exactly the days changed, and the run's
    sessions = runner.instance.get_materialized_partitions(dg.AssetKey("sessions"))
    assert sessions == {A.isoformat(), B.isoformat(), R.isoformat()}
