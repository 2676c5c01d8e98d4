"""A landing zone as Segment's S3 destination writes it: ``segment-logs/<source-id>/<day in ms>/<file>.gz``.

A received day is every source's folder of that day. Two received days arrive from a website, a mobile app and a
backend; then the website re-delivers the first day. Every table must equal the oracle's recompute from all the
lines, by day and source, and the same events laid out as ``received_date=`` folders must give the same tables.
"""

from __future__ import annotations

import gzip
from collections import Counter
from datetime import date

import pytest

from sessions_assets.cli.generate import generate_landing_zone, source_of
from sessions_assets.cli.main import main
from sessions_assets.graph.partitions import bounds, calendars
from sessions_assets.settings import Settings
from sessions_assets.warehouse import pending
from sessions_assets.warehouse.delta import Warehouse
from sessions_assets.warehouse.storage import LayoutError, Storage
from sessions_assets.warehouse.tables import ALL, EVENTS, RAW_EVENTS, RECEIVED_DAYS
from sessions_assets_tests.helpers.arrivals import running
from sessions_assets_tests.helpers.expected import assert_tables_match_oracle, rows
from sessions_assets_tests.helpers.landing import segment, segment_millis, write_day, write_segment_day

pytestmark = pytest.mark.scenario

D1, D2 = date(2024, 3, 16), date(2024, 3, 17)
WEB = [
    segment("w1", None, "2024-03-16 09:00", anonymousId="anon-7", path="/", agent="Mozilla/5.0 Chrome/124.0"),
    segment("w2", None, "2024-03-16 09:05", anonymousId="anon-7", path="/pricing"),
    "{not json",
]
SERVER = [segment("s1", "u1", "2024-03-16 09:10", anonymousId=None, event="Order Completed")]
# Sent by the website and by the backend alike, on the second day.
BOTH = segment("both-1", "u1", "2024-03-17 11:00", anonymousId=None, event="Signed Up")
APP = [segment("a1", "u2", "2024-03-17 10:00", device="ios")]  # a source whose first day is the second
REDELIVERED = [
    segment("w3", None, "2024-03-16 09:20", "2024-03-16 09:25", anonymousId="anon-7", path="/cart"),
    WEB[0],  # the same line again
]


@pytest.fixture(scope="module")
def delivered(spark, tmp_path_factory):
    """Both days from three sources, then the website's second file for the first day; returns the warehouse,
    its data root and what the plan reported before the re-delivery."""
    root = tmp_path_factory.mktemp("segment") / "data"
    write_segment_day(root, D1, "web", WEB)
    write_segment_day(root, D1, "server", SERVER)
    write_segment_day(root, D2, "web", [BOTH])
    write_segment_day(root, D2, "server", [BOTH])
    write_segment_day(root, D2, "app", APP)
    (root / "landing" / "segment-logs" / "ios").mkdir()  # a source that has sent nothing yet
    off_midnight = root / "landing" / "segment-logs" / "web" / str(segment_millis(D2) + 3_600_000) / "x.gz"
    off_midnight.parent.mkdir()
    off_midnight.write_bytes(gzip.compress(segment("x", "u9", "2024-03-17 12:00").encode()))
    storage = Storage(str(root))
    reported = pending.arrivals(storage, bounds(calendars(Settings()).received)).describe_ignored()
    with running(root) as runner:
        runner.process()
        first = {r.received_date: r.fingerprint for r in Warehouse(spark, storage).read(RECEIVED_DAYS).collect()}
        write_segment_day(root, D1, "web", REDELIVERED, name="1710633600000.c3d4.gz")
        runner.process()
    return Warehouse(spark, storage), root, reported, first


def test_a_source_that_redelivers_a_file_adds_its_lines_to_the_day(delivered):
    wh, root, _, first = delivered
    assert_tables_match_oracle(wh, root)
    again = {r.received_date: r.fingerprint for r in wh.read(RECEIVED_DAYS).collect()}
    assert again[D1] != first[D1] and again[D2] == first[D2]
    assert rows(wh.read(RAW_EVENTS).where(f"received_date = '{D1}'"), ["message_id", "source_id"]) == Counter(
        {("w1", "web"): 2, ("w2", "web"): 1, ("w3", "web"): 1, ("s1", "server"): 1}
    )


def test_a_source_that_appears_only_on_a_later_day_joins_that_day(delivered):
    wh, root, _, _ = delivered
    assert_tables_match_oracle(wh, root)
    assert rows(wh.read(EVENTS).where("source_id = 'app'"), ["message_id", "received_date"]) == Counter({("a1", D2): 1})


def test_an_empty_source_folder_is_reported_once_and_skipped(delivered):
    wh, root, reported, _ = delivered
    assert_tables_match_oracle(wh, root)
    assert "segment-logs/ios: an empty source folder (no <day in ms> folder in it), skipped" in reported


def test_a_folder_named_off_midnight_is_reported_and_its_lines_not_read(delivered):
    wh, root, reported, _ = delivered
    assert_tables_match_oracle(wh, root)
    folder = segment_millis(D2) + 3_600_000
    assert f"segment-logs/web/{folder}: {folder} is not the millisecond start of a UTC day, skipped" in reported
    assert wh.read(RAW_EVENTS).where("message_id = 'x'").count() == 0


def test_one_message_sent_by_two_sources_is_one_event(delivered):
    wh, root, _, _ = delivered
    assert_tables_match_oracle(wh, root)
    assert rows(wh.read(RAW_EVENTS).where("message_id = 'both-1'"), ["source_id"]) == Counter(
        {("server",): 1, ("web",): 1}
    )
    # The copies tie on everything but their source: the first source by name is kept.
    assert rows(wh.read(EVENTS).where("message_id = 'both-1'"), ["source_id"]) == Counter({("server",): 1})


def test_the_same_events_in_either_layout_give_identical_tables(spark, tmp_path_factory):
    built = {}
    for layout in ("received_date", "segment"):
        root = tmp_path_factory.mktemp(layout) / "data"
        generate_landing_zone(str(root), days=3, users=20, seed=3, end_date=date(2024, 3, 18), layout=layout)
        with running(root) as runner:
            runner.process()
        built[layout] = wh = Warehouse(spark, Storage(str(root)))
        assert_tables_match_oracle(wh, root)
    for table in ALL:
        named = ("source_id", "source_file", "fingerprint", "ingested_at", "files")  # the files' names differ
        columns = [c for c in table.columns if c not in named]
        left, right = (
            Counter(tuple(_hashable(r[c]) for c in columns) for r in built[layout].read(table).collect())
            for layout in built
        )
        assert left == right, table.name
    sources = Counter((source_of(r.payload), r.source_id) for r in built["segment"].read(RAW_EVENTS).collect())
    assert {s for s, _ in sources} == {"web", "app", "server"}
    assert all(s == stored for s, stored in sources)


def test_both_layouts_at_once_are_refused_in_one_line(tmp_path, capsys):
    write_day(tmp_path, D1, [segment("m", "u1", "2024-03-16 09:00")])
    write_segment_day(tmp_path, D1, "web", [segment("m", "u1", "2024-03-16 09:00")])
    with pytest.raises(LayoutError, match="set SESSIONS_LANDING_LAYOUT to the one to read"):
        Storage(str(tmp_path)).landing_folders()
    assert main(["status", "--data-root", str(tmp_path)]) == 2
    [said] = capsys.readouterr().err.splitlines()
    assert said.startswith("sessions-assets: ") and "both received_date=YYYY-MM-DD/ folders and segment-logs/" in said
    # Told which to read, the other layout's folders are reported and skipped.
    chosen = Storage.of(Settings(data_root=str(tmp_path), landing_layout="segment"))
    assert [(f.name, f.day) for f in chosen.landing_folders()] == [
        (f"segment-logs/web/{segment_millis(D1)}", D1),
        ("received_date=2024-03-16", None),
    ]


def _hashable(value):
    return tuple(value) if isinstance(value, list) else value
