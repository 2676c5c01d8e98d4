"""The seed's late-event cases, run through the real pipeline (Dagster runs, Spark, Delta).

Every scenario is one user. All users share one landing zone: the on-time events arrive on their own
day, the late ones days later, and the received days are processed in order like the daily sensor
would. Each test then reads that user's rows of the ``sessions`` table, in every partition.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from sessions_assets.config import PipelineSettings
from sessions_assets_tests.landing import segment, ts, write_by_received_day

D = "2024-03-11"  # the seed's 2019-10-23
LATE = "2024-03-16 03:00"  # when the late events are received
CRASHED = "2024-03-12"  # this received day's sessions step dies once after its MERGE and is run again


def on_time(user: str, *times: str) -> list[str]:
    return [segment(f"{user}-{t}", user, t) for t in times]


def late(user: str, *times: str, received: str = LATE) -> list[str]:
    return [segment(f"{user}-late-{t}", user, t, received) for t in times]


SEED_DAY = [f"{D} 09:21", f"{D} 09:25", f"{D} 09:30", f"{D} 10:05", f"{D} 10:23", f"{D} 13:25", f"{D} 13:45", f"{D} 14:10"]
BOT_START = ts(f"{D} 00:00")
BOT_TIMES = [(BOT_START + timedelta(minutes=10 * i)).strftime("%Y-%m-%d %H:%M") for i in range(6 * 50)]

SCENARIOS = {
    "inside": on_time("inside", *SEED_DAY) + late("inside", f"{D} 09:23"),
    "merge": on_time("merge", *SEED_DAY) + late("merge", f"{D} 09:45"),
    "between": on_time("between", *SEED_DAY) + late("between", f"{D} 11:15"),
    "start_of_day": on_time("start_of_day", "2024-03-10 23:50", "2024-03-10 23:59")
    + late("start_of_day", f"{D} 00:01"),
    "end_of_day": on_time("end_of_day", "2024-03-12 00:01", "2024-03-12 00:20")
    + late("end_of_day", f"{D} 23:59"),
    "three": on_time("three", f"{D} 08:00", f"{D} 09:00", f"{D} 10:00")
    + late("three", f"{D} 08:30", f"{D} 09:30"),
    # A bot active for 50 hours, then an event it sent 15 minutes before its first one arrives late:
    # the 24 h cuts of the whole chain move, across three session days.
    "bot": on_time("bot", *BOT_TIMES) + late("bot", "2024-03-10 23:45"),
    # The same message delivered again two days later: it must be counted once.
    "duplicate": on_time("duplicate", f"{D} 09:00", f"{D} 09:10")
    + [segment(f"duplicate-{D} 09:10", "duplicate", f"{D} 09:10", "2024-03-13 08:00")],
}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory, spark):
    import dagster as dg

    from sessions_assets.assets import ALL_ASSETS
    from sessions_assets.checks import SESSION_CHECKS
    from sessions_assets.definitions import build_resources
    from sessions_assets.ingest import landing_days
    from sessions_assets.runner import Runner
    from sessions_assets.tables import EVENTS, SESSIONS

    root = tmp_path_factory.mktemp("late") / "data"
    write_by_received_day(root, [line for lines in SCENARIOS.values() for line in lines])
    resources = build_resources(data_root=str(root), master="local[2]", shuffle_partitions=2, ui=False)
    # Days compacted as soon as a run leaves two files in them: the scenarios run through compactions.
    resources["settings"] = PipelineSettings(data_root=str(root), compact_min_files=2)
    with dg.instance_for_test() as instance:
        runner = Runner(instance, resources)
        late_run, crash_committed = {}, False
        for received_day in landing_days(resources["settings"]):
            if received_day.isoformat() == CRASHED:
                crash_committed = _process_dying_after_the_sessions_merge(runner, received_day)
            runner.process(received_day)
            if received_day.isoformat() == LATE[:10]:
                record = instance.fetch_materializations(dg.AssetKey("sessions"), limit=1).records[0]
                late_run = {k: v.value for k, v in record.asset_materialization.metadata.items()}
        rows = runner.warehouse.read(SESSIONS).collect()
        layout = {table.name: _files_and_compactions(runner.warehouse, table) for table in (EVENTS, SESSIONS)}
        checks = dg.materialize(
            [*ALL_ASSETS, *SESSION_CHECKS],
            selection=dg.AssetSelection.checks(*SESSION_CHECKS),
            instance=instance,
            resources=resources,
        ).get_asset_check_evaluations()
    by_user: dict[str, list[tuple]] = {}
    for r in sorted(rows, key=lambda r: (r.user_key, r.session_start)):
        by_user.setdefault(r.user_key, []).append(
            (r.session_date.isoformat(), _hm(r.session_start), _hm(r.session_end), r.num_events, r.ended_by_cap)
        )
    return by_user, checks, late_run, crash_committed, layout


def _files_and_compactions(wh, table) -> tuple[Counter, int]:
    """Files per partition day, and how many ``OPTIMIZE`` commits the table has."""
    return wh.files_per_day(table), wh.delta(table).history().where("operation = 'OPTIMIZE'").count()


def _process_dying_after_the_sessions_merge(runner, received_day) -> bool:
    """Process a day whose ``sessions`` step dies between its MERGE and its ledger write; whether the
    MERGE had committed."""
    from sessions_assets import ledger
    from sessions_assets.tables import SESSIONS

    record = ledger.record

    def dies(wh, consumer, *args, **kwargs):
        if consumer == "sessions":
            raise RuntimeError("killed between the sessions MERGE and its ledger write")
        return record(wh, consumer, *args, **kwargs)

    before = runner.warehouse.version(SESSIONS)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ledger, "record", dies)
        with pytest.raises(Exception, match="killed between"):
            runner.process(received_day)
    return runner.warehouse.version(SESSIONS) == before + 1


@pytest.fixture(scope="module")
def sessions_by_user(pipeline):
    return pipeline[0]


def test_late_events_extend_stored_sessions_and_only_the_bot_reads_its_events(pipeline):
    # Six users' late events join stored sessions by their start, end and count alone; the bot's chain
    # is longer than the 24 h cap, so its cuts must be recomputed from its events.
    late_run = pipeline[2]
    assert (late_run["users_extended_without_events"], late_run["users_recomputed"]) == (6, 1)


def _hm(moment) -> str:
    return moment.strftime("%m-%d %H:%M")


def test_a_sessions_run_that_dies_before_its_ledger_write_adds_no_event_twice(pipeline, sessions_by_user):
    # Received 2024-03-12's run committed end_of_day's first session, from its two new events, then died;
    # the commit's mark makes the retry recompute those events instead of adding them again.
    assert pipeline[3]
    assert sessions_by_user["end_of_day"] == [(D, "03-11 23:59", "03-12 00:20", 3, False)]


def test_late_event_inside_a_session_only_bumps_its_count(sessions_by_user):
    assert sessions_by_user["inside"] == [
        (D, "03-11 09:21", "03-11 09:30", 4, False),
        (D, "03-11 10:05", "03-11 10:23", 2, False),
        (D, "03-11 13:25", "03-11 14:10", 3, False),
    ]


def test_late_event_merges_two_sessions(sessions_by_user):
    assert sessions_by_user["merge"] == [
        (D, "03-11 09:21", "03-11 10:23", 6, False),
        (D, "03-11 13:25", "03-11 14:10", 3, False),
    ]


def test_late_event_between_sessions_starts_a_new_one(sessions_by_user):
    assert sessions_by_user["between"] == [
        (D, "03-11 09:21", "03-11 09:30", 3, False),
        (D, "03-11 10:05", "03-11 10:23", 2, False),
        (D, "03-11 11:15", "03-11 11:15", 1, False),
        (D, "03-11 13:25", "03-11 14:10", 3, False),
    ]


def test_late_event_at_start_of_day_joins_yesterdays_session(sessions_by_user):
    assert sessions_by_user["start_of_day"] == [("2024-03-10", "03-10 23:50", "03-11 00:01", 3, False)]


def test_late_event_at_end_of_day_pulls_tomorrows_session_back(sessions_by_user):
    assert sessions_by_user["end_of_day"] == [(D, "03-11 23:59", "03-12 00:20", 3, False)]


def test_late_events_of_one_arrival_merge_three_sessions(sessions_by_user):
    # One event can only bridge the gaps to its two neighbours; one late batch can join any number.
    assert sessions_by_user["three"] == [(D, "03-11 08:00", "03-11 10:00", 5, False)]


def test_late_event_before_a_bot_chain_moves_every_24h_cut(sessions_by_user):
    assert sessions_by_user["bot"] == [
        ("2024-03-10", "03-10 23:45", "03-11 23:40", 144, True),  # 23:45 + 24 h = 23:45: next event 23:50 > cap
        (D, "03-11 23:50", "03-12 23:50", 145, True),
        ("2024-03-13", "03-13 00:00", "03-13 01:50", 12, False),
    ]
    assert sum(s[3] for s in sessions_by_user["bot"]) == len(BOT_TIMES) + 1


def test_redelivered_duplicate_does_not_change_counts(sessions_by_user):
    assert sessions_by_user["duplicate"] == [(D, "03-11 09:00", "03-11 09:10", 2, False)]


def test_no_scenario_leaves_stray_sessions(sessions_by_user):
    assert set(sessions_by_user) == set(SCENARIOS)


def test_asset_checks_pass_on_the_result(pipeline):
    evaluations = {e.check_name: e for e in pipeline[1]}
    assert set(evaluations) == {
        "sessions_do_not_overlap", "sessions_count_their_events", "sessions_within_cap", "snapshot_accounts_for_every_user"
    }
    assert all(e.passed for e in evaluations.values()), {n: e.metadata for n, e in evaluations.items()}


def test_days_a_run_leaves_with_more_files_than_allowed_are_compacted(pipeline):
    """Each run adds a file to every day it touches; with ``compact_min_files=2`` every such day is
    compacted in the same step, so each day ends in one file and the scenarios above ran through it (a
    ``sessions`` MERGE that updates a day rewrites its new rows into the same file: none was due there)."""
    layout = pipeline[4]
    assert layout["events"][1] > 0
    for table, (files_per_day, _) in layout.items():
        assert set(files_per_day.values()) == {1}, (table, files_per_day)
