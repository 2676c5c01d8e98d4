"""The pipeline's Delta tables against the oracle's full recompute, row by row, every column (the tables read with
delta-rs: ``stored``)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date
from pathlib import Path

from sessions_assets.graph.partitions import bounds, calendars
from sessions_assets.settings import Settings
from sessions_assets.warehouse.delta import DeltaLog, Warehouse
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


def stored(wh: Warehouse, table, columns, where: str | None = None) -> list[dict]:
    """A table's rows (of ``columns``, those ``where`` holds), read from its files with delta-rs's query engine
    rather than through the Spark server, which then spends nothing on checking: ``pipeline/test_readers.py``
    proves that both read every table alike, deletion vectors included. A column the table does not hold yet
    reads as null, as ``Warehouse.read`` gives it; a table not created yet has no rows."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    if DeltaLog(wh.storage, table).version() is None:
        return []
    found = DeltaTable(wh.storage.path_of(wh.uri(table)))
    present = {field.name for field in found.schema().fields}
    selected = ", ".join(f'"{c}"' if c in present else f'NULL AS "{c}"' for c in columns)
    query = f"SELECT {selected} FROM t" + (f" WHERE {where}" if where else "")
    return pa.table(QueryBuilder().register("t", found).execute(query).read_all()).to_pylist()


def stored_rows(wh: Warehouse, table, columns, where: str | None = None) -> Counter:
    """``stored``'s rows as ``rows`` gives a DataFrame's."""
    return Counter(tuple(as_utc(r[c]) for c in columns) for r in stored(wh, table, columns, where))


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
    assert stored_rows(wh, RAW_EVENTS, ["message_id", "received_date", "source_id"]) == Counter(
        (e["message_id"], date.fromisoformat(e["received_date"]), e["source_id"]) for e in oracle["accepted"]
    )
    accepted = Counter((date.fromisoformat(e["received_date"]), e["event_date"]) for e in oracle["accepted"])
    assert stored_rows(wh, PARTITION_MAP, ["received_date", "event_date", "events"]) == Counter(
        (*key, n) for key, n in accepted.items()
    )
    # What the planner reads: each landing folder's fingerprint now, and its accepted lines.
    per_day = Counter(received for received, _ in accepted.elements())
    lo, hi = bounds(calendars(Settings(time_zone=time_zone)).received)  # the tests' instances: the default start
    landing = landing or wh.storage
    folders = [f.day for f in landing.landing_folders() if f.day is not None and lo <= f.day <= hi]
    read = stored(wh, RECEIVED_DAYS, ["received_date", "fingerprint", "accepted"])
    assert {r["received_date"]: (r["fingerprint"], r["accepted"]) for r in read} == {
        day: (landing.fingerprint(day), per_day[day]) for day in folders
    }
    line_rejects = stored_rows(
        wh, REJECTED_EVENTS, ["received_date", "payload", "reason", "source_id"], "payload IS NOT NULL"
    )
    assert line_rejects == Counter(
        (date.fromisoformat(d), payload, reason, source) for d, payload, reason, source in oracle["rejected"]
    )
    assert stored_rows(wh, EVENTS, ORACLE_EVENT_FIELDS) == oracle_rows(oracle["events"], ORACLE_EVENT_FIELDS)
    assert_same(
        stored_rows(wh, SESSIONS, SESSION_COLUMNS), oracle_rows(oracle["sessions"], SESSION_COLUMNS), "sessions"
    )
    assert_same(
        stored_rows(wh, DAILY_SNAPSHOT, SNAPSHOT_COLUMNS),
        oracle_rows(oracle["snapshot"], SNAPSHOT_COLUMNS),
        "daily_snapshot",
    )
    assert_same(stored_rows(wh, USERS, USER_COLUMNS), oracle_rows(oracle["users"], USER_COLUMNS), "users")
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
    tallied = {(r["user_key"], r["anonymous_id"], r["user_id"]): r for r in stored(wh, IDENTITIES, IDENTITIES.columns)}
    assert set(tallied) == set(expected), f"identities: keys differ by {set(tallied) ^ set(expected)}"
    for key, tally in expected.items():
        row = tallied[key]
        assert row["events"] == tally["events"], f"identities {key}: {row['events']} events, not {tally['events']}"
        spans = row["first_day"] <= min(tally["days"]) and row["last_day"] >= max(tally["days"])
        assert spans, f"identities {key} days"
        link = (as_utc(row["link_at"]), row["link_id"]) if row["link_at"] is not None else None
        assert link == tally.get("link"), f"identities {key}: link {link}, not {tally.get('link')}"


def assert_same(actual: Counter, expected: Counter, what: str) -> None:
    """Multisets of rows are equal; on failure, the rows each side has that the other lacks."""
    missing, extra = expected - actual, actual - expected
    assert not missing and not extra, f"{what}: missing {list(missing)[:5]}, unexpected {list(extra)[:5]}"
