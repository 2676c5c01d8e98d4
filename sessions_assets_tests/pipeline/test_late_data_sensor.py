"""The late-data sensor asks for one refresh only when the tables are behind and nothing ingests, evaluated
against a real instance and real tables; a new instance over the warehouse asks for nothing already done."""

from __future__ import annotations

from datetime import date

import dagster as dg

from sessions_assets.cli.runner import Runner
from sessions_assets.graph import planning
from sessions_assets.warehouse import pending
from sessions_assets.warehouse.storage import Storage
from sessions_assets_tests.helpers.expected import assert_tables_match_oracle
from sessions_assets_tests.helpers.landing import segment, write_day
from sessions_assets_tests.helpers.ticks import assert_the_daemon_accepts, tick

A, B = date(2024, 3, 5), date(2024, 3, 12)  # event days far apart
R = date(2024, 3, 14)  # the received day that brings them


def test_a_new_instance_over_the_warehouse_asks_for_nothing_already_done(runner, data_root):
    write_day(data_root, R, [segment("a", "u1", f"{A} 10:00", f"{R} 08:00")])
    runner.process()
    with dg.DagsterInstance.ephemeral() as fresh:
        again = Runner(fresh, runner.settings)
        assert not tick("landing_sensor", again, data_root).run_requests
        assert isinstance(tick("late_data_sensor", again, data_root), dg.SkipReason)


def test_late_data_sensor_asks_for_one_refresh_of_what_was_ingested(runner, data_root):
    write_day(
        data_root, R, [segment("a", "u1", f"{A} 10:00", f"{R} 08:00"), segment("b", "u2", f"{B} 23:50", f"{R} 08:00")]
    )
    assert isinstance(tick("late_data_sensor", runner, data_root), dg.SkipReason)  # nothing ingested yet

    runner.ingest(R)  # an ingest alone, as a UI backfill of the ingest assets runs
    request = tick("late_data_sensor", runner, data_root)
    assert isinstance(request, dg.RunRequest)
    assert_the_daemon_accepts("late_data_sensor", [request], runner.defs)
    assert request.partition_key == R.isoformat()  # the horizon; the changed days are recorded by the run
    assert request.tags[planning.RECEIVED_DAYS_TAG] == R.isoformat()

    runner.refresh(pending.backlog(Storage(str(data_root)), runner.bounds()))  # what the requested run does
    assert isinstance(tick("late_data_sensor", runner, data_root), dg.SkipReason)
    materialized = runner.instance.get_materialized_partitions(dg.AssetKey("events"))
    assert materialized == {A.isoformat(), B.isoformat(), R.isoformat()}  # exactly the days changed, and the run's
    sessions = runner.instance.get_materialized_partitions(dg.AssetKey("sessions"))
    assert sessions == {A.isoformat(), B.isoformat(), R.isoformat()}


def test_a_day_of_rejects_only_calls_for_a_refresh_that_moves_the_snapshot_horizon(runner, data_root):
    write_day(data_root, A, [segment("a", "u1", f"{A} 10:00")])
    runner.process()
    write_day(data_root, B, ["{not json"])
    runner.ingest(B)  # no accepted line: raw_events does not change, the horizon does
    due = pending.backlog(Storage(str(data_root)), runner.bounds())
    assert due is not None and isinstance(tick("late_data_sensor", runner, data_root), dg.RunRequest)
    runner.refresh(due)
    assert pending.backlog(Storage(str(data_root)), runner.bounds()) is None
    assert_tables_match_oracle(runner.resources["pipeline"].warehouse(runner.resources["spark"]), data_root)
