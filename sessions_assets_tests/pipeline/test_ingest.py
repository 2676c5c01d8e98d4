"""Every line of every landing file is accounted for, one bad file stops nothing, a file is the unit of delivery,
and a received day whose files gain or lose lines is processed again to what processing its final files once would
give."""

from __future__ import annotations

import gzip
import os
from collections import Counter
from datetime import date

import pytest
from pyspark.sql import functions as F

from sessions_assets.cli.runner import RunFailed
from sessions_assets.warehouse import hooks, ledger
from sessions_assets.warehouse.delta import DeltaLog
from sessions_assets.warehouse.tables import (
    DAILY_SNAPSHOT,
    RAW_EVENTS,
    RECEIVED_DAYS,
    REJECTED_EVENTS,
    SESSIONS,
    USERS,
)
from sessions_assets_tests.helpers.expected import assert_tables_match_oracle
from sessions_assets_tests.helpers.landing import segment, write_day

DAY = date(2024, 3, 11)


def lines(prefix: str, n: int) -> list[str]:
    return [segment(f"{prefix}-{i}", "u1", f"2024-03-11 10:{i // 60:02d}:{i % 60:02d}") for i in range(n)]


def test_a_day_of_awkward_files_is_read_whole_and_its_bad_files_are_reported(runner, data_root):
    folder = write_day(data_root, DAY, lines("good", 2), "good.jsonl").parent
    write_day(data_root, DAY, lines("bracket", 1), "part[1].jsonl")
    write_day(data_root, DAY, lines("colon", 1), "batch-2024-03-11T10:00:00Z.jsonl")
    write_day(data_root, DAY, lines("hidden", 1), "_retry.jsonl")
    write_day(data_root, DAY, lines("dot", 1), ".late.jsonl")
    write_day(data_root, DAY, ["a note"], "notes.txt")
    write_day(data_root, DAY, [], "empty.jsonl")
    whole = gzip.compress("".join(line + "\n" for line in lines("gz", 400)).encode())
    (folder / "truncated.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    (folder / "plain.jsonl.gz").write_text(lines("plain", 1)[0])
    os.symlink(folder / "nowhere.jsonl", folder / "gone.jsonl")
    write_day(data_root, DAY, lines("nested", 1), "retry/part-0000.jsonl")

    step = runner.ingest(DAY)

    raw = Counter(r.message_id.rsplit("-", 1)[0] for r in runner_wh(runner).read(RAW_EVENTS).collect())
    assert raw["good"] == 2 and raw["bracket"] == 1 and raw["colon"] == 1
    assert 0 < raw["gz"] < 400 and raw["hidden"] == raw["dot"] == raw["plain"] == 0  # the readable part of the gzip
    files = runner_wh(runner).read(REJECTED_EVENTS).where(F.col("payload").isNull())
    reported = {r.source_file.rsplit("/", 1)[-1]: r.reason for r in files.collect()}
    assert reported == {
        "_retry.jsonl": "skipped_file",
        ".late.jsonl": "skipped_file",
        "notes.txt": "skipped_file",
        "truncated.jsonl.gz": "unreadable_file",
        "plain.jsonl.gz": "unreadable_file",
        "gone.jsonl": "unreadable_file",
        "retry": "skipped_file",
    }
    accounted = {f["file"]: f for f in step.metadata["raw_events"]["files"]}
    for name in ("good.jsonl", "part[1].jsonl", "batch-2024-03-11T10:00:00Z.jsonl", "empty.jsonl"):
        assert accounted[name]["lines"] == accounted[name]["accepted"] + accounted[name]["rejected"]
    assert accounted["truncated.jsonl.gz"]["skipped"] == "unreadable_file"
    assert accounted["truncated.jsonl.gz"]["lines"] == raw["gz"] + (accounted["truncated.jsonl.gz"]["rejected"])
    assert "EOF" in accounted["truncated.jsonl.gz"]["detail"] or "end" in accounted["truncated.jsonl.gz"]["detail"]


@pytest.mark.scenario
def test_a_day_that_gains_a_file_and_then_loses_lines_ends_as_if_read_once(runner, data_root):
    early = [segment("a1", "u1", "2024-03-10 10:00"), segment("a2", "u1", "2024-03-10 10:20")]
    write_day(data_root, date(2024, 3, 10), early)
    first = lines("m", 3)
    write_day(data_root, DAY, first)
    runner.process()
    rejects_log = DeltaLog(runner_wh(runner).storage, REJECTED_EVENTS)
    # Days without a reject leave rejected_events as it is: no write of nothing.
    assert all(rejects_log.commit_info(v).get("operation") != "WRITE" for v in rejects_log.versions())
    # Re-delivered: a second file with a copy of a message received earlier, a late event of the 10th and a bad line.
    late = segment("a3", "u1", "2024-03-10 10:40", "2024-03-11 08:00")
    write_day(data_root, DAY, [first[0], late, "{not json"], "part-0001.jsonl")
    runner.process()
    assert_tables_match_oracle(runner_wh(runner), data_root)
    assert runner_wh(runner).read(REJECTED_EVENTS).count() == 1
    # Shrunk: the second file loses the late event and the bad line (its reject goes), the first file a message.
    write_day(data_root, DAY, [first[0]], "part-0001.jsonl")
    write_day(data_root, DAY, first[1:])
    runner.process()
    assert_tables_match_oracle(runner_wh(runner), data_root)
    assert runner_wh(runner).read(REJECTED_EVENTS).count() == 0


@pytest.mark.scenario
def test_a_file_is_the_unit_of_delivery_and_a_removed_file_withdraws_nothing(runner, data_root):
    write_day(data_root, DAY, lines("m", 3))
    runner.process()
    # A file added to the day, and an upload in progress beside it: only they are read, and only the file's lines
    # are written.
    added = write_day(data_root, DAY, [*lines("n", 2), "not json"], "part-0001.jsonl")
    uploading = write_day(data_root, DAY, lines("u", 1), "_upload.jsonl")
    step = runner.ingest(DAY)
    (day,) = (r.data for r in step.metadata["raw_events"]["per_received_day"].records)
    assert (day["files_read"], day["files_kept"], day["lines"], day["accepted"]) == (2, 1, 3, 2)
    log = DeltaLog(runner.storage, RAW_EVENTS)
    assert log.commit_info(log.version())["operationMetrics"]["numOutputRows"] == "2"
    runner.process()
    assert_tables_match_oracle(runner_wh(runner), data_root)
    recorded = ledger.received(runner.storage)[DAY]
    assert (recorded.lines, recorded.accepted, recorded.rejected) == (6, 5, 2)
    assert sorted((f.source_file.rsplit("/", 1)[-1], f.lines, f.accepted, f.rejected) for f in recorded.files) == [
        ("_upload.jsonl", 0, 0, 1),
        ("part-0000.jsonl", 3, 3, 0),
        ("part-0001.jsonl", 3, 2, 1),
    ]
    # Both removed from the folder: the file's lines stay, until the day is ingested again whole on request; the
    # upload, which held no line, leaves no trace.
    added.unlink()
    uploading.unlink()
    runner.process()
    stored = {r.message_id for r in runner_wh(runner).read(RAW_EVENTS).collect()}
    assert stored == {"m-0", "m-1", "m-2", "n-0", "n-1"}
    assert runner_wh(runner).read(REJECTED_EVENTS).where(F.col("payload").isNull()).count() == 0
    assert [f.source_file.rsplit("/", 1)[-1] for f in ledger.received(runner.storage)[DAY].files] == [
        "part-0000.jsonl",
        "part-0001.jsonl",
    ]
    runner.reingest(DAY, folders=True)
    runner.process()
    assert {r.message_id for r in runner_wh(runner).read(RAW_EVENTS).collect()} == {"m-0", "m-1", "m-2"}
    assert_tables_match_oracle(runner_wh(runner), data_root)


@pytest.mark.scenario
def test_rows_a_failed_ingest_committed_of_a_file_removed_before_the_retry_go(runner, data_root):
    write_day(data_root, DAY, lines("m", 2))
    runner.process()
    added = write_day(data_root, DAY, lines("n", 2), "part-0001.jsonl")
    write_day(data_root, DAY, lines("o", 1), "part-0002.jsonl")

    def killed(table):
        if table is RAW_EVENTS:
            raise RuntimeError("killed after raw_events")

    with hooks.at(hooks.TABLE_WRITTEN, killed), pytest.raises(RunFailed):
        runner.ingest(DAY)
    assert runner_wh(runner).read(RAW_EVENTS).count() == 5  # committed, not recorded
    added.unlink()  # gone before the retry, which reads the other new file
    runner.process()
    assert {r.message_id for r in runner_wh(runner).read(RAW_EVENTS).collect()} == {"m-0", "m-1", "o-0"}
    assert_tables_match_oracle(runner_wh(runner), data_root)


def runner_wh(runner):
    """The warehouse the runner's resources point at."""
    resources = runner.resources
    return resources["pipeline"].warehouse(resources["spark"])


@pytest.mark.scenario
def test_a_day_ingested_again_unchanged_writes_nothing_and_read_whole_refreshes_to_the_same_tables(runner, data_root):
    write_day(data_root, DAY, lines("m", 3))
    steps, _ = runner.process()
    summed = steps[-1].metadata["daily_snapshot"]["snapshot_days_summed"]  # a first build sums every day it has
    assert summed == runner_wh(runner).read(DAILY_SNAPSHOT).select("snapshot_date").distinct().count() > 0
    before = {t.name: sorted(map(tuple, runner_wh(runner).read(t).collect())) for t in (SESSIONS, USERS)}
    versions = {t.name: DeltaLog(runner.storage, t).version() for t in (RAW_EVENTS, RECEIVED_DAYS)}
    runner.ingest(DAY)  # the same files again: nothing to read, nothing written
    assert {t.name: DeltaLog(runner.storage, t).version() for t in (RAW_EVENTS, RECEIVED_DAYS)} == versions
    runner.reingest(DAY, folders=True)  # read whole on request: raw_events replaced by the same rows
    runner.process()
    assert {t.name: sorted(map(tuple, runner_wh(runner).read(t).collect())) for t in (SESSIONS, USERS)} == before
    assert_tables_match_oracle(runner_wh(runner), data_root)
