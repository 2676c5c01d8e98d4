"""The daily accumulating snapshot against the plain-Python oracle, including late corrections.

Sessions are written straight into the ``sessions`` Delta table (one session per user and day is all
the snapshot looks at); ``rebuild_snapshot`` then runs for a day range, as the asset does.
"""

from __future__ import annotations

import shutil
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given
from hypothesis import strategies as st

from sessions_assets.config import PipelineSettings
from pyspark.sql import functions as F

from sessions_assets import ledger, session_feed
from sessions_assets.session_rebuild import CONSUMER as SESSIONS_CONSUMER
from sessions_assets.snapshot import (
    absorb_users, everyone_from, rebuild_snapshot, snapshot_rows, states_on, update_snapshot, walk_states,
)  # fmt: skip
from sessions_assets.tables import DAILY_SNAPSHOT, RAW_EVENTS, SESSIONS, USER_STATES, Warehouse
from sessions_assets_tests import reference
from sessions_assets_tests.soak import property_test

DAY0 = date(2024, 1, 1)


def _day(n: int) -> date:
    return DAY0 + timedelta(days=n)


def add_sessions(wh: Warehouse, sessions: list[tuple[str, int]]) -> None:
    """Append one session per (user, day number) at noon."""
    rows = [
        (f"{user}-{n}", user, datetime.combine(_day(n), time(12), timezone.utc),
         datetime.combine(_day(n), time(12, 5), timezone.utc), 2, False, _day(n))
        for user, n in sessions
    ]  # fmt: skip
    wh.spark.createDataFrame(rows, SESSIONS.schema).write.format("delta").mode("append").save(wh.path(SESSIONS))
    wh.delta(SESSIONS)  # the table exists from here on


def table(wh: Warehouse) -> list[tuple]:
    return sorted(
        (r.snapshot_date, r.state, r.users_on_hand, r.users_entered, r.users_exited, round(r.avg_days_in_state, 3))
        for r in wh.read(DAILY_SNAPSHOT).collect()
    )


def oracle(sessions: list[tuple[str, int]], horizon: int) -> list[tuple]:
    rows = reference.daily_snapshot(
        [{"user_key": u, "session_date": _day(n)} for u, n in sessions], _day(horizon), reference.Settings()
    )
    return sorted(
        (r["snapshot_date"], r["state"], r["users_on_hand"], r["users_entered"], r["users_exited"],
         round(r["avg_days_in_state"], 3))
        for r in rows
    )  # fmt: skip


def test_a_user_goes_new_active_lapsing_dormant_churned(warehouse):
    sessions = [("ann", 0), ("ann", 1)]
    add_sessions(warehouse, sessions)
    rebuild_snapshot(warehouse, _day(0), _day(35), PipelineSettings())
    rows = table(warehouse)
    assert rows == oracle(sessions, 35)
    by_day = {(d, s): (on, en, ex, age) for d, s, on, en, ex, age in rows}
    assert by_day[(_day(0), "new")] == (1, 1, 0, 0.0)
    assert by_day[(_day(1), "active")] == (1, 1, 0, 0.0) and by_day[(_day(1), "new")] == (0, 0, 1, 0.0)
    assert by_day[(_day(2), "lapsing")] == (1, 1, 0, 0.0) and by_day[(_day(8), "lapsing")] == (1, 0, 0, 6.0)
    assert by_day[(_day(9), "dormant")] == (1, 1, 0, 0.0)
    assert by_day[(_day(32), "churned")] == (1, 1, 0, 0.0) and by_day[(_day(35), "churned")] == (1, 0, 0, 3.0)


def test_two_sessions_in_a_day_count_once_at_end_of_day(warehouse):
    sessions = [("bob", 0), ("bob", 0), ("bob", 3), ("bob", 3)]  # new twice on day 0, lapsing then active on day 3
    add_sessions(warehouse, [("bob", 0), ("bob", 3)])
    add_sessions(warehouse, [])
    rebuild_snapshot(warehouse, _day(0), _day(4), PipelineSettings())
    rows = table(warehouse)
    assert rows == oracle(sessions, 4)
    assert [r[2] for r in rows if r[0] == _day(3)] == [1, 0]  # active 1 on hand, lapsing 0 on hand (exited)


def test_fillers_cover_days_without_sessions(warehouse):
    sessions = [("cy", 0), ("dee", 0), ("cy", 20)]
    add_sessions(warehouse, sessions)
    rebuild_snapshot(warehouse, _day(0), _day(25), PipelineSettings())
    rows = table(warehouse)
    assert rows == oracle(sessions, 25)
    assert {r[0] for r in rows} == {_day(n) for n in range(26)}  # every day has its rows
    assert all(sum(r[2] for r in rows if r[0] == _day(n)) == 2 for n in range(26))


def test_late_session_on_an_old_day_corrects_every_later_day(warehouse):
    sessions = [("eve", 0), ("fay", 2), ("eve", 30)]
    add_sessions(warehouse, sessions)
    rebuild_snapshot(warehouse, _day(0), _day(40), PipelineSettings())
    late = [("eve", 10), ("gus", 5)]
    add_sessions(warehouse, late)
    changes = rebuild_snapshot(warehouse, _day(5), _day(40), PipelineSettings())
    assert table(warehouse) == oracle(sessions + late, 40)
    assert changes.users_changed == 2  # fay's history did not change


def test_a_user_whose_only_sessions_vanish_leaves_no_state_behind(warehouse):
    """A re-ingest can drop a user's only events: their stays must go, or later days would count them."""
    add_sessions(warehouse, [("ann", 0), ("bob", 3)])
    rebuild_snapshot(warehouse, _day(0), _day(5), PipelineSettings())
    warehouse.delta(SESSIONS).delete("user_key = 'bob'")
    rebuild_snapshot(warehouse, _day(2), _day(5), PipelineSettings())  # day 3 recomputed whole
    rebuild_snapshot(warehouse, _day(6), _day(8), PipelineSettings())
    assert table(warehouse) == oracle([("ann", 0)], 8)
    assert {r.user_key for r in warehouse.read(USER_STATES).collect()} == {"ann"}


@pytest.mark.parametrize(
    "late, lo",
    [([("eve", 10), ("gus", 5), ("fay", 38)], 4), ([("gus", 33)], 32)],
    ids=["correction_and_carry", "carry_only"],
)
def test_a_run_that_dies_between_its_two_writes_is_repaired_by_the_next(warehouse, monkeypatch, late, lo):
    """The snapshot and ``user_states`` are two commits: a run dying between them must not lose the stays.

    The retry sees a snapshot already built to the horizon; the next days are carried from ``user_states``.
    """
    sessions = [("eve", 0), ("fay", 2), ("hal", 29), ("eve", 30)]  # hal ages on through days 31..40
    add_sessions(warehouse, sessions)
    rebuild_snapshot(warehouse, _day(0), _day(30), PipelineSettings())
    add_sessions(warehouse, late)
    users = warehouse.spark.createDataFrame(sorted({(u,) for u, _ in late}), "user_key string")
    rewrite = Warehouse.rewrite

    def dies_before_user_states(wh, table, *args, **kwargs):
        assert table is USER_STATES
        raise RuntimeError("killed between the two commits")

    monkeypatch.setattr(Warehouse, "rewrite", dies_before_user_states)
    with pytest.raises(RuntimeError):
        absorb_users(warehouse, users, _day(lo), _day(40), PipelineSettings())
    monkeypatch.setattr(Warehouse, "rewrite", rewrite)
    absorb_users(warehouse, users, _day(lo), _day(40), PipelineSettings())  # the retry
    assert table(warehouse) == oracle(sessions + late, 40)
    rebuild_snapshot(warehouse, _day(41), _day(45), PipelineSettings())  # from the balance at day 40
    assert table(warehouse) == oracle(sessions + late, 45)


def test_a_late_load_absorbed_with_a_reingested_day_is_not_skipped(warehouse):
    """``sessions`` absorbed a late load for day 2 and recomputed day 6 whole (its received day was re-ingested):
    the snapshot, asked for days from 5, must start from the earliest of the two, not from the stale day."""
    sessions = [("ann", 0), ("bob", 6)]
    add_sessions(warehouse, sessions)
    ledger.record(warehouse, SESSIONS_CONSUMER, {(_day(0), _day(0), "a"), (_day(6), _day(6), "b")})
    update_snapshot(warehouse, _day(0), _day(8), PipelineSettings())
    add_sessions(warehouse, [("cat", 2)])
    ledger.record(warehouse, SESSIONS_CONSUMER, {(_day(2), _day(7), "c")})
    ledger.record(warehouse, SESSIONS_CONSUMER, {(_day(6), _day(6), "b2")}, whole_days={_day(6)})
    update_snapshot(warehouse, _day(5), _day(8), PipelineSettings())
    assert table(warehouse) == oracle(sessions + [("cat", 2)], 8)


def _arrive(wh: Warehouse, sessions: list[tuple[str, int]], received: int) -> None:
    """Sessions as ``sessions`` leaves them for the snapshot: the rows, their raw events, the absorbed loads."""
    add_sessions(wh, sessions)
    raw = [
        (f"m-{user}-{n}", "track", "x", user, None, user, datetime.combine(_day(n), time(12), timezone.utc),
         datetime.combine(_day(received), time(1), timezone.utc), None, _day(n), "f", "{}", _day(received))
        for user, n in sessions
    ]  # fmt: skip
    wh.spark.createDataFrame(raw, RAW_EVENTS.schema).write.format("delta").mode("append").save(wh.path(RAW_EVENTS))
    ledger.record(wh, SESSIONS_CONSUMER, {(_day(n), _day(received), f"{n}@{received}") for _, n in sessions})


def test_a_day_with_weeks_old_and_recent_late_sessions_is_absorbed_exactly(warehouse):
    """The benchmark's typical day through ``update_snapshot``: most users have recent sessions, a few have
    weeks-old late ones, one has both, one is new, one is as old as the snapshot's first day (its margin
    reaches the day before, where no session is). Only their users are corrected, each from their own day."""
    sessions = [("ann", 0), ("bob", 1), ("cat", 2), ("dan", 3), ("gus", 0), ("bob", 40), ("dan", 41)]
    _arrive(warehouse, sessions, 41)
    update_snapshot(warehouse, _day(0), _day(45), PipelineSettings())
    late = [("ann", 4), ("cat", 5), ("cat", 44), ("bob", 44), ("eve", 45), ("fay", 0)]
    _arrive(warehouse, late, 46)
    changes = update_snapshot(warehouse, _day(46), _day(47), PipelineSettings())
    assert table(warehouse) == oracle(sessions + late, 47)
    assert changes.users_walked == 6  # the five late users and dan (lapsing); gus rests churned, not re-walked


def test_a_user_whose_new_rows_start_days_past_the_snapshot_is_counted_on_the_days_between(warehouse):
    """No received day for a while, then one with an old late row (so days already built are corrected)
    and users whose new rows are all days past the built snapshot: those are walked from the day after
    it, not from their own first new day, or the days between miss them. (Found by the property test
    below: a user lapsing on days 42..44 was counted only from day 45.)"""
    sessions = [("amy", 0), ("ben", 39)]
    _arrive(warehouse, sessions, 41)
    update_snapshot(warehouse, _day(0), _day(41), PipelineSettings())
    late = [("amy", 10), ("ben", 45), ("cy", 46)]
    _arrive(warehouse, late, 46)
    update_snapshot(warehouse, _day(42), _day(46), PipelineSettings())
    assert table(warehouse) == oracle(sessions + late, 46)


def test_user_states_stays_a_few_files_however_many_days_correct_it(warehouse):
    """Every correction rewrites ``user_states`` whole: its file count does not grow with the runs, as a
    ``MERGE`` adding files (and deletion vectors) each day would make it."""
    _arrive(warehouse, [("ann", 0), ("bob", 1)], 1)
    update_snapshot(warehouse, _day(0), _day(1), PipelineSettings())
    arrivals = [[("ann", 2), ("cat", 1)], [("bob", 3), ("ann", 1)], [("cat", 4), ("dan", 0)]]
    received = 1
    for late in arrivals:
        received += 2
        _arrive(warehouse, late, received)
        assert update_snapshot(warehouse, _day(received - 1), _day(received), PipelineSettings()).users_changed
        assert len(warehouse.read(USER_STATES).inputFiles()) <= warehouse.spark.sparkContext.defaultParallelism + 2
    everyone = [("ann", 0), ("bob", 1)] + [s for late in arrivals for s in late]
    assert table(warehouse) == oracle(everyone, received)


def test_corrections_take_session_days_from_the_stays_and_the_change_feed(warehouse):
    """Once built, the snapshot reads no past ``sessions`` day: each user's session days are their stays'
    ``new`` and ``active`` days, changed where ``sessions``' change feed says. A day whose only session is
    deleted stops being a session day, one keeping another session stays one, and a user the ledger does
    not name (a ``sessions`` run that died before its ledger write) is corrected all the same."""
    sessions = [("ann", 0), ("ann", 3), ("bob", 1), ("bob", 2), ("cat", 2)]
    add_sessions(warehouse, sessions)
    evening = warehouse.read(SESSIONS).where("session_id = 'bob-2'").withColumn("session_id", F.lit("bob-2-evening"))
    evening.write.format("delta").mode("append").save(warehouse.path(SESSIONS))
    rebuild_snapshot(warehouse, _day(0), _day(10), PipelineSettings())
    note = warehouse.delta(USER_STATES).history(1).head().userMetadata
    assert session_feed.watermark(note) == warehouse.version(SESSIONS)
    warehouse.delta(SESSIONS).delete("session_id IN ('ann-3', 'bob-2')")
    add_sessions(warehouse, [("cat", 5), ("dan", 4)])
    only_dan = warehouse.spark.createDataFrame([("dan", _day(4))], "user_key string, first date")
    assert absorb_users(warehouse, only_dan, _day(3), _day(10), PipelineSettings()).days_from_feed
    assert table(warehouse) == oracle([("ann", 0), ("bob", 1), ("bob", 2), ("cat", 2), ("cat", 5), ("dan", 4)], 10)


def test_without_a_readable_change_feed_sessions_are_read_and_no_watermark_is_claimed(warehouse):
    """The feed's files are gone (a vacuum): the correction reads the users' sessions as before, and the
    stays it writes name no watermark, so the next run does not trust the feed either."""
    add_sessions(warehouse, [("ann", 0), ("bob", 2), ("bob", 3)])
    rebuild_snapshot(warehouse, _day(0), _day(6), PipelineSettings())
    warehouse.delta(SESSIONS).delete("session_id = 'bob-3'")  # recorded in ``_change_data``
    shutil.rmtree(Path(warehouse.path(SESSIONS)) / "_change_data")
    bob = warehouse.spark.createDataFrame([("bob", _day(3))], "user_key string, first date")
    assert not absorb_users(warehouse, bob, _day(3), _day(6), PipelineSettings()).days_from_feed
    assert table(warehouse) == oracle([("ann", 0), ("bob", 2)], 6)
    assert session_feed.watermark(warehouse.delta(USER_STATES).history(1).head().userMetadata) is None


def test_a_second_user_states_write_from_the_same_version_is_skipped(warehouse):
    """A retry, or a concurrent run, that computed its stays against the version a write already replaced."""
    add_sessions(warehouse, [("ann", 0)])
    rebuild_snapshot(warehouse, _day(0), _day(2), PipelineSettings())
    before = warehouse.read(USER_STATES).collect()
    based_on = warehouse.version(USER_STATES) - 1  # the version the stays above were computed against
    gone = warehouse.read(USER_STATES).withColumn("_op", F.lit("delete"))
    warehouse.rewrite(USER_STATES, gone, ["user_key", "valid_from"], based_on)
    assert warehouse.read(USER_STATES).collect() == before


def test_a_first_build_starts_at_the_first_session_day(warehouse):
    sessions = [("hal", 3), ("hal", 4)]
    add_sessions(warehouse, sessions)
    changes = rebuild_snapshot(warehouse, _day(4), _day(6), PipelineSettings())
    assert changes.first == _day(3)
    assert table(warehouse) == oracle(sessions, 6)


@property_test(4, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sessions=st.lists(st.tuples(st.sampled_from(["u1", "u2", "u3", "u4"]), st.integers(0, 45)), min_size=1, max_size=14),
    batches=st.integers(1, 4),
    by_user=st.booleans(),
)
@example(  # a user whose first new day is past the snapshot's last day, with another's earlier correction
    sessions=[("u1", 40), ("u1", 10), ("u1", 0), ("u1", 0), ("u1", 31), ("u1", 19), ("u1", 28), ("u4", 45),
              ("u1", 0), ("u1", 21), ("u1", 0), ("u1", 39), ("u4", 39), ("u3", 11)],
    batches=3,
    by_user=True,
)  # fmt: skip
def test_incremental_snapshot_equals_a_recompute_after_every_arrival(tmp_path_factory, spark, sessions, batches, by_user):
    """Either way of absorbing late sessions: whole days from the balance, or only the users who changed,
    each from their own first changed day."""
    wh = Warehouse(spark, PipelineSettings(data_root=str(tmp_path_factory.mktemp("snap"))))
    arrived: list[tuple[str, int]] = []
    horizon = 0
    for i in range(batches):
        batch = sessions[i::batches]
        if not batch:
            continue
        add_sessions(wh, batch)
        arrived += batch
        horizon = max(horizon, max(n for _, n in batch)) + 1  # the data's horizon moves on
        lo = _day(min(n for _, n in batch))
        if by_user:  # each user corrected from their own first new day
            firsts = {u: _day(min(n for v, n in batch if v == u)) for u, _ in batch}
            users = spark.createDataFrame(sorted(firsts.items()), "user_key string, first date")
            absorb_users(wh, users, lo, _day(horizon), PipelineSettings())
        else:
            rebuild_snapshot(wh, lo, _day(horizon), PipelineSettings())
        assert table(wh) == oracle(arrived, horizon)


def test_days_without_churned_users_still_average_without_dividing_by_zero(warehouse):
    sessions = [("ivy", 0), ("ivy", 1), ("jon", 1)]
    add_sessions(warehouse, sessions)
    rebuild_snapshot(warehouse, _day(0), _day(1), PipelineSettings())
    prior = states_on(warehouse.read(USER_STATES), _day(1))
    session_days = warehouse.read(SESSIONS, _day(2), _day(3)).select("user_key", "session_date")
    walked = walk_states(prior, session_days, everyone_from(prior, session_days, _day(2)), _day(3), PipelineSettings())
    resting = prior.where("state = 'churned'")  # nobody
    rows = snapshot_rows(walked, resting, _day(2), _day(3))
    # day 2: lapsing (2 in), new and active (1 out each); day 3: lapsing, one day old each
    assert tuple(rows.agg(F.count(F.lit(1)), F.sum("avg_days_in_state")).head()) == (4, 1.0)
