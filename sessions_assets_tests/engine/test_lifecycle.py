"""The snapshot summed from transitions equals the oracle's day-by-day walk, and corrects by differences."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from sessions_assets.engine import lifecycle
from sessions_assets.settings import Settings
from sessions_assets_tests.helpers import reference
from sessions_assets_tests.helpers.budget import examples
from sessions_assets_tests.helpers.expected import SNAPSHOT_COLUMNS, assert_same, oracle_rows, rows

DAY0 = date(2024, 1, 1)


def day(n: int) -> date:
    return DAY0 + timedelta(days=n)


def session_days(spark, pairs):
    return spark.createDataFrame([(user, day(n)) for user, n in pairs], "user_key string, day date")


def expected(pairs, horizon: int, config: Settings):
    oracle = reference.Settings(lapsing_days=config.lapsing_days, dormant_days=config.dormant_days)
    sessions = [{"user_key": user, "session_date": day(n)} for user, n in pairs]
    return oracle_rows(reference.daily_snapshot(sessions, day(horizon), oracle), SNAPSHOT_COLUMNS)


def snapshot(spark, pairs, horizon: int, config: Settings):
    return rows(
        lifecycle.snapshot(lifecycle.transitions(session_days(spark, pairs), config), day(horizon)), SNAPSHOT_COLUMNS
    )


CASES = [
    ("new_active_lapsing_dormant_churned", [("ann", 0), ("ann", 1)], 40, Settings()),
    ("active_run_keeps_its_age", [("ann", 0), ("ann", 1), ("ann", 2), ("ann", 3), ("ann", 9)], 12, Settings()),
    ("back_on_the_day_it_would_turn_dormant", [("bob", 0), ("bob", 0), ("bob", 1), ("bob", 9)], 10, Settings()),
    (
        "short_thresholds",
        [("ann", 0), ("ann", 3), ("bob", 1), ("bob", 2), ("cy", 1)],
        7,
        Settings(lapsing_days=1, dormant_days=2),
    ),
    ("averages_round_half_up", [("old", 0)] + [(f"u{i}", 1) for i in range(31)], 3, Settings()),
    ("sessions_after_the_horizon_do_not_count", [("ann", 0), ("ann", 5), ("bob", 6)], 3, Settings()),
]


@pytest.mark.parametrize("pairs, horizon, config", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_snapshot_equals_the_oracles_walk(spark, pairs, horizon, config):
    assert_same(snapshot(spark, pairs, horizon, config), expected(pairs, horizon, config), "daily_snapshot")


users_days = st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 60)), min_size=1, max_size=25)


@pytest.mark.property
@settings(max_examples=examples(8), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=users_days, after=users_days, horizon=st.integers(0, 90))
def test_a_correction_by_difference_equals_a_recount(spark, before, after, horizon):
    """Totals of the old session days, plus the difference the changed users make (a +1 and a -1
    timeline each), give the snapshot of the new session days."""
    changed = {u for u, _ in before} ^ {u for u, _ in after} | {u for u, _ in set(before) ^ set(after)}
    new = [p for p in before if p[0] not in changed] + [p for p in after if p[0] in changed]
    old_totals = lifecycle.transitions(session_days(spark, before), Settings())
    timelines = (
        session_days(spark, [p for p in new if p[0] in changed])
        .withColumn("weight", F.lit(1))
        .unionByName(session_days(spark, [p for p in before if p[0] in changed]).withColumn("weight", F.lit(-1)))
    )
    corrected = lifecycle.combined(old_totals, lifecycle.transitions(timelines, Settings()))
    actual = rows(lifecycle.snapshot(corrected, day(horizon)), SNAPSHOT_COLUMNS)
    assert_same(actual, expected(new, horizon, Settings()), "daily_snapshot")


# Each transition, set off by one user's session days (lapsing 7, dormant 30): the (day, state) total it adds
# to, as (entered, exited, the day the stay left began; None for an entry).
EACH_TRANSITION = {
    "first session: enters new": ([0], 0, "new", (1, 0, None)),
    "second day in a row: leaves new": ([0, 1], 1, "new", (0, 1, 0)),
    "back, or on after the first day: enters active": ([0, 1], 1, "active", (1, 0, None)),
    "back after idle days: leaves the idle state": ([0, 5], 5, "lapsing", (0, 1, 1)),
    "first day, then idle: leaves new": ([0], 1, "new", (0, 1, 0)),
    "active, then idle: leaves active": ([0, 1], 2, "active", (0, 1, 1)),
    "then idle: enters lapsing": ([0], 1, "lapsing", (1, 0, None)),
    "idle past lapsing: leaves lapsing": ([0], 8, "lapsing", (0, 1, 1)),
    "idle past lapsing: enters dormant": ([0], 8, "dormant", (1, 0, None)),
    "idle past dormant: leaves dormant": ([0], 31, "dormant", (0, 1, 8)),
    "idle past dormant: enters churned": ([0], 31, "churned", (1, 0, None)),
}


def test_every_transition_has_a_case():
    assert sorted(EACH_TRANSITION) == sorted(t.name for t in lifecycle.TRANSITIONS)


@pytest.mark.parametrize("name", EACH_TRANSITION)
def test_transition(spark, name):
    timeline, on, state, (entered, exited, began) = EACH_TRANSITION[name]
    totals = lifecycle.transitions(session_days(spark, [("ann", n) for n in timeline]), Settings())
    found = {(r.day, r.state): (r.entered, r.exited, r.began_exited) for r in totals.collect()}
    epoch_days = (day(0) - lifecycle.EPOCH).days
    assert found[(day(on), state)] == (entered, exited, 0 if began is None else began + epoch_days)
