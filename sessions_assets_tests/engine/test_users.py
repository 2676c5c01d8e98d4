"""A person's row moved on by the sessions added and removed equals its recount from all its sessions, and asks
for a recount only when the change cannot tell (its earliest or latest session gone with nothing in its place)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessions_assets.engine.users import IDENTIFIED, SESSION_FACTS, USER_SCHEMA, advanced, users
from sessions_assets_tests.helpers.budget import examples

T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
FACTS_SCHEMA = (
    "user_key string, session_start timestamp, session_end timestamp, num_events long, landing_path string, "
    "referrer string, utm_source string, utm_medium string, utm_campaign string, device_type string, "
    "default_channel_group string, conversions long, revenue decimal(38,6), first_conversion_at timestamp"
)
# The columns the moved-on row is compared on: all but the ids, which come from the person's tallies.
COMPARED = [c for c in USER_SCHEMA.fieldNames() if c not in ("user_id", "anonymous_ids")]
HUGE = Decimal("99999999999999999999999999999999.000000")  # two of them do not fit DECIMAL(38,6)


def session(user: str, hour: int, events: int = 2, path: str = "/", revenue: Decimal | None = None) -> tuple:
    start = T0 + timedelta(hours=hour)
    converted = revenue is not None
    return (
        user,
        start,
        start + timedelta(minutes=10),
        events,
        path,
        None,
        None,
        None,
        None,
        "desktop",
        "Direct",
        1 if converted else 0,
        revenue,
        start if converted else None,
    )


def frame(spark, sessions):
    return spark.createDataFrame(sessions, FACTS_SCHEMA).select(*SESSION_FACTS)


def recounted(spark, sessions) -> dict:
    no_ids = spark.createDataFrame([], ", ".join(f"{c} string" for c in IDENTIFIED))
    return {r.user_key: tuple(r[c] for c in COMPARED) for r in users(frame(spark, sessions), no_ids).collect()}


def moved_on(spark, before, added, removed) -> tuple[dict, set]:
    """The persons' rows advanced from their stored rows by the change: (user -> row, persons to recount)."""
    no_ids = spark.createDataFrame([], ", ".join(f"{c} string" for c in IDENTIFIED))
    stored = users(frame(spark, before), no_ids)
    persons = {s[0] for s in (*before, *added, *removed)}
    keys = spark.createDataFrame([(p,) for p in sorted(persons)], "user_key string")
    rows = advanced(keys.join(stored, "user_key", "left"), frame(spark, added), frame(spark, removed)).collect()
    return (
        {r.user_key: tuple(r[c] for c in COMPARED) for r in rows if not r.recount and r.sessions > 0},
        {r.user_key for r in rows if r.recount},
    )


def check(spark, before, added, removed, recount=None):
    after = [s for s in before if s not in removed] + list(added)
    rows, asked = moved_on(spark, before, added, removed)
    expected = recounted(spark, after)
    assert {k: v for k, v in expected.items() if k not in asked} == rows
    if recount is not None:
        assert asked == recount


BEFORE = [session("ann", 0), session("ann", 5), session("bob", 2, revenue=Decimal("10.5"))]


def test_a_session_extended_at_the_end_is_added_to_without_a_recount(spark):
    longer = ("ann", T0 + timedelta(hours=5), T0 + timedelta(hours=5, minutes=40), *BEFORE[1][3:])
    check(spark, BEFORE, [longer], [BEFORE[1]], recount=set())


def test_a_late_session_before_the_first_moves_the_first_touch_without_a_recount(spark):
    check(spark, BEFORE, [session("ann", -3, path="/late")], [], recount=set())


def test_a_new_person_and_a_person_left_with_no_session(spark):
    check(spark, BEFORE, [session("cy", 1)], [BEFORE[2]], recount=set())


def test_the_first_session_gone_with_nothing_before_it_asks_for_a_recount(spark):
    check(spark, BEFORE, [], [BEFORE[0]], recount={"ann"})


def test_the_only_revenue_gone_leaves_no_revenue_and_a_sum_that_does_not_fit_is_recounted(spark):
    rich = [session("bob", 7, revenue=Decimal("1.5"))]
    check(spark, BEFORE, rich, [BEFORE[2]], recount=set())
    check(spark, [session("bob", 2, revenue=HUGE)], [session("bob", 3, revenue=HUGE)], [], recount={"bob"})


@st.composite
def changes(draw):
    hours = st.integers(-10, 40)
    drawn = lambda user: session(  # noqa: E731
        user,
        draw(hours),
        draw(st.integers(1, 5)),
        draw(st.sampled_from(["/", "/a"])),
        draw(st.sampled_from([None, None, Decimal("2.25"), Decimal("0"), HUGE])),
    )
    before = {(s[0], s[1]): s for s in [drawn(draw(st.sampled_from("abc"))) for _ in range(draw(st.integers(0, 8)))]}
    removed = [s for s in before.values() if draw(st.booleans())]
    kept = {k for k in before if before[k] not in removed}
    added = {}
    for _ in range(draw(st.integers(0, 4))):
        s = drawn(draw(st.sampled_from("abcd")))
        if (s[0], s[1]) not in kept:
            added[(s[0], s[1])] = s
    return list(before.values()), list(added.values()), removed


@pytest.mark.property
@settings(max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(change=changes())
def test_rows_moved_on_by_any_change_equal_a_recount(spark, change):
    check(spark, *change)
