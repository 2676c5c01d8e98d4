"""The sensors, evaluated against a real instance and real Delta tables (no mocks).

The late-data sensor must request exactly the partitions a received day affected, and nothing when
nothing new was ingested; the landing sensor must notice new and grown received-day folders only.
"""

from __future__ import annotations

from datetime import date, timedelta

import dagster as dg

from sessions_assets.definitions import build_definitions
from sessions_assets.partitions import daily_partitions
from sessions_assets.sensors import RECEIVED_DAYS_TAG, landing_sensor, late_data_sensor
from sessions_assets_tests.landing import segment, write_day

A, B = date(2024, 3, 5), date(2024, 3, 12)  # event days far enough apart that neighbours don't touch
R = date(2024, 3, 14)  # the received day that brings them


def _days(first: date, last: date) -> set[str]:
    return {(first + timedelta(days=i)).isoformat() for i in range((last - first).days + 1)}


def _requested(run_request: dg.RunRequest) -> dict[str, set[str]]:
    subset = run_request.asset_graph_subset
    return {key.to_user_string(): set(subset.get_partitions_subset(key).get_partition_keys()) for key in subset.asset_keys}


def _assert_the_daemon_accepts(sensor: dg.SensorDefinition, result: dg.SensorResult, repository) -> None:
    """What the daemon checks before it launches anything: every requested asset is in the sensor's
    selection, and every requested partition exists."""
    selected = sensor.asset_selection.resolve(repository.asset_graph)
    for run_request in result.run_requests:
        for asset, partitions in _requested(run_request).items():
            assert dg.AssetKey(asset) in selected, f"{asset} is requested but not in {sensor.name}'s selection"
            assert partitions <= set(daily_partitions.get_partition_keys()), partitions


def test_late_data_sensor_requests_the_span_of_touched_days_and_their_neighbours(data_root, runner, resources):
    write_day(data_root, R, [
        segment("a", "u1", f"{A} 10:00", f"{R} 08:00"),
        segment("b", "u2", f"{B} 23:50", f"{R} 08:00"),
    ])  # fmt: skip
    runner.materialize("raw_events", R)
    repository = build_definitions(resources).get_repository_def()
    context = dg.build_sensor_context(instance=runner.instance, repository_def=repository)
    result = late_data_sensor(context)
    _assert_the_daemon_accepts(late_data_sensor, result, repository)
    [request] = result.run_requests
    assert _requested(request) == {
        "events": _days(A, B),
        "sessions": _days(A - timedelta(days=1), B + timedelta(days=1)),
        "daily_snapshot": _days(A - timedelta(days=1), R),
    }
    assert request.tags[RECEIVED_DAYS_TAG] == R.isoformat()

    # Nothing new ingested: the next tick, even from a fresh context holding the stored cursor, skips.
    restarted = dg.build_sensor_context(instance=runner.instance, repository_def=repository, cursor=result.cursor)
    assert isinstance(late_data_sensor(restarted), dg.SkipReason)


def test_late_data_sensor_sees_every_received_day_since_its_cursor(data_root, runner, resources):
    write_day(data_root, "2024-03-20", [segment("x", "u1", "2024-03-20 10:00")])
    write_day(data_root, "2024-03-22", [segment("y", "u1", "2024-03-01 10:00", "2024-03-22 10:00")])
    runner.materialize("raw_events", date(2024, 3, 20))
    runner.materialize("raw_events", date(2024, 3, 22))
    repository = build_definitions(resources).get_repository_def()
    result = late_data_sensor(dg.build_sensor_context(instance=runner.instance, repository_def=repository))
    _assert_the_daemon_accepts(late_data_sensor, result, repository)
    [request] = result.run_requests
    assert _requested(request)["events"] == _days(date(2024, 3, 1), date(2024, 3, 20))
    assert request.tags[RECEIVED_DAYS_TAG] == "2024-03-20,2024-03-22"


def test_landing_sensor_requests_new_and_grown_days_only(data_root, resources, runner):
    write_day(data_root, "2024-03-10", [segment("a", "u1", "2024-03-10 10:00")])
    write_day(data_root, "2024-03-11", [segment("b", "u1", "2024-03-11 10:00")])
    settings = {"settings": resources["settings"]}
    first = landing_sensor(dg.build_sensor_context(instance=runner.instance, resources=settings))
    assert sorted(r.partition_key for r in first.run_requests) == ["2024-03-10", "2024-03-11"]

    unchanged = landing_sensor(dg.build_sensor_context(instance=runner.instance, resources=settings, cursor=first.cursor))
    assert unchanged.run_requests == []

    write_day(data_root, "2024-03-11", [segment("c", "u1", "2024-03-11 11:00")], name="part-0001.jsonl")
    grown = landing_sensor(dg.build_sensor_context(instance=runner.instance, resources=settings, cursor=unchanged.cursor))
    assert [r.partition_key for r in grown.run_requests] == ["2024-03-11"]
