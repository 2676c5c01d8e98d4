"""Spark's sessionization equals the oracle's, every column: the seed's cases, named ones, random streams."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings

from sessions_assets.engine.sessionize import SESSION_COLUMNS, sessionize
from sessions_assets.settings import Settings
from sessions_assets_tests.engine.events import BASE, BOT, ev, frame, streams
from sessions_assets_tests.helpers import reference
from sessions_assets_tests.helpers.budget import examples
from sessions_assets_tests.helpers.expected import assert_same, oracle_rows, rows
from sessions_assets_tests.helpers.landing import PHONE, ts

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
        session_gap_minutes=config.session_gap_minutes,
        max_session_hours=config.max_session_hours,
        own_domains=config.own_domain_list,
        conversion_events=config.conversion_event_list,
        time_zone=config.time_zone,
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
    assert_like_the_oracle(spark, events, Settings(own_domains="example.com"))


def test_conversions_revenue_and_the_bot_flag(spark):
    bought = dict(type="track", event="Order Completed")
    events = [
        ev(BASE, "u", type="page", user_agent=BOT, page_path="/"),
        ev(BASE + timedelta(minutes=1), "u", user_agent=PHONE),  # the first agent decides: a bot
        ev(BASE + timedelta(minutes=2), "u", **bought, revenue=Decimal("19.990000")),
        ev(BASE + timedelta(minutes=3), "u", **bought),  # a conversion without revenue
        ev(BASE + timedelta(minutes=4), "u", type="track", event="Viewed", revenue=Decimal("5.000000")),  # not one
        ev(BASE + timedelta(hours=2), "u", type="track", event="Signed Up"),  # next session: no revenue at all
        ev(BASE + timedelta(hours=5), "v", **bought, revenue=Decimal("1.000000"), user_agent=PHONE),
    ]
    assert_like_the_oracle(spark, events)
    by_start = {
        (r.user_key, r.session_number): (r.is_bot, r.conversions, r.revenue, r.first_conversion_at)
        for r in sessionize(frame(spark, events), Settings()).collect()
    }
    assert by_start == {
        ("u", 1): (True, 2, Decimal("19.990000"), (BASE + timedelta(minutes=2)).replace(tzinfo=None)),
        ("u", 2): (False, 1, None, (BASE + timedelta(hours=2)).replace(tzinfo=None)),
        ("v", 1): (False, 1, Decimal("1.000000"), (BASE + timedelta(hours=5)).replace(tzinfo=None)),
    }


def test_conversion_events_are_a_setting(spark):
    events = [ev(BASE, "u", type="track", event="Trial Started", revenue=Decimal("3.000000"))]
    assert_like_the_oracle(spark, events, Settings(conversion_events="Trial Started"))
    [row] = sessionize(frame(spark, events), Settings(conversion_events="Trial Started")).collect()
    assert (row.conversions, row.revenue) == (1, Decimal("3.000000"))


def test_sessionize_returns_exactly_the_stored_tables_columns_and_types(spark):
    from sessions_assets.warehouse.tables import SESSIONS

    produced = sessionize(frame(spark, [ev(BASE)]), Settings()).schema
    assert [(f.name, f.dataType) for f in produced.fields] == [(f.name, f.dataType) for f in SESSIONS.schema.fields]


def wall(text: str, zone: str, fold: int = 0) -> datetime:
    """A local wall-clock time in ``zone`` (``fold=1``: the second of a repeated hour) as a UTC instant."""
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone), fold=fold).astimezone(UTC)


# (name, zone, the events' wall-clock times (with fold), the session days expected): gaps are real durations, so a
# zone never changes which events form a session, only the day it is on.
LOCAL_SESSIONS = [
    (
        "from_23_40_to_00_20",
        "America/Los_Angeles",
        [("2024-03-05 23:40", 0), ("2024-03-05 23:58", 0), ("2024-03-06 00:20", 0)],
        ["2024-03-05"],
    ),
    (
        "across_the_skipped_hour",
        "America/Los_Angeles",
        [("2024-03-10 01:50", 0), ("2024-03-10 03:10", 0)],
        ["2024-03-10"],
    ),
    (
        "across_the_repeated_hour",
        "America/Los_Angeles",
        [("2024-11-03 01:50", 0), ("2024-11-03 01:10", 1)],
        ["2024-11-03"],
    ),
    ("berlin_spring", "Europe/Berlin", [("2024-03-31 01:50", 0), ("2024-03-31 03:10", 0)], ["2024-03-31"]),
    ("berlin_autumn", "Europe/Berlin", [("2024-10-27 02:50", 0), ("2024-10-27 02:10", 1)], ["2024-10-27"]),
    # Santiago's spring skips midnight (23:59:59 -> 01:00): a day that starts at 01:00
    ("santiago_no_midnight", "America/Santiago", [("2024-09-07 23:50", 0), ("2024-09-08 01:05", 0)], ["2024-09-07"]),
    (
        "santiago_first_instant",
        "America/Santiago",
        [("2024-09-07 22:00", 0), ("2024-09-08 01:00", 0)],
        ["2024-09-07", "2024-09-08"],
    ),
    # Havana's autumn repeats midnight (00:59:59 -> 00:00): both midnights are on the same day
    (
        "havana_across_the_two_midnights",
        "America/Havana",
        [("2024-11-03 00:50", 0), ("2024-11-03 00:05", 1)],
        ["2024-11-03"],
    ),
    ("havana_second_midnight", "America/Havana", [("2024-11-03 00:10", 1)], ["2024-11-03"]),
    ("tokyo_morning_is_the_utc_evening_before", "Asia/Tokyo", [("2024-03-10 08:00", 0)], ["2024-03-10"]),
]


@pytest.mark.parametrize("zone, walls, expected", [c[1:] for c in LOCAL_SESSIONS], ids=[c[0] for c in LOCAL_SESSIONS])
def test_a_session_is_on_the_local_day_it_starts(spark, zone, walls, expected):
    events = [ev(wall(text, zone, fold), "ann") for text, fold in walls]
    assert_like_the_oracle(spark, events, Settings(time_zone=zone))
    found = sorted(r.session_date for r in sessionize(frame(spark, events), Settings(time_zone=zone)).collect())
    assert found == [date.fromisoformat(d) for d in expected]
