"""Comparing the pipeline's Delta tables with the oracle's full recompute, as multisets of rows."""

from __future__ import annotations

import gzip
from collections import Counter
from datetime import timezone
from pathlib import Path

from sessions_assets.tables import DAILY_SNAPSHOT, EVENTS, RAW_EVENTS, REJECTED_EVENTS, SESSIONS, Warehouse
from sessions_assets_tests import reference


def landing_lines(root: Path) -> dict[str, list[str]]:
    """Every line of the landing zone, by received day, read plainly (gzip included)."""
    by_day: dict[str, list[str]] = {}
    for path in sorted((Path(root) / "landing").glob("received_date=*/*")):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            lines = f.read().splitlines()
        by_day.setdefault(path.parent.name.split("=")[1], []).extend(lines)
    return by_day


def assert_tables_match_oracle(wh: Warehouse, root: Path) -> None:
    """Every table equals what the oracle computes from all landing lines at once."""
    oracle = reference.recompute(landing_lines(root))
    assert wh.read(RAW_EVENTS).count() == len(oracle["accepted"])
    assert Counter(r.reason for r in wh.read(REJECTED_EVENTS).collect()) == Counter(r[2] for r in oracle["rejected"])
    assert sorted(r.message_id for r in wh.read(EVENTS).collect()) == sorted(e["message_id"] for e in oracle["events"])
    actual = Counter(
        (r.user_key, r.session_start.replace(tzinfo=timezone.utc), r.session_end.replace(tzinfo=timezone.utc),
         r.num_events, r.ended_by_cap, r.session_date)
        for r in wh.read(SESSIONS).collect()
    )  # fmt: skip
    expected = Counter(
        (s["user_key"], s["session_start"], s["session_end"], s["num_events"], s["ended_by_cap"], s["session_date"])
        for s in oracle["sessions"]
    )
    assert actual == expected
    snapshot = {(r.snapshot_date, r.state): (r.users_on_hand, r.users_entered, r.users_exited)
                for r in wh.read(DAILY_SNAPSHOT).collect()}  # fmt: skip
    assert snapshot == {
        (r["snapshot_date"], r["state"]): (r["users_on_hand"], r["users_entered"], r["users_exited"])
        for r in oracle["snapshot"]
    }
