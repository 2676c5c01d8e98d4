"""Tests of the oracle itself (``reference.py``): pure Python, fast, exact values worked out by hand.

If the oracle were wrong, every comparison of the Spark pipeline with it would be meaningless, so the
contract's cases are written down here one by one, the late-event cases as in the seed (a user's sessions
on 2019-10-23 and a late event that lands inside, between, across midnight, ...).
"""

from __future__ import annotations

import itertools
from datetime import date, timedelta

import pytest

from sessions_assets_tests.helpers import cases
from sessions_assets_tests.helpers.cases import ACCEPTED, DROP, REJECTED, REVENUES, T, line, with_revenue
from sessions_assets_tests.helpers.reference import (
    Settings,
    accept_landing,
    accept_line,
    dedupe,
    parse_timestamp,
    recompute,
    sessionize,
)
from sessions_assets_tests.helpers.seed_day import (
    AFTER,
    BEFORE,
    DAY_AFTER,
    DAY_BEFORE,
    S1,
    S2,
    S3,
    SEED_DAY,
    burst,
    ev,
    table,
)


@pytest.mark.parametrize("text, reason", [(t, r) for _, t, r in REJECTED], ids=[i for i, _, _ in REJECTED])
def test_a_line_breaking_a_rule_is_rejected_with_its_reason(text, reason):
    assert accept_line(text) == (None, reason)


@pytest.mark.parametrize("text, user_key, timestamp", [a[1:] for a in ACCEPTED], ids=[a[0] for a in ACCEPTED])
def test_a_good_line_is_accepted_and_parsed(text, user_key, timestamp):
    event, reason = accept_line(text)
    assert reason is None
    assert event["message_id"] == "m-1"
    assert event["user_key"] == user_key
    assert event["timestamp"] == timestamp and event["timestamp"].utcoffset() == timedelta(0)
    assert event["event"] == "Page Viewed"
    assert event["payload"] == text


@pytest.mark.parametrize("text, ids", [c[1:] for c in cases.IDS], ids=[c[0] for c in cases.IDS])
def test_an_id_sent_as_a_json_integer_is_its_decimal_text(text, ids):
    event, reason = accept_line(text)
    assert reason is None
    assert (event["message_id"], event["user_id"], event["anonymous_id"]) == ids


def test_accepted_event_fields():
    event, _ = accept_line(line(userId="", timestamp="2024-03-16T11:00:00+02:00", receivedAt="2024-03-16T09:01:00"))
    assert event == {
        "message_id": "m-1",
        "user_id": None,
        "anonymous_id": "a-1",
        "user_key": "a-1",
        "type": "track",
        "event": "Page Viewed",
        "timestamp": T("2024-03-16 09:00"),
        "received_at": T("2024-03-16 09:01"),
        "event_date": date(2024, 3, 16),
        "payload": event["payload"],
        "page_path": "/",
        "referrer": None,
        "utm_source": None,
        "utm_medium": None,
        "utm_campaign": None,
        "user_agent": None,
        "device_type": None,
        "revenue": None,
    }


@pytest.mark.parametrize("raw, expected", REVENUES, ids=[r for r, _ in REVENUES])
def test_revenue_is_a_json_number_rounded_to_six_places(raw, expected):
    event, _ = accept_line(with_revenue(raw))
    assert event["revenue"] == expected


ATTRIBUTES = [
    # (id, the message's context and properties, what the event carries)
    (
        "page_context_wins",
        {"context": {"page": {"path": "/a", "referrer": "https://r/"}}, "properties": {"path": "/b"}},
        {"page_path": "/a", "referrer": "https://r/"},
    ),
    (
        "properties_when_no_page",
        {"context": {}, "properties": {"path": "/b", "referrer": "https://p/"}},
        {"page_path": "/b", "referrer": "https://p/"},
    ),
    ("blank_path_is_none", {"context": {"page": {"path": " "}}, "properties": {"path": "/b"}}, {"page_path": "/b"}),
    (
        "campaign_fields",
        {"context": {"campaign": {"source": "news", "name": "autumn", "content": "x"}}},
        {"utm_source": "news", "utm_medium": None, "utm_campaign": "autumn"},
    ),
    (
        "agent_and_device",
        {"context": {"userAgent": "Mozilla/5.0", "device": {"type": "ios"}}},
        {"user_agent": "Mozilla/5.0", "device_type": "ios"},
    ),
    (
        "wrong_types_are_none",
        {"context": {"page": {"path": 7}, "campaign": "spring", "userAgent": {}}, "properties": []},
        {"page_path": None, "utm_source": None, "user_agent": None},
    ),
]


@pytest.mark.parametrize("message, expected", [a[1:] for a in ATTRIBUTES], ids=[a[0] for a in ATTRIBUTES])
def test_an_event_carries_what_its_session_columns_are_drawn_from(message, expected):
    event, reason = accept_line(line(**{"properties": DROP, **message}))
    assert reason is None
    assert {k: event[k] for k in expected} == expected


def test_thresholds_come_from_the_settings():
    ahead = line(timestamp="2024-03-16T09:20:00Z", receivedAt="2024-03-16T09:00:00Z")
    assert accept_line(ahead, Settings(max_future_skew_minutes=15)) == (None, "future_timestamp")
    late = line(timestamp="2024-03-01T09:00:00Z", receivedAt="2024-03-16T09:00:00Z")
    assert accept_line(late, Settings(max_lateness_days=14)) == (None, "too_late")
    assert accept_line(late, Settings(start_date=date(2024, 3, 2))) == (None, "too_late")
    assert accept_line(late, Settings(max_lateness_days=15))[1] is None


def test_parse_timestamp_rejects_non_strings():
    assert [parse_timestamp(v) for v in (None, 0, 1.5, [], {}, True)] == [None] * 6


def test_accept_landing_keeps_every_line_once_with_its_received_day():
    days = {
        "2024-03-17": [line(messageId="m-2"), "oops"],
        "2024-03-16": [line(), line(messageId="")],
    }
    accepted, rejected = accept_landing(days)
    assert [(e["received_date"], e["message_id"]) for e in accepted] == [("2024-03-16", "m-1"), ("2024-03-17", "m-2")]
    assert rejected == [
        ("2024-03-16", line(messageId=""), "missing_message_id", None),
        ("2024-03-17", "oops", "malformed_json", None),
    ]


# --------------------------------------------------------------------------------------------------
# Duplicates
# --------------------------------------------------------------------------------------------------

COPIES = [
    {**accept_line(line(receivedAt="2024-03-16T09:00:05Z", event="First"))[0], "received_date": "2024-03-16"},
    {**accept_line(line(receivedAt="2024-03-17T02:00:00Z", event="Second"))[0], "received_date": "2024-03-17"},
    {**accept_line(line(receivedAt="2024-03-19T10:00:00Z", event="Third"))[0], "received_date": "2024-03-19"},
]
OTHER = {**accept_line(line(messageId="m-2"))[0], "received_date": "2024-03-16"}


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))), ids=lambda order: "".join(map(str, order)))
def test_a_duplicate_is_kept_once_the_earliest_received_copy_in_any_order(order):
    events = [COPIES[i] for i in order] + [OTHER]
    kept = dedupe(events)
    assert [(e["message_id"], e["event"], e["received_date"]) for e in kept] == [
        ("m-1", "First", "2024-03-16"),
        ("m-2", "Page Viewed", "2024-03-16"),
    ]


def test_copies_received_at_the_same_moment_break_the_tie_by_received_day_then_line():
    same_moment = "2024-03-16T23:59:59Z"
    a = {**accept_line(line(receivedAt=same_moment, event="A"))[0], "received_date": "2024-03-17"}
    b = {**accept_line(line(receivedAt=same_moment, event="B"))[0], "received_date": "2024-03-16"}
    c = {**accept_line(line(receivedAt=same_moment, event="C"))[0], "received_date": "2024-03-16"}
    for order in itertools.permutations([a, b, c]):
        assert [e["event"] for e in dedupe(list(order))] == ["B"]  # day 16 before day 17, then '"B"' < '"C"'


def test_a_redelivered_line_counts_once_in_sessions():
    first = line(timestamp="2024-03-16T09:00:00Z", receivedAt="2024-03-16T09:00:05Z")
    again = line(timestamp="2024-03-16T09:00:00Z", receivedAt="2024-03-18T09:00:00Z")
    out = recompute({"2024-03-18": [again, again], "2024-03-16": [first]})
    assert len(out["accepted"]) == 3 and len(out["events"]) == 1
    assert out["events"][0]["received_at"] == T("2024-03-16 09:00:05")
    assert [s["num_events"] for s in out["sessions"]] == [1]


# --------------------------------------------------------------------------------------------------
# Sessions: the seed's five late-event cases
# --------------------------------------------------------------------------------------------------


SEED_CASES = [
    # (id, the user's events so far, their sessions, the late event, the sessions after it)
    (
        "inside",
        SEED_DAY,
        [S1, S2, S3],
        "2019-10-23 09:23",
        [("2019-10-23 09:21", "2019-10-23 09:30", 11, "2019-10-23", False), S2, S3],
    ),
    (
        "merge_of_two",
        SEED_DAY,
        [S1, S2, S3],
        "2019-10-23 09:45",
        [("2019-10-23 09:21", "2019-10-23 10:23", 26, "2019-10-23", False), S3],
    ),
    (
        "new_between",
        SEED_DAY,
        [S1, S2, S3],
        "2019-10-23 11:15",
        [S1, S2, ("2019-10-23 11:15", "2019-10-23 11:15", 1, "2019-10-23", False), S3],
    ),
    # a session ending 23:59 the day before takes in the 00:01 event; it stays in the 2019-10-22 partition
    (
        "start_of_day",
        DAY_BEFORE + SEED_DAY,
        [BEFORE, S1, S2, S3],
        "2019-10-23 00:01",
        [("2019-10-22 23:50", "2019-10-23 00:01", 5, "2019-10-22", False), S1, S2, S3],
    ),
    # the next day's 00:01 session is dragged back to start at 23:59: it moves to the 2019-10-23 partition
    (
        "end_of_day",
        SEED_DAY + DAY_AFTER,
        [S1, S2, S3, AFTER],
        "2019-10-23 23:59",
        [S1, S2, S3, ("2019-10-23 23:59", "2019-10-24 00:20", 6, "2019-10-23", False)],
    ),
]


@pytest.mark.parametrize("existing, before, late, after", [c[1:] for c in SEED_CASES], ids=[c[0] for c in SEED_CASES])
def test_a_late_event_in_the_seeds_cases(existing, before, late, after):
    assert table(sessionize(existing)) == before
    # the late event, wherever it comes among the others
    assert table(sessionize(existing + [ev(late)])) == after
    assert table(sessionize([ev(late)] + existing[::-1])) == after


def test_the_seed_day_alone_is_the_seeds_three_sessions():
    assert table(sessionize(SEED_DAY)) == [S1, S2, S3]
    assert table(sessionize(DAY_BEFORE + SEED_DAY + DAY_AFTER)) == [BEFORE, S1, S2, S3, AFTER]


def test_one_late_event_bridges_one_gap_so_three_sessions_need_two_to_become_one():
    # Three sessions 35 minutes apart: an event fills one gap, so a single one can merge only two of them.
    existing = (
        burst("2024-03-11 09:00", "2024-03-11 09:10", 3)
        + burst("2024-03-11 09:45", "2024-03-11 09:55", 3)
        + burst("2024-03-11 10:30", "2024-03-11 10:40", 3)
    )
    assert [s[2] for s in table(sessionize(existing))] == [3, 3, 3]
    assert table(sessionize(existing + [ev("2024-03-11 09:30")])) == [
        ("2024-03-11 09:00", "2024-03-11 09:55", 7, "2024-03-11", False),
        ("2024-03-11 10:30", "2024-03-11 10:40", 3, "2024-03-11", False),
    ]
    # one received day bringing an event for each gap merges all three into one session
    assert table(sessionize(existing + [ev("2024-03-11 09:30"), ev("2024-03-11 10:10")])) == [
        ("2024-03-11 09:00", "2024-03-11 10:40", 11, "2024-03-11", False),
    ]


# --------------------------------------------------------------------------------------------------
# Sessions: the 30-minute gap and the 24-hour cap
# --------------------------------------------------------------------------------------------------

GAPS = [
    ("29_minutes", "2024-03-11 10:29", 1),
    ("exactly_30_minutes_does_not_split", "2024-03-11 10:30", 1),
    ("30_minutes_and_a_microsecond_splits", "2024-03-11 10:30:00.000001", 2),
    ("31_minutes", "2024-03-11 10:31", 2),
]


@pytest.mark.parametrize("second, sessions", [g[1:] for g in GAPS], ids=[g[0] for g in GAPS])
def test_the_gap_rule(second, sessions):
    assert len(sessionize([ev("2024-03-11 10:00"), ev(second)])) == sessions


def test_the_gap_is_configurable():
    pair = [ev("2024-03-11 10:00"), ev("2024-03-11 10:10")]
    assert len(sessionize(pair, Settings(session_gap_minutes=10))) == 1
    assert len(sessionize(pair, Settings(session_gap_minutes=9))) == 2


def test_a_bot_chain_of_more_than_48_hours_is_cut_into_24_hour_sessions():
    start = T("2024-03-01 00:00")
    chain = [ev(start + timedelta(minutes=10 * i), "bot") for i in range(301)]  # every 10 minutes for 50 h
    assert table(sessionize(chain)) == [
        ("2024-03-01 00:00", "2024-03-02 00:00", 145, "2024-03-01", True),  # 24 h exactly: not over the cap
        ("2024-03-02 00:10", "2024-03-03 00:10", 145, "2024-03-02", True),
        ("2024-03-03 00:20", "2024-03-03 02:00", 11, "2024-03-03", False),  # the last one ends by itself
    ]


def test_a_session_past_the_cap_that_also_goes_quiet_ended_by_the_gap():
    chain = [ev(T("2024-03-01 00:00") + timedelta(minutes=10 * i)) for i in range(145)]  # 00:00 .. +24 h
    sessions = table(sessionize(chain + [ev("2024-03-02 01:00")]))  # 60 min later: over the gap and the cap
    assert sessions == [
        ("2024-03-01 00:00", "2024-03-02 00:00", 145, "2024-03-01", False),
        ("2024-03-02 01:00", "2024-03-02 01:00", 1, "2024-03-02", False),
    ]


def test_the_cap_is_configurable():
    chain = [ev(T("2024-03-01 00:00") + timedelta(minutes=20 * i)) for i in range(7)]  # 00:00 .. 02:00
    assert [(s[0][-5:], s[1][-5:], s[4]) for s in table(sessionize(chain, Settings(max_session_hours=1)))] == [
        ("00:00", "01:00", True),
        ("01:20", "02:00", False),
    ]


def test_sessions_are_per_user_and_events_at_the_same_moment_all_count():
    events = [
        ev("2024-03-11 10:00", "a"),
        ev("2024-03-11 10:00", "a"),
        ev("2024-03-11 10:20", "b"),
        ev("2024-03-11 10:30", "a"),
    ]
    assert [(s["user_key"], s["num_events"]) for s in sessionize(events)] == [("a", 3), ("b", 1)]


def test_sessionize_does_not_depend_on_input_order():
    events = SEED_DAY + DAY_BEFORE + DAY_AFTER + [ev("2019-10-23 09:45")]
    assert sessionize(events) == sessionize(events[::-1]) == sessionize(sorted(events, key=lambda e: e["message_id"]))
