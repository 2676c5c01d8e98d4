"""Tests of the oracle's tables (``reference.py``): the daily accumulating snapshot, a whole recompute from landing
lines, what a session says (its number, landing page, source, device) and persons. Pure Python, exact values worked
out by hand, as ``test_reference.py`` does for acceptance and sessions.
"""

from __future__ import annotations

import itertools
from datetime import date, timedelta

import pytest

from sessions_assets_tests.engine.events import call
from sessions_assets_tests.helpers.cases import T, line
from sessions_assets_tests.helpers.reference import (
    Settings,
    daily_snapshot,
    recompute,
    sessionize,
    state_on,
    stitch,
    users,
)
from sessions_assets_tests.helpers.seed_day import SEED_DAY, ev, table

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
