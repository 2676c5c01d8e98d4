"""An erasure killed half-way is resumed by the next run; an ingest that read the suppression list before a request
committed does not store the person after it; the landing files are rewritten on request, and their days ingested
again give what the tables hold; a purge may wait for a batch. Against the oracle, with the files checked."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from pyspark.sql import functions as F

from sessions_assets.cli.runner import RunFailed
from sessions_assets.warehouse import forget, hooks, journal, pending
from sessions_assets.warehouse.delta import Warehouse
from sessions_assets.warehouse.tables import RAW_EVENTS, RECEIVED_DAYS
from sessions_assets_tests.helpers.arrivals import running
from sessions_assets_tests.helpers.disk import files_quoting
from sessions_assets_tests.helpers.expected import assert_tables_match_oracle
from sessions_assets_tests.helpers.landing import landing_lines, segment, write_day

pytestmark = pytest.mark.scenario

D1, D2 = date(2024, 3, 1), date(2024, 3, 2)
IDA, DEVICE = "ida-7431", "dev-ida-7431"
ON_D1 = [
    segment("i1", IDA, "2024-03-01 09:00", kind="identify", anonymousId=DEVICE),
    segment("i2", None, "2024-03-01 08:50", kind="page", anonymousId=DEVICE, path="/"),
    segment("i3", IDA, "2024-03-01 09:05", anonymousId=None),
    segment("k1", "kim", "2024-03-01 11:00"),
]
ON_D2 = [
    segment("i4", IDA, "2024-03-02 09:00", anonymousId=DEVICE),
    segment("i5", None, "2024-03-02 09:30", kind="page", anonymousId=DEVICE, path="/"),
    segment("k2", "kim", "2024-03-02 11:00"),
]


def warehouse(runner) -> Warehouse:
    return runner.resources["pipeline"].warehouse(runner.resources["spark"])


def hashes(runner, *users: str) -> list[str]:
    return journal.user_hashes(journal.key_for(warehouse(runner), runner.resources["pipeline"]), users)


def request_once(runner, wh, taken: list) -> None:
    """A request to forget ida, taken the first time a hooked step calls this (``taken`` remembers it)."""
    if not taken:
        taken.append(journal.take(wh, journal.key_for(wh, runner.resources["pipeline"]), hashes(runner, IDA), "r1"))


def ida_rows(wh) -> int:
    return wh.read(RAW_EVENTS).where((F.col("user_id") == IDA) | (F.col("anonymous_id") == DEVICE)).count()


def test_an_erasure_killed_half_way_is_resumed_by_the_next_run(spark, tmp_path):
    root = tmp_path / "data"
    with running(root) as runner:
        write_day(root, D1, ON_D1)
        write_day(root, D2, ON_D2)
        runner.process()

        def killed():  # the lines are deleted, their days not recounted, nothing refreshed
            raise RuntimeError("killed")

        with hooks.at(hooks.LINES_REMOVED, killed), pytest.raises(RunFailed, match="killed"):
            runner.forget(hashes(runner, IDA))
        wh = warehouse(runner)
        [request] = journal.read(wh)
        assert request.state == journal.PENDING and request.removed == {"raw_events": 5}  # recorded first
        assert ida_rows(wh) == 0 and pending.erasures(wh.storage, 0).due
        steps, _ = runner.process()  # what the forget sensor launches
        assert steps[-1].metadata["forget"]["requests_done"] == 1
        assert_tables_match_oracle(wh, root, forgotten={IDA})
        [request] = journal.read(wh)
        assert request.state == journal.DONE and request.removed["raw_events"] == 5
        assert files_quoting(root / "warehouse", [IDA, DEVICE]) == []


def test_a_request_taken_while_an_ingest_judged_its_lines_is_applied_before_its_commits(spark, tmp_path):
    root = tmp_path / "data"
    with running(root) as runner:
        write_day(root, D1, ON_D1)
        runner.process()
        wh, taken = warehouse(runner), []
        write_day(root, D2, ON_D2)
        with hooks.at(hooks.LINES_JUDGED, lambda: request_once(runner, wh, taken)):
            step = runner.ingest_and_refresh(D2)
        assert step.metadata["raw_events"]["suppressed"] == 2 and step.metadata["raw_events"]["accepted"] == 1
        assert wh.read(RAW_EVENTS).where(f"received_date = DATE'{D2}'").count() == 1  # ida never stored on D2
        assert ida_rows(wh) == 3  # her D1 lines wait for the erasure: the next run
        runner.process()
        assert_tables_match_oracle(wh, root, forgotten={IDA})
        assert files_quoting(root / "warehouse", [IDA, DEVICE]) == []


def test_a_request_taken_between_an_ingests_commits_has_its_days_written_again_and_purged(spark, tmp_path):
    root = tmp_path / "data"
    with running(root) as runner:
        write_day(root, D1, ON_D1)
        runner.process()
        wh, taken = warehouse(runner), []

        def request_after_the_rows(table):
            if table is RAW_EVENTS:  # the rows are committed, the map and the record not yet
                request_once(runner, wh, taken)

        write_day(root, D2, ON_D2)
        with hooks.at(hooks.TABLE_WRITTEN, request_after_the_rows):
            step = runner.ingest_and_refresh(D2)
        assert step.metadata["raw_events"]["suppressed"] == 2
        assert wh.read(RAW_EVENTS).where(f"received_date = DATE'{D2}'").count() == 1  # written again without her
        assert [r.reason for r in journal.read(wh)] == [journal.REQUEST, journal.PURGE]  # the first write's files
        runner.process()
        assert all(r.state == journal.DONE for r in journal.read(wh))
        assert_tables_match_oracle(wh, root, forgotten={IDA})
        assert files_quoting(root / "warehouse", [IDA, DEVICE]) == []


def test_landing_files_rewritten_on_request_are_ingested_again_to_the_same_tables_and_a_purge_may_wait(spark, tmp_path):
    root = tmp_path / "data"
    with running(root, forget_purge_hours=2) as runner:
        write_day(root, D1, ON_D1)
        write_day(root, D2, ON_D2)
        runner.process()
        wh = warehouse(runner)
        counts = {r.received_date: (r.lines, r.accepted) for r in wh.read(RECEIVED_DAYS).collect()}
        summary = runner.forget(hashes(runner, IDA), landing="rewrite").metadata["forget"]
        assert len(summary["landing_files_rewritten"]) == 2 and summary["landing_lines"] == 5
        assert summary["requests_waiting_for_purge"] == 1 and summary["tables_purged"] == []
        assert not pending.erasures(wh.storage, 2).due and ida_rows(wh) == 0
        assert files_quoting(root / "landing", [IDA, DEVICE]) == []
        # Their fingerprints changed: both days are ingested again, and give what the tables hold.
        assert sorted(pending.arrivals(wh.storage, runner.bounds()).due) == [D1, D2]
        runner.process()
        assert {r.received_date: (r.lines, r.accepted) for r in wh.read(RECEIVED_DAYS).collect()} == {
            D1: (counts[D1][0] - 3, 1),
            D2: (counts[D2][0] - 2, 1),
        }
        assert_tables_match_oracle(wh, root, forgotten={IDA})
        assert IDA not in str(landing_lines(root))
        later = datetime.now(UTC) + timedelta(hours=3)
        assert pending.erasures(wh.storage, 2, later.timestamp()).due
        erased = forget.erase(
            wh, runner.resources["pipeline"], journal.key_for(wh, runner.resources["pipeline"]), later
        )
        assert erased.requests_done == 1 and "raw_events" in erased.purged
        assert files_quoting(root / "warehouse", [IDA, DEVICE]) == []
