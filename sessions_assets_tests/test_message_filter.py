"""The ``events`` MERGE opens only the days whose Bloom filter may hold one of the load's messages.

Every test here runs with the filters on from the first stored row (``message_filter_above_rows=0``).
"""

from __future__ import annotations

import threading
import time
from datetime import date

import pytest
from pyspark.sql import functions as F

from sessions_assets import message_filter
from sessions_assets.config import PipelineSettings
from sessions_assets.conflicts import is_write_conflict
from sessions_assets.events import copies_per_day
from sessions_assets.tables import EVENTS
from sessions_assets_tests.landing import segment, write_day

MAR_1, MAR_2, MAR_3 = date(2024, 3, 1), date(2024, 3, 2), date(2024, 3, 3)


@pytest.fixture
def filtered(data_root, resources):
    resources["settings"] = PipelineSettings(data_root=str(data_root), message_filter_above_rows=0)
    return resources


def _history(data_root, runner, days=(MAR_1, MAR_2)):
    """Event days of four messages each, received on their own day."""
    for day in days:
        write_day(data_root, day, [segment(f"m-{day.day}-{i}", f"u{i}", f"{day} 10:0{i}") for i in range(4)])
        runner.materialize("raw_events", day)
        runner.materialize("events", day)


def _events(runner):
    return sorted((r.event_date, r.message_id, r.received_date) for r in runner.warehouse.read(EVENTS).collect())


def _metadata(runner, day):
    result = runner.materialize("events", day)
    return result.get_asset_materialization_events()[0].materialization.metadata


def test_only_the_day_of_a_redelivered_message_is_opened_and_each_message_is_kept_once(filtered, data_root, runner):
    _history(data_root, runner)
    again = segment("m-1-2", "u2", "2024-03-01 10:02", "2024-03-03 09:00")
    write_day(data_root, MAR_3, [again, segment("late-2", "u1", "2024-03-02 12:00", "2024-03-03 09:00")])
    runner.materialize("raw_events", MAR_3)
    opened_1 = _metadata(runner, MAR_1)["days_opened"].value
    opened_2 = _metadata(runner, MAR_2)["days_opened"].value
    assert (opened_1, opened_2) == (1, 0)
    stored = _events(runner)
    assert [r for r in stored if r[1] == "m-1-2"] == [(MAR_1, "m-1-2", MAR_1)]
    assert (MAR_2, "late-2", MAR_3) in stored and len(stored) == 9


def test_filters_behind_the_table_take_in_what_the_change_feed_inserted(filtered, data_root, runner, spark):
    _history(data_root, runner, (MAR_1,))
    wh = runner.warehouse
    # Another writer adds a message to 1 March; the stored filters do not know it.
    row = wh.read(EVENTS, MAR_1, MAR_1).limit(1).withColumn("message_id", F.lit("written-elsewhere"))
    row.write.format("delta").mode("append").save(wh.path(EVENTS))
    stored = wh.read(message_filter.MESSAGE_FILTERS).where(F.col("event_date") == MAR_1).head()
    filters = message_filter.current(wh, [MAR_1], copies_per_day(wh, [MAR_1]))
    assert stored.version < filters.version == wh.version(EVENTS)
    probe = spark.createDataFrame(
        [(MAR_1, "written-elsewhere"), (MAR_1, "never-sent")], "event_date date, message_id string"
    )
    assert [r.message_id for r in message_filter.maybe_stored(filters, probe).collect()] == ["written-elsewhere"]
    filters.unpersist()


def test_filters_are_stored_when_built_or_far_behind_and_the_change_feed_covers_the_rest(
    filtered, data_root, runner, monkeypatch
):
    """A late message inserted by a run that left the filters as they were is still found by the next."""
    _history(data_root, runner, (MAR_1,))
    wh = runner.warehouse
    stored_at = wh.version(message_filter.MESSAGE_FILTERS)  # 1 March's filter, built by its first run
    late = segment("late-1", "u1", "2024-03-01 12:00", "2024-03-03 09:00")
    write_day(data_root, MAR_3, [late])
    runner.materialize("raw_events", MAR_3)
    assert _metadata(runner, MAR_1)["message_filters_stored"].value is False
    assert wh.version(message_filter.MESSAGE_FILTERS) == stored_at
    write_day(data_root, date(2024, 3, 4), [segment("late-1", "u1", "2024-03-01 12:00", "2024-03-04 09:00")])
    runner.materialize("raw_events", date(2024, 3, 4))
    assert _metadata(runner, MAR_1)["days_opened"].value == 1
    assert [r for r in _events(runner) if r[1] == "late-1"] == [(MAR_1, "late-1", MAR_3)]
    # Once far enough behind, the filters are stored again with what they lacked.
    monkeypatch.setattr(message_filter, "STORE_BEHIND", 1)
    write_day(data_root, date(2024, 3, 5), [segment("late-2", "u2", "2024-03-01 13:00", "2024-03-05 09:00")])
    runner.materialize("raw_events", date(2024, 3, 5))
    assert _metadata(runner, MAR_1)["message_filters_stored"].value is True
    rows = wh.read(message_filter.MESSAGE_FILTERS).select("event_date", "version").collect()
    assert [tuple(r) for r in rows] == [(MAR_1, wh.version(EVENTS))]


def test_a_message_stored_after_the_filters_were_read_is_not_kept_twice(filtered, data_root, runner, monkeypatch):
    """Another run stores the same late message between this run's filter read and its MERGE."""
    _history(data_root, runner, (MAR_1,))
    late = segment("late-3", "u3", "2024-03-01 12:00", "2024-03-03 09:00")
    write_day(data_root, MAR_3, [late])
    runner.materialize("raw_events", MAR_3)
    wh = runner.warehouse
    read_filters = message_filter.current

    def then_another_run_commits(wh_, days, copies):
        found = read_filters(wh_, days, copies)
        copy = wh.read(EVENTS, MAR_1, MAR_1).limit(1).withColumn("message_id", F.lit("late-3"))
        copy.write.format("delta").mode("append").save(wh.path(EVENTS))
        return found

    monkeypatch.setattr(message_filter, "current", then_another_run_commits)
    metadata = _metadata(runner, MAR_1)
    assert metadata["days_rebuilt_whole"].value == [MAR_1.isoformat()]
    assert [r for r in _events(runner) if r[1] == "late-3"] == [(MAR_1, "late-3", MAR_3)]


def test_a_commit_on_a_day_the_merge_skips_still_conflicts_with_it(warehouse, spark):
    """What keeps overlapping runs exact: the skipped day stays in the partition predicate Delta checks."""
    stored = spark.createDataFrame([(f"m{d}", d) for d in (MAR_1, MAR_2)], "message_id string, event_date date").select(
        "message_id",
        F.to_timestamp(F.concat(F.col("event_date").cast("string"), F.lit(" 10:00"))).alias("timestamp"),
        "event_date",
    )
    full = stored.select(
        *(
            F.col(f.name) if f.name in stored.columns else F.lit(None).cast(f.dataType).alias(f.name)
            for f in EVENTS.schema
        )
    )
    warehouse.replace_partitions(EVENTS, full, MAR_1, MAR_2)
    slow = F.udf(lambda s: (time.sleep(0.5), s)[1], "string", useArrow=False)
    copies = full.crossJoin(spark.range(3).withColumnRenamed("id", "_n"))
    source = copies.withColumn("message_id", F.concat(slow("message_id"), F.col("_n").cast("string"))).drop("_n")
    source = source.repartition(1)
    condition = (
        "t.event_date IN (DATE'2024-03-01', DATE'2024-03-02') AND t.event_date = s.event_date AND "
        "t.message_id = s.message_id AND " + message_filter.opened_only([MAR_1, MAR_2], {MAR_1})
    )

    def another_run():
        time.sleep(1.5)
        full.where(F.col("event_date") == MAR_1).withColumn("message_id", F.lit("other")).write.format("delta").mode(
            "append"
        ).save(warehouse.path(EVENTS))

    other = threading.Thread(target=another_run)
    other.start()
    with pytest.raises(Exception) as refused:
        warehouse.delta(EVENTS).alias("t").merge(source.alias("s"), condition).whenNotMatchedInsertAll().execute()
    other.join()
    assert is_write_conflict(refused.value)
