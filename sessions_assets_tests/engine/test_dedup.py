"""Keeping the first-received copy of each message, as the oracle does, however the copies arrive."""

from __future__ import annotations

import itertools
from datetime import date

import pytest

from sessions_assets.engine import dedup
from sessions_assets_tests.helpers import reference
from sessions_assets_tests.helpers.cases import line

COLUMNS = ["message_id", "timestamp", "received_at", "received_date", "event_date", "payload", "source_id"]
SCHEMA = (
    "message_id string, timestamp timestamp, received_at timestamp, received_date date, event_date date, "
    "payload string, source_id string"
)


def copy(received: str, timestamp: str, day: str, event: str = "Viewed", source: str | None = None) -> dict:
    event_row, _ = reference.accept_line(line(messageId="m-1", event=event, timestamp=timestamp, receivedAt=received))
    return {**event_row, "received_date": date.fromisoformat(day), "source_id": source}


COPIES = [
    copy("2024-03-11T00:00:06Z", "2024-03-11T00:00:05Z", "2024-03-11", "original"),
    copy("2024-03-10T23:59:59Z", "2024-03-10T23:59:58Z", "2024-03-10", "early retry across midnight"),
    copy("2024-03-12T08:00:00Z", "2024-03-11T00:00:20Z", "2024-03-12", "late retry"),
    copy("2024-03-12T08:00:00Z", "2024-03-11T00:00:30Z", "2024-03-12", "tie on the moment: the payload decides"),
]


def frame(spark, copies):
    return spark.createDataFrame(
        [(*(c[k] for k in COLUMNS[:4]), c["timestamp"].date(), *(c[k] for k in COLUMNS[5:])) for c in copies], SCHEMA
    )


def kept(df) -> list[tuple]:
    return sorted((r.message_id, r.payload) for r in df.collect())


def test_one_message_sent_by_two_sources_is_kept_once_from_the_first_source_by_name(spark):
    copies = [copy("2024-03-11T00:00:06Z", "2024-03-11T00:00:05Z", "2024-03-11", source=s) for s in ("web", "app")]
    [expected] = reference.dedupe(copies)
    for order in (copies, copies[::-1]):
        [row] = dedup.keep_first(frame(spark, order)).collect()
        assert (row.source_id, expected["source_id"]) == ("app", "app")


@pytest.mark.parametrize("order", list(itertools.permutations(range(4)))[::5], ids=lambda o: "".join(map(str, o)))
def test_the_first_received_copy_is_kept_in_any_order(spark, order):
    copies = [COPIES[i] for i in order]
    [expected] = reference.dedupe(copies)
    assert kept(dedup.keep_first(frame(spark, copies))) == [("m-1", expected["payload"])]


def test_a_later_arrival_received_first_replaces_the_stored_copy_on_its_own_day(spark):
    stored = frame(spark, [COPIES[0]])  # the original, stored on 2024-03-11
    incoming = frame(spark, [COPIES[1]])  # received before it, processed after it, stamped 2024-03-10
    ops = {(r._op, r.event_date) for r in dedup.arrivals(incoming, stored, COLUMNS).collect()}
    assert ops == {("insert", date(2024, 3, 10)), ("delete", date(2024, 3, 11))}


def test_a_later_received_copy_changes_nothing(spark):
    ops = dedup.arrivals(frame(spark, [COPIES[2]]), frame(spark, [COPIES[0]]), COLUMNS)
    assert ops.collect() == []


def test_corrections_make_the_stored_rows_the_wanted_ones(spark):
    wanted = frame(spark, [COPIES[1]])
    stored = frame(spark, [COPIES[0]])
    ops = {(r._op, r.event_date) for r in dedup.corrections(wanted, stored, COLUMNS).collect()}
    assert ops == {("insert", date(2024, 3, 10)), ("delete", date(2024, 3, 11))}
    assert dedup.corrections(stored, stored, COLUMNS).collect() == []
    nothing = frame(spark, [])
    assert {(r._op, r.event_date) for r in dedup.corrections(nothing, stored, COLUMNS).collect()} == {
        ("delete", date(2024, 3, 11))  # a message no copy is left of goes
    }
