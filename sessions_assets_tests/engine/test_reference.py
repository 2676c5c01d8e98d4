"""Tests of the oracle itself (``reference.py``): pure Python, fast, exact values worked out by hand.

If the oracle were wrong, every comparison of the Spark pipeline with it would be meaningless, so the
contract's cases are written down here one by one, the late-event cases as in the seed (a user's sessions
on 2019-10-23 and a late event that lands inside, between, across midnight, ...).
"""

from __future__ import annotations

import itertools
from datetime import date, datetime, timedelta

import pytest

from sessions_assets_tests import cases
from sessions_assets_tests.cases import ACCEPTED, DROP, REJECTED, REVENUES, T, line, with_revenue
from sessions_assets_tests.engine.events import call
from sessions_assets_tests.reference import (
    Settings,
    accept_landing,
    accept_line,
    daily_snapshot,
    dedupe,
    parse_timestamp,
    recompute,
    sessionize,
    state_on,
    stitch,
    users,
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

_ids = itertools.count()


def ev(at: str | datetime, user: str = "jml") -> dict:
    """One accepted event of ``user`` at ``at`` (UTC), with a fresh message id."""
    moment = T(at) if isinstance(at, str) else at
    return {"message_id": f"m-{next(_ids):05d}", "user_key": user, "timestamp": moment}


def burst(start: str, end: str, n: int, user: str = "jml") -> list[dict]:
    """``n`` events spread evenly from ``start`` to ``end`` (both included)."""
    first, last = T(start), T(end)
    return [ev(first + (last - first) * i / (n - 1), user) for i in range(n)]


def table(sessions: list[dict]) -> list[tuple]:
    """Sessions as the seed draws them: (start, end, num_events), plus the partition and the cap flag."""
    return sorted(
        (
            s["session_start"].strftime("%Y-%m-%d %H:%M"),
            s["session_end"].strftime("%Y-%m-%d %H:%M"),
            s["num_events"],
            s["session_date"].isoformat(),
            s["ended_by_cap"],
        )
        for s in sessions
    )


# The seed's user on 2019-10-23: sessions 09:21-09:30 (10 events), 10:05-10:23 (15), 13:25-14:10 (20).
SEED_DAY = (
    burst("2019-10-23 09:21", "2019-10-23 09:30", 10)
    + burst("2019-10-23 10:05", "2019-10-23 10:23", 15)
    + burst("2019-10-23 13:25", "2019-10-23 14:10", 20)
)
DAY_BEFORE = burst("2019-10-22 23:50", "2019-10-22 23:59", 4)
DAY_AFTER = burst("2019-10-24 00:01", "2019-10-24 00:20", 5)

S1 = ("2019-10-23 09:21", "2019-10-23 09:30", 10, "2019-10-23", False)
S2 = ("2019-10-23 10:05", "2019-10-23 10:23", 15, "2019-10-23", False)
S3 = ("2019-10-23 13:25", "2019-10-23 14:10", 20, "2019-10-23", False)
BEFORE = ("2019-10-22 23:50", "2019-10-22 23:59", 4, "2019-10-22", False)
AFTER = ("2019-10-24 00:01", "2019-10-24 00:20", 5, "2019-10-24", False)

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


# --------------------------------------------------------------------------------------------------
# The daily accumulating snapshot
# --------------------------------------------------------------------------------------------------

DAY0 = date(2024, 1, 1)


def day(n: int) -> date:
    return DAY0 + timedelta(days=n)


def on(*pairs: tuple[str, int]) -> list[dict]:
    """Sessions as the snapshot sees them: (user, day number)."""
    return [{"user_key": user, "session_date": day(n)} for user, n in pairs]


def rows_by_day(rows: list[dict]) -> dict[int, list[tuple]]:
    """{day number: [(state, on_hand, entered, exited, avg_days_in_state), ...]} in state order."""
    out: dict[int, list[tuple]] = {}
    for r in rows:
        n = (r["snapshot_date"] - DAY0).days
        out.setdefault(n, []).append(
            (r["state"], r["users_on_hand"], r["users_entered"], r["users_exited"], r["avg_days_in_state"])
        )
    return out


def test_a_user_goes_new_active_lapsing_dormant_churned():
    ann = {day(0), day(1)}
    states = [state_on(day(n), ann, Settings()) for n in range(-1, 36)]
    assert states == [None, "new", "active"] + ["lapsing"] * 7 + ["dormant"] * 23 + ["churned"] * 4
    by_day = rows_by_day(daily_snapshot(on(("ann", 0), ("ann", 1)), day(35)))
    assert by_day[0] == [("new", 1, 1, 0, 0.0)]
    assert by_day[1] == [("new", 0, 0, 1, 0.0), ("active", 1, 1, 0, 0.0)]
    assert by_day[2] == [("active", 0, 0, 1, 0.0), ("lapsing", 1, 1, 0, 0.0)]
    assert by_day[8] == [("lapsing", 1, 0, 0, 6.0)]  # idle 7 days, lapsing for 6
    assert by_day[9] == [("lapsing", 0, 0, 1, 0.0), ("dormant", 1, 1, 0, 0.0)]
    assert by_day[31] == [("dormant", 1, 0, 0, 22.0)]  # idle 30 days
    assert by_day[32] == [("dormant", 0, 0, 1, 0.0), ("churned", 1, 1, 0, 0.0)]
    assert by_day[35] == [("churned", 1, 0, 0, 3.0)]
    assert sorted(by_day) == list(range(36))  # a row every day up to the horizon, none after


def test_active_on_consecutive_days_stays_in_its_state():
    by_day = rows_by_day(daily_snapshot(on(("ann", 0), ("ann", 1), ("ann", 2), ("ann", 3)), day(3)))
    assert by_day[2] == [("active", 1, 0, 0, 1.0)]
    assert by_day[3] == [("active", 1, 0, 0, 2.0)]


def test_a_user_whose_state_changes_twice_in_a_day_counts_once():
    # bob's last session was day 1. On day 9 he would turn dormant (8 idle days) at midnight, but he comes
    # back that day: at the end of day 9 he is active. Lapsing -> active, once; dormant never sees him.
    # Two sessions on day 0 make him new once.
    by_day = rows_by_day(daily_snapshot(on(("bob", 0), ("bob", 0), ("bob", 1), ("bob", 9)), day(10)))
    assert by_day[0] == [("new", 1, 1, 0, 0.0)]
    assert by_day[9] == [("active", 1, 1, 0, 0.0), ("lapsing", 0, 0, 1, 0.0)]
    assert by_day[10] == [("active", 0, 0, 1, 0.0), ("lapsing", 1, 1, 0, 0.0)]
    assert all(state != "dormant" for rows in by_day.values() for state, *_ in rows)


def test_a_small_example_worked_out_by_hand():
    # Short thresholds so every state shows up within a week: lapsing 1 idle day, dormant 2, churned 3+.
    #            d0     d1       d2       d3       d4       d5       d6       d7
    #   ann:     new    lapsing  dormant  active   lapsing  dormant  churned  churned
    #   bob:     -      new      active   lapsing  dormant  churned  churned  churned
    #   cy:      -      new      lapsing  dormant  churned  churned  churned  churned
    settings = Settings(lapsing_days=1, dormant_days=2)
    sessions = on(("ann", 0), ("ann", 3), ("bob", 1), ("bob", 2), ("bob", 2), ("cy", 1))
    assert rows_by_day(daily_snapshot(sessions, day(7), settings)) == {
        0: [("new", 1, 1, 0, 0.0)],
        1: [("new", 2, 2, 1, 0.0), ("lapsing", 1, 1, 0, 0.0)],
        2: [("new", 0, 0, 2, 0.0), ("active", 1, 1, 0, 0.0), ("lapsing", 1, 1, 1, 0.0), ("dormant", 1, 1, 0, 0.0)],
        3: [("active", 1, 1, 1, 0.0), ("lapsing", 1, 1, 1, 0.0), ("dormant", 1, 1, 1, 0.0)],
        4: [("active", 0, 0, 1, 0.0), ("lapsing", 1, 1, 1, 0.0), ("dormant", 1, 1, 1, 0.0), ("churned", 1, 1, 0, 0.0)],
        5: [("lapsing", 0, 0, 1, 0.0), ("dormant", 1, 1, 1, 0.0), ("churned", 2, 1, 0, 0.5)],  # cy 1 d, bob 0
        6: [("dormant", 0, 0, 1, 0.0), ("churned", 3, 1, 0, 1.0)],  # cy 2, bob 1, ann 0
        7: [("churned", 3, 0, 0, 2.0)],  # cy 3, bob 2, ann 1
    }


def test_on_hand_is_the_previous_day_plus_entered_minus_exited():
    sessions = on(("ann", 0), ("ann", 3), ("bob", 1), ("bob", 2), ("cy", 1), ("dee", 5), ("dee", 6), ("ann", 12))
    rows = daily_snapshot(sessions, day(50))
    on_hand = {(r["snapshot_date"], r["state"]): r for r in rows}
    for r in rows:
        before = on_hand.get((r["snapshot_date"] - timedelta(days=1), r["state"]))
        assert r["users_on_hand"] == (before["users_on_hand"] if before else 0) + r["users_entered"] - r["users_exited"]
    for n in range(51):
        assert sum(r["users_on_hand"] for r in rows if r["snapshot_date"] == day(n)) == len(
            {u for u, first in (("ann", 0), ("bob", 1), ("cy", 1), ("dee", 5)) if first <= n}
        )


AVERAGES = [
    # (id, sessions, horizon day, state, expected avg_days_in_state)
    ("two_thirds_round_up", [("x", 0), ("y", 0), ("z", 1)], 2, "lapsing", 0.6667),  # ages 1, 1, 0
    ("five_thirds", [("x", 0), ("y", 0), ("z", 1)], 3, "lapsing", 1.6667),  # ages 2, 2, 1
    ("halves_round_up", [("old", 0)] + [(f"u{i}", 1) for i in range(31)], 2, "lapsing", 0.0313),  # 1/32
]


@pytest.mark.parametrize("sessions, horizon, state, average", [a[1:] for a in AVERAGES], ids=[a[0] for a in AVERAGES])
def test_average_days_in_state_is_rounded_to_4_decimals(sessions, horizon, state, average):
    [row] = [
        r
        for r in daily_snapshot(on(*sessions), day(horizon))
        if r["snapshot_date"] == day(horizon) and r["state"] == state
    ]
    assert row["avg_days_in_state"] == average


def test_the_snapshot_stops_at_the_horizon_and_ignores_later_sessions():
    rows = daily_snapshot(on(("ann", 0), ("ann", 5), ("bob", 6)), day(3))
    assert max(r["snapshot_date"] for r in rows) == day(3)
    assert rows_by_day(rows)[3] == [("lapsing", 1, 0, 0, 2.0)]
    assert daily_snapshot(on(("bob", 6)), day(3)) == []
    assert daily_snapshot([], day(3)) == []


def test_the_snapshot_starts_at_the_first_session_day():
    rows = daily_snapshot(on(("hal", 3), ("hal", 4)), day(6))
    assert min(r["snapshot_date"] for r in rows) == day(3)


# --------------------------------------------------------------------------------------------------
# Everything at once
# --------------------------------------------------------------------------------------------------


def test_recompute_from_landing_lines():
    def msg(mid: str, user: str, at: str, received: str) -> str:
        return line(messageId=mid, userId=user, timestamp=at, receivedAt=received)

    landing = {
        "2024-03-10": [msg("a1", "ann", "2024-03-10T23:50:00Z", "2024-03-10T23:50:05Z"), "not json"],
        "2024-03-12": [
            msg("a2", "ann", "2024-03-11T00:15:00Z", "2024-03-12T08:00:00Z"),  # late: joins the 23:50 session
            msg("a1", "ann", "2024-03-10T23:50:00Z", "2024-03-12T08:00:00Z"),  # re-delivered: dropped
            msg("b1", "bob", "2024-03-12T10:00:00Z", "2024-03-12T10:00:01Z"),
            msg("b2", "bob", "2024-03-12T13:00:00Z", "2024-03-12T10:00:01Z"),  # 3 h in the future
        ],
    }
    out = recompute(landing)
    assert [e["message_id"] for e in out["accepted"]] == ["a1", "a2", "a1", "b1"]
    assert [(d, reason) for d, _, reason, _ in out["rejected"]] == [
        ("2024-03-10", "malformed_json"),
        ("2024-03-12", "future_timestamp"),
    ]
    assert [(e["message_id"], e["received_date"]) for e in out["events"]] == [
        ("a1", "2024-03-10"),
        ("a2", "2024-03-12"),
        ("b1", "2024-03-12"),
    ]
    assert table(out["sessions"]) == [
        ("2024-03-10 23:50", "2024-03-11 00:15", 2, "2024-03-10", False),
        ("2024-03-12 10:00", "2024-03-12 10:00", 1, "2024-03-12", False),
    ]
    snapshot = {
        (r["snapshot_date"].isoformat(), r["state"]): (r["users_on_hand"], r["users_entered"], r["users_exited"])
        for r in out["snapshot"]
    }
    assert snapshot == {
        ("2024-03-10", "new"): (1, 1, 0),
        ("2024-03-11", "new"): (0, 0, 1),
        ("2024-03-11", "lapsing"): (1, 1, 0),
        ("2024-03-12", "lapsing"): (1, 0, 0),
        ("2024-03-12", "new"): (1, 1, 0),
    }  # the horizon is the latest received day: nothing after 2024-03-12
    assert recompute({}) == {"accepted": [], "rejected": [], "events": [], "sessions": [], "snapshot": [], "users": []}


# --------------------------------------------------------------------------------------------------
# What a session says: its number, its first and last events, where it landed and came from, its device
# --------------------------------------------------------------------------------------------------


def numbered(sessions: list[dict]) -> list[tuple]:
    return [(s["session_number"], s["session_start"].strftime("%H:%M"), s["num_events"]) for s in sessions]


def test_the_seeds_case_3_numbers_sessions_in_start_order():
    before = sessionize(SEED_DAY)
    assert numbered(before) == [(1, "09:21", 10), (2, "10:05", 15), (3, "13:25", 20)]
    after = sessionize(SEED_DAY + [ev("2019-10-23 11:15")])
    assert numbered(after) == [(1, "09:21", 10), (2, "10:05", 15), (3, "11:15", 1), (4, "13:25", 20)]


def test_a_merge_closes_the_numbering_gap():
    assert numbered(sessionize(SEED_DAY + [ev("2019-10-23 09:45")])) == [(1, "09:21", 26), (2, "13:25", 20)]


def page(at: str, path: str | None, **fields) -> dict:
    return {**ev(at), "type": "page", "page_path": path, **fields}


def test_attributes_come_from_the_first_and_last_events_carrying_them():
    events = [
        {**ev("2024-03-11 10:00"), "type": "identify"},
        page("2024-03-11 10:01", "/home", referrer="https://news.example/", utm_medium="email"),
        {**ev("2024-03-11 10:02"), "type": "track", "event": "Signed Up", "utm_source": "partner"},
        page("2024-03-11 10:03", "/pricing"),
        {**ev("2024-03-11 10:04"), "type": "track", "event": None},
    ]
    [s] = sessionize(events)
    assert {
        k: s[k]
        for k in (
            "first_event",
            "last_event",
            "page_views",
            "landing_path",
            "exit_path",
            "referrer",
            "utm_source",
            "utm_medium",
            "utm_campaign",
            "duration_seconds",
        )
    } == {
        "first_event": "identify",
        "last_event": None,
        "page_views": 2,
        "landing_path": "/home",
        "exit_path": "/pricing",
        "referrer": "https://news.example/",
        # the first event carrying a campaign gives all three fields, even those it leaves empty
        "utm_source": None,
        "utm_medium": "email",
        "utm_campaign": None,
        "duration_seconds": 240.0,
    }


def test_a_late_first_event_becomes_the_landing_page():
    visit = [page("2024-03-11 10:05", "/pricing", referrer="https://a/"), page("2024-03-11 10:06", "/checkout")]
    late = page("2024-03-11 09:50", "/blog", referrer="https://b/", utm_source="news")
    [before], [after] = sessionize(visit), sessionize(visit + [late])
    assert (before["landing_path"], before["referrer"], before["utm_source"]) == ("/pricing", "https://a/", None)
    assert (after["landing_path"], after["referrer"], after["utm_source"]) == ("/blog", "https://b/", "news")


DEVICES = [
    (
        "desktop_agent",
        {
            "user_agent": "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
            "Chrome/124.0 Safari/537.36"
        },
        "desktop",
    ),
    (
        "phone_agent",
        {
            "user_agent": "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 "
            "(KHTML, like Gecko) Mobile/15E148"
        },
        "mobile",
    ),
    (
        "tablet_agent_without_the_word",
        {
            "user_agent": "Mozilla/5.0 (Linux; Android 13; SM-X700) AppleWebKit/537.36 "
            "(KHTML, like Gecko) Chrome/120.0 Safari/537.36"
        },
        "tablet",
    ),
    ("mobile_library_as_sent", {"device_type": "ios"}, "ios"),
    ("agent_wins_over_device_type", {"device_type": "android", "user_agent": "curl/8.0"}, "desktop"),
    ("nothing_sent", {}, None),
]


@pytest.mark.parametrize("fields, device", [d[1:] for d in DEVICES], ids=[d[0] for d in DEVICES])
def test_device_type_from_the_first_user_agent_else_the_first_device_type(fields, device):
    [s] = sessionize([{**ev("2024-03-11 10:00"), **fields}])
    assert s["device_type"] == device


def test_a_copy_with_a_shifted_timestamp_is_kept_once_where_the_first_received_copy_says():
    original = line(messageId="m-9", timestamp="2024-03-11T00:00:05Z", receivedAt="2024-03-11T00:00:06Z")
    early_copy = line(messageId="m-9", timestamp="2024-03-10T23:59:58Z", receivedAt="2024-03-10T23:59:59Z")
    for days in (
        {"2024-03-11": [original], "2024-03-10": [early_copy]},
        {"2024-03-10": [early_copy], "2024-03-11": [original]},
    ):
        out = recompute(days)
        assert [(e["message_id"], e["timestamp"]) for e in out["events"]] == [("m-9", T("2024-03-10 23:59:58"))]
        assert [s["session_date"] for s in out["sessions"]] == [date(2024, 3, 10)]


def _call(message_id: str, user_id: str | None, anonymous_id: str | None, moment: str) -> dict:
    return call(message_id, user_id, anonymous_id, T(moment), type="page")


def test_two_anonymous_sessions_become_the_users_sessions_1_and_2_once_the_login_is_known():
    browsing = [_call("v1", None, "a-7f3", "2024-03-09 10:00"), _call("v2", None, "a-7f3", "2024-03-10 18:00")]
    login = [_call("l1", "u42", "a-7f3", "2024-03-11 09:21")]
    before = sessionize(stitch(browsing + [_call("l0", "u42", None, "2024-03-11 09:21")]))
    assert [(s["user_key"], s["session_number"]) for s in before] == [("a-7f3", 1), ("a-7f3", 2), ("u42", 1)]
    after = sessionize(stitch(browsing + login))
    assert [(s["user_key"], s["session_number"]) for s in after] == [("u42", 1), ("u42", 2), ("u42", 3)]
    [person] = users(stitch(browsing + login), after)
    assert (person["user_key"], person["user_id"], person["sessions"], person["anonymous_ids"]) == ("u42", "u42", 3, 1)


def test_a_shared_device_belongs_to_its_latest_login_whatever_the_order():
    calls = [
        _call("b", None, "shared", "2024-03-09 08:00"),
        _call("c", "cy", "shared", "2024-03-09 08:05"),
        _call("d", "dee", "shared", "2024-03-10 09:00"),
    ]
    for order in itertools.permutations(calls):
        assert {e["message_id"]: e["user_key"] for e in stitch(list(order))} == {"b": "dee", "c": "cy", "d": "dee"}
