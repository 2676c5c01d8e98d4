"""The commit log as the planner reads it without Spark (``DeltaLog``) agrees with Delta's own history, also
once checkpoints are written and the log holds more than JSON commits; a process that read ``received_days``
without Spark exits cleanly."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from datetime import date, datetime
from pathlib import Path

from sessions_assets.warehouse.delta import Commit, DeltaLog
from sessions_assets.warehouse.tables import PARTITION_MAP, RECEIVED_DAYS


def test_the_log_read_without_spark_is_deltas_history(warehouse, spark):
    table = replace(PARTITION_MAP, properties=(("delta.checkpointInterval", "2"),))  # checkpoints sooner
    for n in range(4):  # past two checkpoints, commits with a note and without
        rows = spark.createDataFrame([(date(2024, 3, 1), date(2024, 3, 1), n)], table.schema)
        warehouse.overwrite(table, rows, Commit({"absorbed": {"raw_events": n}} if n in (1, 2) else None))
    folder = Path(warehouse.storage.path_of(warehouse.uri(table))) / "_delta_log"
    assert len(list(folder.glob("*.checkpoint.parquet"))) >= 2

    log = DeltaLog(warehouse.storage, table)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{warehouse.uri(table)}`").collect()
    assert log.versions() == sorted(h.version for h in history)
    assert log.version() == max(h.version for h in history)
    for h in history:
        info = log.commit_info(h.version)
        assert (info.get("operation"), info.get("userMetadata")) == (h.operation, h.userMetadata), h.version
    notes = dict(log.notes(limit=2))  # the latest two commits: one of the two notes
    assert notes == {
        h.version: json.loads(h.userMetadata) for h in history if h.userMetadata and h.version > log.version() - 2
    }
    assert len(notes) == 1


def test_a_column_the_spec_gains_is_added_to_the_stored_table_and_is_null_until_repaired(warehouse, spark):
    from pyspark.sql import types as T

    from sessions_assets.warehouse.delta import Warehouse
    from sessions_assets.warehouse.ledger import NO_DATA_CHANGE

    older = replace(PARTITION_MAP, schema=T.StructType(PARTITION_MAP.schema.fields[:2]))
    warehouse.overwrite(older, spark.createDataFrame([(date(2024, 3, 1), date(2024, 3, 2))], older.schema))
    grown = Warehouse(spark, warehouse.storage)  # a later run, whose spec has the column
    assert [tuple(r) for r in grown.read(PARTITION_MAP).collect()] == [(date(2024, 3, 1), date(2024, 3, 2), None)]
    log = DeltaLog(warehouse.storage, PARTITION_MAP)
    assert log.commit_info(log.version())["operation"] in NO_DATA_CHANGE  # no refresh is due for it
    before = log.version() - 1  # a version read from an older note: the column is null there too
    assert [tuple(r) for r in grown.read(PARTITION_MAP, before).collect()] == [
        (date(2024, 3, 1), date(2024, 3, 2), None)
    ]
    grown.overwrite(
        PARTITION_MAP, spark.createDataFrame([(date(2024, 3, 1), date(2024, 3, 2), 5)], PARTITION_MAP.schema)
    )
    assert [tuple(r) for r in grown.read(PARTITION_MAP).collect()] == [(date(2024, 3, 1), date(2024, 3, 2), 5)]


def test_a_create_killed_before_its_first_commit_is_created_again(warehouse, spark, monkeypatch):
    from sessions_assets.warehouse import delta

    monkeypatch.setattr(delta, "CREATION_WAIT_SECONDS", 0.0)
    folder = Path(warehouse.storage.path_of(warehouse.uri(PARTITION_MAP))) / "_delta_log"
    folder.mkdir(parents=True)  # what a server killed during the CREATE leaves

    assert warehouse.read(PARTITION_MAP).collect() == []
    assert DeltaLog(warehouse.storage, PARTITION_MAP).versions() == [0]


def test_a_process_that_read_the_received_days_without_spark_exits_cleanly(warehouse, spark):
    """The sensors, ``status`` and a ``run`` with nothing due read ``received_days`` with delta-rs and exit. Arrow's
    scan of it left an IO thread that aborted the interpreter at exit about one time in two."""
    for day in (date(2024, 3, 1), date(2024, 3, 2)):  # two files: Arrow scans them side by side
        row = (day, "f", 3, 2, 1, [day], 0, datetime(2024, 3, 3), "UTC", [("file:/a.jsonl", "a", 3, 2, 1, {day: 2})])
        warehouse.append(RECEIVED_DAYS, spark.createDataFrame([row], RECEIVED_DAYS.schema))
    read = (
        "import sys; from sessions_assets.warehouse import ledger; from sessions_assets.warehouse.storage import "
        "Storage; print(*sorted(ledger.received(Storage(sys.argv[1]))))"
    )
    for _ in range(8):
        done = subprocess.run([sys.executable, "-c", read, warehouse.storage.root], capture_output=True, text=True)
        assert (done.returncode, done.stdout) == (0, "2024-03-01 2024-03-02\n"), done.stderr[-500:]


def test_a_feed_is_known_to_hold_inserts_alone_exactly_when_its_change_feed_does(warehouse, spark):
    """``ledger.only_added`` decides from the commits' metrics what the change feed would say: appends and a
    ``MERGE`` that only inserts add rows alone, and so does a day replaced where nothing was stored (a new received
    day); a compaction between changes nothing; an overwrite, a day replaced where rows were (its own file, or part of
    a file, marked by a deletion vector), an update or a delete (with deletion vectors, as ``events`` and
    ``sessions`` keep them) do not."""
    from sessions_assets.warehouse.delta import Merge, on_days
    from sessions_assets.warehouse.ledger import Position, only_added
    from sessions_assets.warehouse.tables import CHANGE_FEED, DELETION_VECTORS

    table = replace(PARTITION_MAP, properties=(CHANGE_FEED, DELETION_VECTORS))
    on = "t.received_date = s.received_date AND t.event_date = s.event_date"
    day, new_day = date(2024, 3, 1), date(2024, 3, 9)

    def rows(*pairs, received=day):
        return spark.createDataFrame([(received, date(2024, 3, d), n) for d, n in pairs], table.schema)

    writes = {
        "first rows": lambda: warehouse.overwrite(table, rows((1, 1))),
        "an append": lambda: warehouse.append(table, rows((2, 1))),
        "a merge that inserts": lambda: warehouse.merge(
            table, rows((3, 1), (1, 1)), Merge(on).when_not_matched_insert(table.columns)
        ),
        "a compaction and an append": lambda: (warehouse.compact(table), warehouse.append(table, rows((4, 1)))),
        "a merge that updates": lambda: warehouse.merge(
            table, rows((1, 5)), Merge(on).when_matched_update(table.columns).when_not_matched_insert(table.columns)
        ),
        "a merge that deletes": lambda: warehouse.merge(table, rows((2, 0)), Merge(on).when_matched_delete()),
        "a new day replaced": lambda: warehouse.replace_where(
            table, rows((9, 1), received=new_day), on_days("received_date", [new_day])
        ),
        "a stored day replaced": lambda: warehouse.replace_where(
            table, rows((9, 2), received=new_day), on_days("received_date", [new_day])
        ),
        "part of a file replaced": lambda: (  # rows 5 and 6 in one file; 5 replaced: a deletion vector marks it
            warehouse.append(table, rows((5, 1), (6, 1))),
            warehouse.replace_where(table, rows((5, 2)), f"received_date = DATE'{day}' AND event_date = '2024-03-05'"),
        ),
        "an overwrite": lambda: warehouse.overwrite(table, rows((1, 1))),
    }
    decided, fed = {}, {}
    for name, write in writes.items():
        before = warehouse.version(table) if DeltaLog(warehouse.storage, table).versions() else None
        write()
        if before is None:
            continue
        at = Position(table, table, before, warehouse.version(table))
        decided[name] = only_added(warehouse, at)
        kinds = warehouse.change_feed(table, before + 1, at.latest).select("_change_type").distinct().collect()
        fed[name] = {r[0] for r in kinds} <= {"insert"}
    assert decided == fed
    assert decided == {
        "an append": True,
        "a merge that inserts": True,
        "a compaction and an append": True,
        "a merge that updates": False,
        "a merge that deletes": False,
        "a new day replaced": True,
        "a stored day replaced": False,
        "part of a file replaced": False,
        "an overwrite": False,
    }
