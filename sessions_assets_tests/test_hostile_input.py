"""Hostile landing files never stop the pipeline: every line is accepted or rejected with a reason.

Hypothesis writes received-day folders of random bytes, truncated and non-UTF-8 lines, wrong JSON types,
unknown fields, empty files and valid events mixed, and the real parsing (Spark) must account for every
line and accept nothing that breaks the contract. One named scenario runs such a day through Dagster.
"""

from __future__ import annotations

import json
from datetime import date, timedelta

from hypothesis import HealthCheck, given
from hypothesis import strategies as st
from pyspark.sql import functions as F

from sessions_assets import ingest
from sessions_assets.config import PipelineSettings
from sessions_assets.tables import RAW_EVENTS, REJECTED_EVENTS
from sessions_assets_tests.landing import segment, ts
from sessions_assets_tests.soak import property_test

R = date(2024, 3, 16)
REASONS = {"malformed_json", "missing_message_id", "missing_user", "bad_timestamp", "future_timestamp", "too_late"}
WRONG_TYPES = [{"timestamp": 12}, {"userId": {}}, {"anonymousId": [1]}, {"messageId": 7}, {"receivedAt": None},
               {"messageId": {"$oid": "x"}, "userId": True}, {"timestamp": "2024-03-16T09:00:00+25:00"}]  # fmt: skip

valid = st.builds(
    lambda i, user, minutes, lag: segment(f"m{i}", user, ts("2024-03-16 00:00") + timedelta(minutes=minutes),
                                          ts("2024-03-16 12:00") + timedelta(minutes=lag)),
    st.integers(0, 50), st.sampled_from(["u1", "u2", None]), st.integers(-600_000, 1500), st.integers(-60, 600),
).map(str.encode)  # fmt: skip
hostile = st.one_of(
    valid,
    st.binary(max_size=300),  # random bytes, newlines and invalid UTF-8 included
    st.tuples(valid, st.integers(1, 120)).map(lambda t: t[0][: t[1]]),  # truncated
    st.tuples(valid, st.sampled_from(WRONG_TYPES)).map(lambda t: json.dumps({**json.loads(t[0]), **t[1]}).encode()),
    valid.map(lambda line: line[:-1] + b', "extra": {"nested": [1, {"x": null}]}, "\xc3\xa9t\xc3\xa9": 1}'),
    valid.map(lambda line: line.replace(b'"track"', b'"tr\xff\xfeck"')),  # non-UTF-8 inside a valid event
    st.just(b""),
)
files = st.lists(st.tuples(st.lists(hostile, max_size=12), st.booleans()), max_size=3)


def _write(folder, drawn) -> int:
    """Write the drawn files; return how many lines they hold (Spark and ``splitlines`` agree on \\n, \\r, \\r\\n)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = 0
    for i, (lines_of_file, trailing_newline) in enumerate(drawn):
        content = b"\n".join(lines_of_file) + (b"\n" if trailing_newline and lines_of_file else b"")
        (folder / f"part-{i}.{'json' if i == 2 else 'jsonl'}").write_bytes(content)
        lines += len(content.splitlines())
    return lines


@property_test(8, suppress_health_check=list(HealthCheck))
@given(drawn=files)
def test_every_hostile_line_is_accounted_for(spark, tmp_path_factory, drawn):
    root = tmp_path_factory.mktemp("hostile")
    settings_ = PipelineSettings(data_root=str(root))
    expected_lines = _write(settings_.landing / f"received_date={R}", drawn)

    classified = ingest.classify(ingest.parse(ingest.read_lines(spark, ingest.landing_files(settings_, R))), settings_)
    accepted, rejected = ingest.split(classified, R)
    accepted, rejected = accepted.collect(), rejected.collect()

    assert len(accepted) + len(rejected) == expected_lines
    assert {r.reason for r in rejected} <= REASONS
    for row in accepted:
        assert row.message_id.strip() and row.user_key.strip() and row.payload
        assert row.timestamp <= row.received_at + timedelta(hours=1)
        assert row.timestamp >= row.received_at - timedelta(days=400)
        assert row.event_date == row.timestamp.date()


def test_a_day_of_hostile_files_is_ingested_whole(runner, data_root, warehouse):
    """Empty file, a file of rejects only, a 2 MB line, bytes that are not UTF-8: the run succeeds."""
    folder = data_root / "landing" / f"received_date={R}"
    folder.mkdir(parents=True)
    (folder / "empty.jsonl").write_bytes(b"")
    (folder / "only-rejects.jsonl").write_bytes(b"not json\n{}\n\xff\xfe\x00\n[1,2]\n")
    huge = json.loads(segment("m-huge", "u1", "2024-03-16 09:00"))
    huge["properties"] = {"blob": "x" * 2_000_000}
    (folder / "mixed.jsonl").write_bytes(
        json.dumps(huge).encode() + b"\n" + segment("m-ok", "u2", "2024-03-16 09:01").encode() + b"\r\n"
        + segment("m-bad", "u3", "2024-03-16 09:02").encode().replace(b"m-bad", b"m-\xff") + b"\n"
    )  # fmt: skip
    report = runner.process(R)

    assert report.plan.event_days == (R,)
    raw, rejected = warehouse.read(RAW_EVENTS), warehouse.read(REJECTED_EVENTS)
    assert raw.count() + rejected.count() == 7
    assert sorted(r.message_id for r in raw.collect())[:2] == ["m-huge", "m-ok"]
    assert raw.where(F.length("payload") > 2_000_000).count() == 1  # the huge line is kept whole
    assert rejected.where("reason = 'malformed_json'").count() == 3
