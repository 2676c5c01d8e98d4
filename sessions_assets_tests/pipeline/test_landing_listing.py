"""What a landing sensor tick lists, counted on a real local file system: between full listings only the parent
folders and the files of the recent, new and still-due received days; every day's files once the full listing's
cadence has passed, which the cursor's recorded time says; ``run`` and ``status`` list everything, always."""

from __future__ import annotations

import json
from collections import Counter
from datetime import date, timedelta
from pathlib import Path

import pytest
from fsspec.implementations.local import LocalFileSystem

from sessions_assets.cli.generate import SOURCES, generate_landing_zone
from sessions_assets.cli.main import main
from sessions_assets.graph.cursor import LandingCursor
from sessions_assets.graph.resources import PipelineResource
from sessions_assets.warehouse.layouts import SegmentLayout
from sessions_assets.warehouse.storage import Storage
from sessions_assets_tests.helpers.landing import segment, write_day
from sessions_assets_tests.helpers.ticks import days_requested, tick

FIRST, LAST = date(2024, 3, 10), date(2024, 3, 14)  # five received days, ingested
NEW = LAST + timedelta(days=1)
HOUR = 3600
SEGMENT = SegmentLayout.root


class CountedFileSystem(LocalFileSystem):
    """The local file system, counting each folder it is asked to list."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.listed: Counter[str] = Counter()

    def ls(self, path, detail=False, **kwargs):
        self.listed[self._strip_protocol(path)] += 1
        return super().ls(path, detail=detail, **kwargs)


FILESYSTEMS: dict[str, CountedFileSystem] = {}  # by data root


class CountedPipeline(PipelineResource):
    """The pipeline's settings, its store's listings counted (in ``FILESYSTEMS``)."""

    def storage(self) -> Storage:
        storage = super().storage()
        storage.fs = FILESYSTEMS.setdefault(self.data_root, CountedFileSystem(skip_instance_cache=True))
        return storage


def counted_tick(runner, root: Path, cursor: str | None):
    """A tick, and the landing folders it listed (each once, or it says so), relative to ``landing/``."""
    fs = FILESYSTEMS.setdefault(str(root), CountedFileSystem(skip_instance_cache=True))
    fs.listed.clear()
    result = tick("landing_sensor", runner, root, cursor, pipeline=CountedPipeline(data_root=str(root)))
    landing = f"{root}/landing"
    listed = {p: n for p, n in fs.listed.items() if p == landing or p.startswith(landing + "/")}
    assert set(listed.values()) <= {1}, listed
    return result, {p.removeprefix(landing).lstrip("/") for p in listed}


def day_folders(root: Path, *days: date) -> set[str]:
    """The folders of those received days, relative to ``landing/`` (in Segment's layout, one per source)."""
    return {f.name for f in Storage(str(root)).landing_folders() if f.day in days}


def landed(runner, root: Path, layout: str):
    """Five received days in ``layout``, ingested, and a first tick: no cursor, so it lists every day's files."""
    generate_landing_zone(str(root), days=5, users=5, seed=3, end_date=LAST, layout=layout)
    runner.ingest(FIRST, LAST)
    first, listed = counted_tick(runner, root, None)
    assert not first.run_requests
    assert day_folders(root, *_days(FIRST, LAST)) <= listed
    return first


@pytest.mark.parametrize("layout", ["received_date", "segment"])
def test_a_tick_between_full_listings_lists_the_parent_folders_and_only_the_recent_and_new_days(
    layout, runner, data_root
):
    first = landed(runner, data_root, layout)
    before = LandingCursor.read(first.cursor)
    sources = [f"{SEGMENT}/{source}" for source in SOURCES] if layout == "segment" else []  # under landing/
    assert set(before.latest) == ({f"landing/{s}" for s in sources} or {"landing"}) and not before.pending
    assert set(before.latest.values()) == {LAST}
    generate_landing_zone(str(data_root), days=1, users=5, seed=4, end_date=NEW, layout=layout)  # the next day

    later, listed = counted_tick(runner, data_root, first.cursor)
    recent = day_folders(data_root, NEW - timedelta(days=2), NEW - timedelta(days=1), NEW)  # the last 3, NEW's new
    assert listed == {"", *([SEGMENT] if sources else []), *sources, *recent}  # landing/, its parent folders
    assert [days_requested(r) for r in later.run_requests] == [(str(NEW), str(NEW))]
    after = LandingCursor.read(later.cursor)
    assert after.listed_at == before.listed_at  # not a full listing
    assert set(after.latest.values()) == {NEW} and after.pending == {NEW}


def test_a_file_added_to_an_older_folder_waits_for_the_full_listing_but_run_and_status_see_it_at_once(
    runner, data_root, capsys, monkeypatch
):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)  # the command line's instance: under the data root
    first = landed(runner, data_root, "received_date")
    write_day(data_root, FIRST, [segment("late", "u1", f"{FIRST} 23:00")], name="part-0009.jsonl")
    folder = f"received_date={FIRST}"

    quick, listed = counted_tick(runner, data_root, first.cursor)
    assert not quick.run_requests and folder not in listed
    assert main(["status", "--data-root", str(data_root)]) == 0
    assert f"received days to ingest: {FIRST}\n" in capsys.readouterr().out

    cursor = LandingCursor.read(quick.cursor)
    an_hour_on = json.dumps({**json.loads(quick.cursor), "listed_at": cursor.listed_at - HOUR})
    full, listed = counted_tick(runner, data_root, an_hour_on)
    assert [days_requested(r) for r in full.run_requests] == [(str(FIRST), str(FIRST))]
    assert day_folders(data_root, *_days(FIRST, LAST)) <= listed
    after = LandingCursor.read(full.cursor)
    assert after.listed_at > cursor.listed_at and after.pending == {FIRST}

    # Still due, the day is looked at every tick, and asked for with the same key, until it is ingested.
    again, listed = counted_tick(runner, data_root, full.cursor)
    assert folder in listed and [r.run_key for r in again.run_requests] == [r.run_key for r in full.run_requests]
    assert main(["run", "--data-root", str(data_root)]) == 0
    done, listed = counted_tick(runner, data_root, again.cursor)
    assert folder in listed and not done.run_requests and not LandingCursor.read(done.cursor).pending
    _, listed = counted_tick(runner, data_root, done.cursor)
    assert folder not in listed


def test_an_older_cursor_a_list_of_the_messages_reported_is_read_and_the_tick_lists_everything(runner, data_root):
    write_day(data_root, FIRST, [segment("a", "u1", f"{FIRST} 10:00")])
    (data_root / "landing" / "notes").mkdir()
    result, listed = counted_tick(runner, data_root, json.dumps(["notes"]))
    cursor = LandingCursor.read(result.cursor)
    assert cursor.reported == {"notes"} and cursor.listed_at is not None and f"received_date={FIRST}" in listed
    assert LandingCursor.read(cursor.dump()) == cursor
    assert LandingCursor.read("not json") == LandingCursor()  # one that cannot be read: nothing seen yet


def _days(first: date, last: date) -> list[date]:
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]
