"""Ingestion of a received day: acceptance rules, rejects, the recorded partition map, ``events``.

Real Dagster runs (``Runner.materialize``) write real Delta tables in a temporary data root.
"""

from __future__ import annotations

import gzip
import json
from datetime import date

import pytest
from pyspark.sql import functions as F

from sessions_assets.config import PipelineSettings
from sessions_assets.tables import EVENTS, PARTITION_MAP, RAW_EVENTS, REJECTED_EVENTS, SESSIONS
from sessions_assets_tests.landing import segment, write_day

R = date(2024, 3, 16)  # the received day under test

# One line per reject reason, in the contract's order, each breaking exactly its own rule.
REJECTS = {
    "malformed_json": ['{"messageId": "m-trunc", "userId": "u1", "timest', "[1, 2]", "42", "   "],
    "missing_message_id": [segment("", "u1", "2024-03-16 09:00"), segment(None, "u1", "2024-03-16 09:00")],
    "missing_user": [segment("m-nouser", None, "2024-03-16 09:00", anonymousId="")],
    "bad_timestamp": [
        segment("m-badts", "u1", "2024-03-16 09:00", timestamp="yesterday"),
        segment("m-numts", "u1", "2024-03-16 09:00", timestamp=12),
        segment("m-dateonly", "u1", "2024-03-16 09:00", timestamp="2024-03-16"),
        segment("m-norecv", "u1", "2024-03-16 09:00", receivedAt=None),
    ],
    "future_timestamp": [segment("m-future", "u1", "2024-03-16 12:00", "2024-03-16 10:59")],
    "too_late": [
        segment("m-old", "u1", "2023-02-10 09:59", "2024-03-16 10:00"),
        segment("m-prestart", "u1", "2019-12-31 10:00", "2020-01-02 10:00"),
    ],
}
ACCEPTED = [
    segment("m-1", "u1", "2024-03-16 09:00"),
    segment("m-2", None, "2024-03-16 09:05"),  # anonymous: keyed by anonymousId
    segment("m-3", "u2", "2024-03-14 23:59", "2024-03-16 08:00"),  # late
    segment("m-4", "u2", "2024-03-16 11:00", "2024-03-16 10:00"),  # device clock 1 h ahead: allowed
    segment("m-5", "u3", "2023-02-12 10:00", "2024-03-16 10:00"),  # 398 days late: allowed
    json.dumps({"messageId": "m-6", "userId": "u4", "timestamp": "2024-03-16T10:00:00+02:00",
                "receivedAt": "2024-03-16T09:00:00", "extra": {"nested": [1]}}),  # fmt: skip
]


@pytest.fixture
def landing(data_root):
    write_day(data_root, R, ACCEPTED[:3] + [line for lines in REJECTS.values() for line in lines])
    folder = data_root / "landing" / f"received_date={R}"
    with gzip.open(folder / "part-0001.jsonl.gz", "wt") as f:
        f.write("\n".join(ACCEPTED[3:5]) + "\n")
    (folder / "part-0002.json").write_text(ACCEPTED[5] + "\n")
    return data_root


def test_every_line_is_accepted_or_rejected_with_its_reason(landing, runner, warehouse):
    runner.materialize("raw_events", R)
    rejected = {(r.payload, r.reason) for r in warehouse.read(REJECTED_EVENTS).collect()}
    expected = {(line, reason) for reason, lines in REJECTS.items() for line in lines}
    assert rejected == expected
    accepted = sorted(r.message_id for r in warehouse.read(RAW_EVENTS).collect())
    assert accepted == ["m-1", "m-2", "m-3", "m-4", "m-5", "m-6"]
    lines = len(ACCEPTED) + sum(len(v) for v in REJECTS.values())
    assert len(accepted) + len(rejected) == lines


def test_accepted_rows_are_parsed_as_the_contract_says(landing, runner, warehouse):
    runner.materialize("raw_events", R)
    rows = {r.message_id: r for r in warehouse.read(RAW_EVENTS).collect()}
    assert rows["m-2"].user_key == "anon-None" and rows["m-2"].user_id is None
    assert rows["m-6"].timestamp.isoformat() == "2024-03-16T08:00:00"  # +02:00 -> UTC
    assert rows["m-6"].received_at.isoformat() == "2024-03-16T09:00:00"  # no offset means UTC
    assert {r.received_date for r in rows.values()} == {R}
    assert all(r.source_file.endswith((".jsonl", ".jsonl.gz", ".json")) for r in rows.values())


def test_partition_map_lists_exactly_the_event_days_of_accepted_rows(landing, runner, warehouse):
    result = runner.materialize("raw_events", R)
    mapping = {(r.event_date.isoformat(), r.events) for r in warehouse.read(PARTITION_MAP).collect()}
    assert mapping == {("2024-03-16", 4), ("2024-03-14", 1), ("2023-02-12", 1)}
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == "partition_map"]
    assert event.materialization.metadata["affected_event_days"].value == ["2023-02-12", "2024-03-14", "2024-03-16"]


def test_rerunning_a_received_day_changes_nothing(landing, runner, warehouse):
    runner.materialize("raw_events", R)
    tables = (RAW_EVENTS, REJECTED_EVENTS, PARTITION_MAP)
    before = {t.name: (warehouse.version(t), sorted(map(tuple, warehouse.read(t).collect()))) for t in tables}
    runner.materialize("raw_events", R)
    after = {t.name: (warehouse.version(t), sorted(map(tuple, warehouse.read(t).collect()))) for t in tables}
    assert after == before


def test_a_received_day_that_gains_a_file_is_replaced_not_appended(landing, runner, warehouse):
    runner.materialize("raw_events", R)
    write_day(landing, R, [segment("m-7", "u9", "2024-03-16 12:00")], name="part-0003.jsonl")
    runner.materialize("raw_events", R)
    ids = [r.message_id for r in warehouse.read(RAW_EVENTS).collect()]
    assert sorted(ids) == ["m-1", "m-2", "m-3", "m-4", "m-5", "m-6", "m-7"]


@pytest.mark.parametrize(
    "order, compiled",
    [("in_order", False), ("reversed", False), pytest.param("reversed", True, id="reversed-compiled")],
)
def test_duplicates_across_received_days_keep_the_earliest_copy_in_any_order(
    order, compiled, data_root, resources, runner, warehouse, spark
):
    codegen = spark.conf.get("spark.sql.codegen.wholeStage")
    if compiled:  # the MERGE as it runs over millions of stored rows: compiled to Java, then back
        resources["settings"] = PipelineSettings(data_root=str(data_root), compile_above_rows=0)
    first = segment("dup", "u1", "2024-03-10 10:00", "2024-03-10 10:00:05", event="First Copy")
    again = segment("dup", "u1", "2024-03-10 10:00", "2024-03-12 10:00", event="Second Copy")
    write_day(data_root, "2024-03-10", [first, segment("other", "u1", "2024-03-10 10:01")])
    write_day(data_root, "2024-03-12", [again, again])
    days = [date(2024, 3, 10), date(2024, 3, 12)]
    for received_day in days if order == "in_order" else days[::-1]:
        runner.materialize("raw_events", received_day)
        result = runner.materialize("events", date(2024, 3, 10))
    rows = warehouse.read(EVENTS).collect()
    assert sorted((r.message_id, r.event) for r in rows) == [("dup", "First Copy"), ("other", "Page Viewed")]
    metadata = result.get_asset_materialization_events()[0].materialization.metadata
    # The second run read only its own received day's copies; it replaced the stored copy only if earlier.
    assert metadata["copies_read"].value == 2
    assert metadata["copies_replaced_by_earlier"].value == (0 if order == "in_order" else 1)
    assert metadata["loads_absorbed"].value == 1
    assert spark.conf.get("spark.sql.codegen.wholeStage") == codegen


def test_events_of_a_day_read_only_the_received_partitions_the_map_names(data_root, runner, warehouse):
    from sessions_assets import events as ev

    write_day(data_root, "2024-03-10", [segment("a", "u1", "2024-03-10 10:00")])
    write_day(data_root, "2024-03-11", [segment("b", "u1", "2024-03-11 10:00")])
    write_day(data_root, "2024-03-12", [segment("c", "u1", "2024-03-10 11:00", "2024-03-12 09:00")])
    for d in (10, 11, 12):
        runner.materialize("raw_events", date(2024, 3, d))
    received = ev.contributing_received_days(warehouse, date(2024, 3, 10), date(2024, 3, 10))
    assert received == [date(2024, 3, 10), date(2024, 3, 12)]
    source = ev.raw_rows_for(warehouse, received, date(2024, 3, 10), date(2024, 3, 10))
    plan = source._jdf.queryExecution().executedPlan().toString()
    assert "PartitionFilters: [" in plan and "received_date" in plan.split("PartitionFilters: [")[1].split("]")[0]
    read = {f.split("received_date=")[1][:10] for f in source.inputFiles()}
    assert read == {"2024-03-10", "2024-03-12"}  # 2024-03-11 is never opened
    assert sorted(r.message_id for r in source.collect()) == ["a", "c"]
    assert source.where(F.col("event_date") != "2024-03-10").count() == 0


def test_events_absorb_only_the_loads_of_the_new_received_day(data_root, runner, warehouse):
    from sessions_assets import events as ev
    from sessions_assets import ledger

    write_day(data_root, "2024-03-10", [segment("a", "u1", "2024-03-10 10:00")])
    write_day(data_root, "2024-03-11", [segment("b", "u1", "2024-03-11 10:00")])
    for d in (10, 11):
        runner.materialize("raw_events", date(2024, 3, d))
    runner.materialize("events", date(2024, 3, 10), date(2024, 3, 11))
    write_day(data_root, "2024-03-12", [segment("c", "u1", "2024-03-10 11:00", "2024-03-12 09:00")])
    runner.materialize("raw_events", date(2024, 3, 12))
    position = ledger.state(warehouse, ev.CONSUMER, ledger.partition_map_loads(warehouse), date(2024, 3, 10), date(2024, 3, 11))
    assert [(load[0], load[1]) for load in position.pending] == [(date(2024, 3, 10), date(2024, 3, 12))]
    assert not position.stale_days
    read = {f.split("received_date=")[1][:10] for f in ledger.rows_of(warehouse, position.pending).inputFiles()}
    assert read == {"2024-03-12"}  # the history's received days are never opened


def test_a_ledger_position_holds_only_what_differs_from_upstream(warehouse):
    """Pending loads (with upstream's versions), stale days, and what a whole-day rebuild of those absorbs."""
    from sessions_assets import ledger

    d1, d2, d3 = date(2024, 3, 1), date(2024, 3, 2), date(2024, 3, 3)
    upstream = {(d1, d1, "a"), (d2, d2, "b"), (d2, d3, "c"), (d3, d3, "e"), (d3, d2, "f")}
    ledger.record(warehouse, "up", upstream, versions={(d2, d3, "c"): 7, (d3, d2, "f"): 8})
    ledger.record(warehouse, "me", {(d1, d1, "a"), (d2, d2, "b"), (d3, d3, "e-before")})
    position = ledger.state(warehouse, "me", ledger.absorbed(warehouse, "up"))
    assert position.pending == {(d2, d3, "c")}  # d3's own new load waits for its rebuild
    assert position.versions == {(d2, d3, "c"): 7}
    assert position.stale_days == {d3}  # "e-before" is no longer upstream
    assert position.whole == {(d3, d3, "e"), (d3, d2, "f")}
    assert ledger.state(warehouse, "up", ledger.absorbed(warehouse, "up")).up_to_date


def test_a_received_day_reingested_with_fewer_events_rebuilds_its_event_days_whole(data_root, runner, warehouse):
    write_day(data_root, "2024-03-10", [segment("a", "u1", "2024-03-10 10:00")])
    write_day(data_root, "2024-03-12", [segment("b", "u1", "2024-03-10 10:10", "2024-03-12 09:00"),
                                        segment("c", "u2", "2024-03-11 10:00", "2024-03-12 09:00")])  # fmt: skip
    for d in (10, 12):
        runner.process(date(2024, 3, d))
    assert warehouse.read(SESSIONS).where("user_key = 'u1'").collect()[0].num_events == 2
    write_day(data_root, "2024-03-12", [segment("c", "u2", "2024-03-11 10:00", "2024-03-12 09:00")])  # b withdrawn
    report = runner.process(date(2024, 3, 12))
    assert sorted(r.message_id for r in warehouse.read(EVENTS).collect()) == ["a", "c"]
    assert [(r.user_key, r.num_events) for r in warehouse.read(SESSIONS).orderBy("user_key").collect()] == [("u1", 1), ("u2", 1)]
    assert report.plan.events == ((date(2024, 3, 10), date(2024, 3, 11)),)
