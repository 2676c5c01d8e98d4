"""The pipeline's Delta tables against the oracle's full recompute, row by row, every column."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date
from pathlib import Path

from sessions_assets.graph.partitions import bounds, calendars
from sessions_assets.settings import Settings
from sessions_assets.warehouse.delta import Warehouse
from sessions_assets.warehouse.storage import Storage
from sessions_assets.warehouse.tables import (
    DAILY_SNAPSHOT,
    EVENTS,
    IDENTITIES,
    PARTITION_MAP,
    RAW_EVENTS,
    RECEIVED_DAYS,
    REJECTED_EVENTS,
    SESSIONS,
    USERS,
)
from sessions_assets_tests.helpers import reference
from sessions_assets_tests.helpers.landing import landing_lines

SESSION_COLUMNS = SESSIONS.columns
SNAPSHOT_COLUMNS = DAILY_SNAPSHOT.columns
USER_COLUMNS = USERS.columns
ORACLE_EVENT_FIELDS = (
    "message_id",
    "user_key",
    "type",
    "event",
    "timestamp",
    "received_at",
    "page_path",
    "referrer",
    "utm_source",
    "utm_medium",
    "utm_campaign",
    "user_agent",
    "device_type",
    "revenue",
    "source_id",
    "event_date",
)


def as_utc(value):
    return value.replace(tzinfo=UTC) if hasattr(value, "hour") and value.tzinfo is None else value


def rows(df, columns) -> Counter:
    """A DataFrame's rows as a multiset of tuples (timestamps as aware UTC datetimes)."""
    return Counter(tuple(as_utc(r[c]) for c in columns) for r in df.select(*columns).collect())


def oracle_rows(records: list[dict], columns) -> Counter:
    return Counter(tuple(r[c] for c in columns) for r in records)


def assert_tables_match_oracle(
    wh: Warehouse,
    root: Path,
    oracle: dict | None = None,
    landing: Storage | None = None,
    forgotten=frozenset(),
    time_zone: str = "UTC",
) -> dict:
    """Every table equals what the oracle computes from all landing lines at once (those under ``root``); returns
    the oracle. ``landing``: the data root whose landing folders were ingested, if not the warehouse's;
    ``forgotten``: the userIds forgotten (the oracle leaves their lines out); ``time_zone``: the instance's (the
    oracle computes its local days itself)."""
    rules = reference.Settings(time_zone=time_zone)
    oracle = oracle or reference.recompute(landing_lines(root), rules, forgotten=set(forgotten))
    assert rows(wh.read(RAW_EVENTS), ["message_id", "received_date", "source_id"]) == Counter(
        (e["message_id"], date.fromisoformat(e["received_date"]), e["source_id"]) for e in oracle["accepted"]
    )
    accepted = Counter((date.fromisoformat(e["received_date"]), e["event_date"]) for e in oracle["accepted"])
    assert rows(wh.read(PARTITION_MAP), ["received_date", "event_date", "events"]) == Counter(
        (*key, n) for key, n in accepted.items()
    )
    # What the planner reads: each landing folder's fingerprint now, and its accepted lines.
    per_day = Counter(received for received, _ in accepted.elements())
    lo, hi = bounds(calendars(Settings(time_zone=time_zone)).received)  # the tests' instances: the default start
    landing = landing or wh.storage
    folders = [f.day for f in landing.landing_folders() if f.day is not None and lo <= f.day <= hi]
    assert {r.received_date: (r.fingerprint, r.accepted) for r in wh.read(RECEIVED_DAYS).collect()} == {
        day: (landing.fingerprint(day), per_day[day]) for day in folders
    }
    line_rejects = wh.read(REJECTED_EVENTS).where("payload IS NOT NULL")
    assert rows(line_rejects, ["received_date", "payload", "reason", "source_id"]) == Counter(
        (date.fromisoformat(d), payload, reason, source) for d, payload, reason, source in oracle["rejected"]
    )
    assert rows(wh.read(EVENTS), ORACLE_EVENT_FIELDS) == oracle_rows(oracle["events"], ORACLE_EVENT_FIELDS)
    assert_same(rows(wh.read(SESSIONS), SESSION_COLUMNS), oracle_rows(oracle["sessions"], SESSION_COLUMNS), "sessions")
    assert_same(
        rows(wh.read(DAILY_SNAPSHOT), SNAPSHOT_COLUMNS),
        oracle_rows(oracle["snapshot"], SNAPSHOT_COLUMNS),
        "daily_snapshot",
    )
    assert_same(rows(wh.read(USERS), USER_COLUMNS), oracle_rows(oracle["users"], USER_COLUMNS), "users")
    assert_identities_match(wh, oracle["events"])
    return oracle


def assert_identities_match(wh: Warehouse, events: list[dict]) -> None:
    """The internal ``identities`` tallies the kept events: per (person, anonymous id, user id) their count and
    latest link exactly, and a span of days that holds every one of them."""
    expected: dict[tuple, dict] = {}
    for e in events:
        tally = expected.setdefault((e["user_key"], e["anonymous_id"], e["user_id"]), {"events": 0, "days": set()})
        tally["events"] += 1
        tally["days"].add(e["event_date"])
        if e["user_id"] is not None and e["anonymous_id"] is not None:
            tally["link"] = max(tally.get("link", (e["timestamp"], e["message_id"])), (e["timestamp"], e["message_id"]))
    stored = {(r.user_key, r.anonymous_id, r.user_id): r for r in wh.read(IDENTITIES).collect()}
    assert set(stored) == set(expected), f"identities: keys differ by {set(stored) ^ set(expected)}"
    for key, tally in expected.items():
        row = stored[key]
        assert row.events == tally["events"], f"identities {key}: {row.events} events, not {tally['events']}"
        assert row.first_day <= min(tally["days"]) and row.last_day >= max(tally["days"]), f"identities {key} days"
        link = (as_utc(row.link_at), row.link_id) if row.link_at is not None else None
        assert link == tally.get("link"), f"identities {key}: link {link}, not {tally.get('link')}"


def assert_same(actual: Counter, expected: Counter, what: str) -> None:
    """Multisets of rows are equal; on failure, the rows each side has that the other lacks."""
    missing, extra = expected - actual, actual - expected
    assert not missing and not extra, f"{what}: missing {list(missing)[:5]}, unexpected {list(extra)[:5]}"
