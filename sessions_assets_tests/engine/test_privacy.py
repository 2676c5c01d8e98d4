"""Keyed hashes in Spark are Python's HMAC-SHA-256, ids are read as the pipeline reads them, and which lines a request
forgets is the oracle's rule, line by line."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest
from pyspark.sql import functions as F

from sessions_assets.engine import accept, privacy
from sessions_assets_tests.helpers import reference
from sessions_assets_tests.helpers.cases import line

KEY = bytes(range(32))
TEXTS = ["u42", "jane@example.com", " u42 ", "é😀", "42", "a" * 300]


def test_spark_hashes_ids_as_python_does(spark):
    rows = spark.createDataFrame([(t,) for t in [*TEXTS, None]], "id string")
    got = [r[0] for r in rows.select(privacy.hashed(F.col("id"), KEY)).collect()]
    assert got == [hmac.new(KEY, t.encode(), hashlib.sha256).hexdigest() for t in TEXTS] + [None]
    long_key = bytes(100)  # longer than a block: hashed first, as HMAC does
    assert rows.limit(1).select(privacy.hashed(F.col("id"), long_key)).head()[0] == privacy.keyed_hash(long_key, "u42")
    assert all(privacy.is_hash(h) for h in got[:-1]) and privacy.key_id(KEY) != privacy.key_id(bytes(32))


@pytest.mark.parametrize(
    ("given", "read"),
    [("u42", "u42"), (" u42 ", " u42 "), ("", None), (" \t", None), ("\u00a0\u3000", None), ("\u200b", "\u200b")],
    ids=["plain", "spaces_kept", "empty", "blank", "no_break_spaces", "zero_width_space_is_not_white_space"],
)
def test_an_id_is_read_as_the_pipeline_reads_user_id(spark, given, read):
    assert privacy.normalised(given) == read
    parsed = accept.parse(spark.createDataFrame([(line(userId=given), None)], "payload string, source_file string"))
    assert parsed.select("user_id").head()[0] == read


# (line, forgotten?) for a request to forget "u1", whose device "dev-1" a line of theirs links.
LINES = [
    (line(messageId="m1", userId="u1", anonymousId="dev-1"), True),  # theirs, and the link
    (line(messageId="m2", userId=None, anonymousId="dev-1"), True),  # the linked device, logged out
    (line(messageId="m3", userId="u2", anonymousId="dev-1"), False),  # another person on the device
    (line(messageId="m4", userId="", anonymousId="dev-1"), True),  # a blank userId is none
    (line(messageId="m5", userId=1.5, anonymousId="dev-1"), True),  # so is a number that is not an integer
    (line(messageId="m11", userId=1, anonymousId="dev-1"), False),  # an integer is an id: another person, "1"
    (line(messageId="m6", userId="u1", anonymousId=None, timestamp="later"), True),  # rejected, but theirs
    (line(messageId="m7", userId="U1"), False),  # another id: case counts
    (line(messageId="m8", userId=None, anonymousId="dev-2"), False),  # never linked
    (line(messageId="m9", userId="u1", anonymousId="dev-3")[:-1] + "}, 1", False),  # not one JSON object: no one's
    (line(messageId="m10", userId=None, anonymousId="dev-3"), False),  # so it links nothing
    ('{"userId": "u1", ', False),  # broken: no one's
]


def test_the_lines_a_request_forgets_are_the_oracles(spark):
    lines = spark.createDataFrame([(text, None) for text, _ in LINES], "payload string, source_file string")
    hashed = privacy.with_hashes(accept.parse(lines), KEY)
    users = spark.createDataFrame([(privacy.keyed_hash(KEY, "u1"),)], "hash string")
    devices = privacy.links(hashed, users).select("hash")
    assert devices.count() == 1  # dev-1: dev-3 came with a line that is not JSON
    marked = {r.payload: r.forgotten for r in privacy.mark(hashed, users, devices).collect()}
    assert marked == {text: forgotten for text, forgotten in LINES}
    kept = reference.forget({"2024-03-16": [text for text, _ in LINES]}, {"u1"})["2024-03-16"]
    assert kept == [text for text, forgotten in LINES if not forgotten]


def test_a_person_is_named_by_a_session_of_theirs(spark):
    sessions = spark.createDataFrame(
        [("s-late", "kim", "2024-03-02 10:00:00"), ("s-first", "kim", "2024-03-01 10:00:00")],
        "session_id string, user_key string, session_start string",
    ).withColumn("session_start", F.to_timestamp("session_start"))
    rows = spark.createDataFrame([("kim", 3), ("ann", 1)], "user_key string, events long")
    named = {json.dumps(r.asDict(), sort_keys=True) for r in privacy.name_by_session(rows, sessions).collect()}
    assert named == {'{"a_session_id": "s-first", "events": 3}', '{"a_session_id": null, "events": 1}'}
