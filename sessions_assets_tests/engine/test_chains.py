"""Recomputing only the touched chains, then renumbering, gives what a full sessionization gives.

Stored sessions of the old events, plus some events added and some removed: the difference ``chains``
computes, applied to the stored rows, must equal the oracle's sessions of the new events, every column.
Events are read the way a refresh reads them: chains near a stored session from all events, the others
from the added ones only.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessions_assets.engine import chains
from sessions_assets.engine.sessionize import SESSION_COLUMNS, SESSIONIZED, sessionize
from sessions_assets.settings import Settings
from sessions_assets_tests.engine.events import BASE, ev, frame, streams
from sessions_assets_tests.helpers import reference
from sessions_assets_tests.helpers.budget import examples
from sessions_assets_tests.helpers.expected import as_utc, assert_same, oracle_rows

GAP = Settings().session_gap


def apply(stored: list[dict], ops: list[dict]) -> list[dict]:
    """What a ``MERGE`` of ``ops`` makes of ``stored`` sessions (keyed by id)."""
    table = {s["session_id"]: dict(s) for s in stored}
    for op in ops:
        if op["_op"] == "delete":
            table.pop(op["session_id"])
        elif op["_op"] == "renumber":
            table[op["session_id"]]["session_number"] = op["session_number"]
        else:
            assert (op["session_id"] in table) == (op["_op"] == "update"), op
            table[op["session_id"]] = {c: op[c] for c in SESSION_COLUMNS}
    return list(table.values())


def refresh(spark, old: list[dict], added: list[dict], removed: list[dict]) -> list[dict]:
    new = [e for e in old if e not in removed] + added
    stored = sessionize(frame(spark, old), Settings()).localCheckpoint()
    moments = [(e["user_key"], e["timestamp"], e["timestamp"]) for e in added + removed]
    dirty = spark.createDataFrame(moments, "user_key string, dirty_from timestamp, dirty_to timestamp")
    narrow = stored.select(*chains.STORED_COLUMNS)
    touched = chains.touched_chains(narrow, dirty, GAP).localCheckpoint()
    events = chains.within(frame(spark, new).select(*SESSIONIZED), touched.where("has_stored"))
    events = events.unionByName(chains.within(frame(spark, added), touched.where("not has_stored")))
    ops = chains.writes(narrow, touched, sessionize(events, Settings()))
    stored_rows = [r.asDict() for r in stored.collect()]
    return apply(stored_rows, [r.asDict() for r in ops.collect()])


def assert_like_a_full_recompute(spark, old, added, removed):
    new = [e for e in old if e not in removed] + added
    actual = refresh(spark, old, added, removed)
    actual_rows = oracle_rows([{c: as_utc(r[c]) for c in SESSION_COLUMNS} for r in actual], SESSION_COLUMNS)
    assert_same(actual_rows, oracle_rows(reference.sessionize(new), SESSION_COLUMNS), "sessions")


def day(minutes: int, user: str = "u", **fields) -> dict:
    return ev(BASE + timedelta(minutes=minutes), user, **fields)


def test_late_event_merges_two_sessions_and_renumbers_the_rest(spark):
    old = [day(0), day(10), day(45), day(50), day(200), day(2000)]
    assert_like_a_full_recompute(spark, old, added=[day(30)], removed=[])


def test_late_session_between_two_others_bumps_the_later_numbers(spark):
    old = [day(0), day(300), day(3000), day(6000)]
    assert_like_a_full_recompute(spark, old, added=[day(120, type="page", page_path="/new")], removed=[])


def test_removed_event_splits_a_session(spark):
    old = [day(0), day(20), day(40), day(60)]
    assert_like_a_full_recompute(spark, old, added=[], removed=[old[2]])


def test_new_chain_near_no_stored_session_reads_nothing_stored(spark):
    old = [day(0, "a"), day(10, "a")]
    assert_like_a_full_recompute(spark, old, added=[day(600, "a"), day(610, "a"), day(5, "b")], removed=[])


def test_a_late_event_extends_a_bot_chain_past_the_cap(spark):
    old = [day(20 * i, "bot") for i in range(80)]
    assert_like_a_full_recompute(spark, old, added=[day(-15, "bot")], removed=[])


@st.composite
def changes(draw):
    events = draw(streams())
    added = [e for e in events if draw(st.integers(0, 3)) == 0]
    gone = draw(streams(users=2, max_events=4))
    removed = [e for e in gone if draw(st.booleans())]
    old = [e for e in events if e not in added] + gone
    return old, added, removed


@pytest.mark.property
@settings(max_examples=examples(6), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(change=changes())
def test_random_additions_and_removals(spark, change):
    assert_like_a_full_recompute(spark, *change)
