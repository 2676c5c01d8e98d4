"""End to end: ``sessions-assets generate`` then ``sessions-assets run``, compared with a full recompute."""

from __future__ import annotations

import gzip
from collections import Counter
from datetime import timezone
from pathlib import Path

from sessions_assets.cli import main
from sessions_assets.definitions import build_resources
from sessions_assets.tables import DAILY_SNAPSHOT, EVENTS, RAW_EVENTS, REJECTED_EVENTS, SESSIONS, Warehouse
from sessions_assets_tests import reference


def _landing_lines(root: Path) -> dict[str, list[str]]:
    """Every line of the landing zone, by received day, read plainly (gzip included)."""
    by_day: dict[str, list[str]] = {}
    for path in sorted((root / "landing").glob("received_date=*/*")):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            lines = f.read().splitlines()
        by_day.setdefault(path.parent.name.split("=")[1], []).extend(lines)
    return by_day


def test_run_processes_a_generated_landing_zone_exactly_once(tmp_path, spark, monkeypatch, capsys):
    root = tmp_path / "data"
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    (tmp_path / "dagster_home").mkdir()
    assert main(["generate", "--data-root", str(root), "--days", "5", "--users", "12", "--seed", "3"]) == 0
    assert main(["run", "--data-root", str(root)]) == 0
    printed = capsys.readouterr().out
    assert printed.count("touched event days") == 5

    wh = Warehouse(spark, build_resources(data_root=str(root))["settings"])
    oracle = reference.recompute(_landing_lines(root))
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

    versions = {t.name: wh.version(t) for t in (RAW_EVENTS, EVENTS, SESSIONS, DAILY_SNAPSHOT)}
    assert main(["run", "--data-root", str(root)]) == 0
    assert "Nothing to do" in capsys.readouterr().out
    assert {t.name: wh.version(t) for t in (RAW_EVENTS, EVENTS, SESSIONS, DAILY_SNAPSHOT)} == versions
