"""Spark's sessionization equals the oracle's, every column: the seed's cases, named ones, random streams."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings

from sessions_assets.engine.sessionize import SESSION_COLUMNS, sessionize
from sessions_assets.settings import Settings
from sessions_assets_tests import reference
from sessions_assets_tests.budget import examples
from sessions_assets_tests.engine.events import BASE, ev, frame, streams
from sessions_assets_tests.expected import assert_same, oracle_rows, rows
from sessions_assets_tests.landing import PHONE, ts

SEED_DAY = (
    [ts("2019-10-23 09:21") + timedelta(minutes=m) for m in range(0, 10)]
    + [ts("2019-10-23 10:05") + timedelta(minutes=m) for m in range(0, 18, 2)]
    + [ts("2019-10-23 13:25") + timedelta(minutes=m) for m in range(0, 46, 3)]
)
SEED_CASES = [
    ("inside", "2019-10-23 09:23"),
    ("merge_of_two", "2019-10-23 09:45"),
    ("new_between", "2019-10-23 11:15"),
    ("start_of_day", "2019-10-23 00:01"),
    ("end_of_day", "2019-10-23 23:59"),
]
EDGES = [ts("2019-10-22 23:50"), ts("2019-10-22 23:59"), ts("2019-10-24 00:01"), ts("2019-10-24 00:20")]


def assert_like_the_oracle(spark, events, config=Settings()):  # noqa: B008 (frozen)
    oracle = reference.Settings(
        session_gap_minutes=config.session_gap_minutes, max_session_hours=config.max_session_hours
    )
    assert_same(
        rows(sessionize(frame(spark, events), config), SESSION_COLUMNS),
        oracle_rows(reference.sessionize(events, oracle), SESSION_COLUMNS),
        "sessions",
    )


@pytest.mark.parametrize("late", [c[1] for c in SEED_CASES], ids=[c[0] for c in SEED_CASES])
def test_the_seeds_late_event_cases(spark, late):
    day = [ev(at, "jml") for at in SEED_DAY + EDGES]
    assert_like_the_oracle(spark, day + [ev(ts(late), "jml", type="page", page_path="/late")])


def test_a_bot_chain_past_48_hours_is_cut_into_24_hour_sessions(spark):
    assert_like_the_oracle(spark, [ev(BASE + timedelta(minutes=10 * i), "bot") for i in range(301)])


def test_events_at_the_same_moment_and_cuts_on_a_shared_timestamp(spark):
    twins = [ev(BASE, "a"), ev(BASE, "a"), ev(BASE + timedelta(minutes=20), "b"), ev(BASE + timedelta(hours=1), "a")]
    capped = [ev(BASE + timedelta(minutes=30 * i), "c") for i in range(50)] + [ev(BASE + timedelta(hours=24), "c")]
    assert_like_the_oracle(spark, twins + capped, Settings(max_session_hours=2))


def test_attributes_and_numbers(spark):
    events = [
        ev(BASE, "u", type="identify", user_agent=PHONE),
        ev(BASE + timedelta(minutes=1), "u", type="page", page_path="/", referrer="https://r/", utm_medium="email"),
        ev(BASE + timedelta(minutes=2), "u", type="track", event=None, device_type="ios"),
        ev(BASE + timedelta(hours=3), "u", type="page", page_path="/b"),
    ]
    assert_like_the_oracle(spark, events)


@pytest.mark.property
@settings(max_examples=examples(10), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=streams())
def test_random_streams(spark, events):
    assert_like_the_oracle(spark, events)


def test_sessionize_returns_exactly_the_stored_tables_columns_and_types(spark):
    from sessions_assets.warehouse.tables import SESSIONS

    produced = sessionize(frame(spark, [ev(BASE)]), Settings()).schema
    assert [(f.name, f.dataType) for f in produced.fields] == [(f.name, f.dataType) for f in SESSIONS.schema.fields]
