"""The Spark parser and classifier give every line of the oracle's acceptance table the oracle's verdict."""

from __future__ import annotations

from datetime import UTC

import pytest

from sessions_assets.engine import accept
from sessions_assets.settings import Settings
from sessions_assets_tests.helpers import cases
from sessions_assets_tests.helpers.expected import ORACLE_EVENT_FIELDS
from sessions_assets_tests.helpers.reference import accept_line

LINES = [("rejected", *c) for c in cases.REJECTED] + [("accepted", c[0], c[1], None) for c in cases.ACCEPTED]
# What parsing gives a line, as the oracle has it.
FIELDS = ("user_id", "anonymous_id", *(f for f in ORACLE_EVENT_FIELDS if f not in ("event_date", "source_id")))


@pytest.fixture(scope="module")
def verdicts(spark):
    """Every case's line through ``parse`` and ``classify`` at once."""
    lines = spark.createDataFrame(
        [(text, f"case-{i}") for i, (_, _, text, _) in enumerate(LINES)], "payload string, source_file string"
    )
    rows = accept.classify(accept.parse(lines), Settings()).collect()
    return {r.source_file: r for r in rows}


@pytest.mark.parametrize("index", range(len(LINES)), ids=[f"{kind}-{name}" for kind, name, _, _ in LINES])
def test_the_pipeline_judges_a_line_as_the_oracle_does(verdicts, index):
    _, _, text, _ = LINES[index]
    event, reason = accept_line(text)
    row = verdicts[f"case-{index}"]
    assert row.reason == reason
    if event is not None:
        parsed = {f: row[f].replace(tzinfo=UTC) if f in ("timestamp", "received_at") else row[f] for f in FIELDS}
        assert parsed == {f: event[f] for f in FIELDS}
        assert row.event_date == event["timestamp"].date()


@pytest.fixture(scope="module")
def ids_read(spark):
    """Every id case's line through ``parse`` at once: its three ids, by case name."""
    lines = spark.createDataFrame([(text, name) for name, text, _ in cases.IDS], "payload string, source_file string")
    return {r.source_file: (r.message_id, r.user_id, r.anonymous_id) for r in accept.parse(lines).collect()}


@pytest.mark.parametrize("name, text, ids", cases.IDS, ids=[c[0] for c in cases.IDS])
def test_an_id_is_read_as_the_oracle_reads_it(ids_read, name, text, ids):
    event, _ = accept_line(text)
    assert ids_read[name] == ids == tuple(event[k] for k in accept.IDS)


@pytest.mark.parametrize("raw, expected", cases.REVENUES, ids=[r for r, _ in cases.REVENUES])
def test_revenue_is_read_as_the_oracle_reads_it(spark, raw, expected):
    lines = spark.createDataFrame([(cases.with_revenue(raw), "f")], "payload string, source_file string")
    [row] = accept.parse(lines).collect()
    assert (row.revenue, accept_line(cases.with_revenue(raw))[0]["revenue"]) == (expected, expected)


def test_thresholds_come_from_the_settings(spark):
    late = cases.line(timestamp="2024-03-01T09:00:00Z", receivedAt="2024-03-16T09:00:00Z")
    ahead = cases.line(timestamp="2024-03-16T09:20:00Z", receivedAt="2024-03-16T09:00:00Z")
    lines = spark.createDataFrame([(late, "late"), (ahead, "ahead")], "payload string, source_file string")
    strict = Settings(max_lateness_days=14, max_future_skew_minutes=15)
    assert {r.source_file: r.reason for r in accept.classify(accept.parse(lines), strict).collect()} == {
        "late": "too_late",
        "ahead": "future_timestamp",
    }
