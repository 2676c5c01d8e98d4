"""The session rules and the checks as plain DataFrame functions (no Dagster, no Delta)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sessions_assets.checks import (
    event_count_mismatches,
    overlapping_sessions,
    overlong_sessions,
    unbalanced_snapshot_days,
)
from sessions_assets.sessionize import sessionize
from sessions_assets_tests.landing import ts

GAP, CAP = timedelta(minutes=30), timedelta(hours=24)


def _sessions(spark, times: list[str], user: str = "u"):
    events = spark.createDataFrame(
        [(user, ts(t), f"m{i:04d}") for i, t in enumerate(times)], "user_key string, timestamp timestamp, message_id string"
    )
    rows = sessionize(events, GAP, CAP).orderBy("session_start").collect()
    return [(r.session_start.strftime("%d %H:%M"), r.session_end.strftime("%d %H:%M"), r.num_events, r.ended_by_cap) for r in rows]


@pytest.mark.parametrize(
    "times, expected",
    [
        pytest.param(["2024-03-11 09:00", "2024-03-11 09:30"], [("11 09:00", "11 09:30", 2, False)], id="gap_of_exactly_30_minutes_does_not_split"),
        pytest.param(["2024-03-11 09:00", "2024-03-11 09:30:01"], [("11 09:00", "11 09:00", 1, False), ("11 09:30", "11 09:30", 1, False)], id="gap_over_30_minutes_splits"),
        pytest.param(["2024-03-11 23:50", "2024-03-12 00:10"], [("11 23:50", "12 00:10", 2, False)], id="session_crosses_midnight"),
        pytest.param(["2024-03-11 09:00", "2024-03-11 09:00", "2024-03-11 09:00"], [("11 09:00", "11 09:00", 3, False)], id="same_timestamp_events_share_a_session"),
    ],
)
def test_session_rules(spark, times, expected):
    assert _sessions(spark, times) == expected


def test_bot_chain_is_cut_every_24_hours_from_the_session_start(spark):
    start = ts("2024-03-11 00:00")
    times = [(start + timedelta(minutes=20 * i)).strftime("%Y-%m-%d %H:%M") for i in range(3 * 24 * 3)]  # 72 h
    assert _sessions(spark, times) == [
        ("11 00:00", "12 00:00", 73, True),  # exactly 24 h after the start is still inside
        ("12 00:20", "13 00:20", 73, True),
        ("13 00:40", "13 23:40", 70, False),
    ]


def test_checks_catch_overlaps_miscounts_and_overlong_sessions(spark):
    sessions = spark.createDataFrame(
        [("u", ts("2024-03-11 09:00"), ts("2024-03-11 10:00"), 2, ts("2024-03-11 09:00").date()),
         ("u", ts("2024-03-11 09:30"), ts("2024-03-11 09:40"), 1, ts("2024-03-11 09:00").date()),
         ("v", ts("2024-03-11 09:00"), ts("2024-03-12 10:00"), 1, ts("2024-03-11 09:00").date())],
        "user_key string, session_start timestamp, session_end timestamp, num_events long, session_date date",
    )  # fmt: skip
    events = spark.createDataFrame([("u", ts("2024-03-11 09:00"))], "user_key string, timestamp timestamp")
    assert overlapping_sessions(sessions).count() == 1
    assert overlong_sessions(sessions, 24).count() == 1
    assert event_count_mismatches(sessions, events).count() == 1


def test_snapshot_check_catches_a_day_that_loses_a_user(spark):
    sessions = spark.createDataFrame(
        [("u", ts("2024-03-10 09:00").date()), ("v", ts("2024-03-11 09:00").date())], "user_key string, session_date date"
    )
    snapshot = spark.createDataFrame(
        [(ts("2024-03-10 00:00").date(), "new", 1), (ts("2024-03-11 00:00").date(), "new", 1)],
        "snapshot_date date, state string, users_on_hand long",
    )
    assert [r.snapshot_date.day for r in unbalanced_snapshot_days(snapshot, sessions).collect()] == [11]
