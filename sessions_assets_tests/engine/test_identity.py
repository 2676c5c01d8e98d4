"""Persons and the users table on DataFrames, against the oracle: links in any order, shared devices, ties."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessions_assets.engine import identity
from sessions_assets.engine.sessionize import sessionize
from sessions_assets.engine.users import IDENTIFIED, USER_SCHEMA, users
from sessions_assets.settings import Settings
from sessions_assets_tests.engine.events import call, ev, frame
from sessions_assets_tests.helpers import reference
from sessions_assets_tests.helpers.budget import examples
from sessions_assets_tests.helpers.expected import oracle_rows, rows

AT = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
COLUMNS = ("message_id", "user_id", "anonymous_id", "user_key", "timestamp")
SCHEMA = "message_id string, user_id string, anonymous_id string, user_key string, timestamp timestamp"
IDENTIFIED_SCHEMA = "user_key string, user_id string, anonymous_id string"


def at(minutes: int) -> datetime:
    return AT + timedelta(minutes=minutes)


def stitched(spark, events: list[dict]) -> dict[str, str]:
    df = spark.createDataFrame([tuple(e[c] for c in COLUMNS) for e in events], SCHEMA)
    return {r.message_id: r.user_key for r in identity.stitch(df, identity.persons(df)).collect()}


def test_a_devices_anonymous_events_go_to_the_user_of_its_latest_link(spark):
    events = [
        call("browse", None, "dev", at(0)),
        call("cy-login", "cy", "dev", at(5)),
        call("dee-login", "dee", "dev", at(60)),
        call("later", None, "dev", at(90)),
        call("backend", "cy", None, at(100)),
        call("stranger", None, "other", at(0)),
    ]
    assert stitched(spark, events) == {
        "browse": "dee",
        "cy-login": "cy",
        "dee-login": "dee",
        "later": "dee",
        "backend": "cy",
        "stranger": "other",
    }


def test_links_at_the_same_moment_are_ordered_by_message_id(spark):
    events = [call("m-2", "ann", "dev", at(0)), call("m-1", "bob", "dev", at(0)), call("browse", None, "dev", at(9))]
    assert stitched(spark, events)["browse"] == "ann"


@st.composite
def calls(draw) -> list[dict]:
    """Calls of three people on three devices: anonymous, logged in, or backend only, at a few moments."""
    events = []
    for n in range(draw(st.integers(1, 12))):
        user = draw(st.sampled_from(["ann", "bob", "cat", None]))
        device = draw(st.sampled_from(["d1", "d2", "d3"] + ([None] if user else [])))
        events.append(call(f"m{n}", user, device, at(draw(st.integers(0, 3)))))
    return events


@pytest.mark.property
@settings(max_examples=examples(10), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=calls())
def test_persons_equal_the_oracles_for_any_calls(spark, events):
    assert stitched(spark, events) == {e["message_id"]: e["user_key"] for e in reference.stitch(events)}


@pytest.mark.property
@settings(max_examples=examples(6), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=calls(), paths=st.lists(st.sampled_from(["/", "/a", None]), min_size=12, max_size=12))
def test_users_equal_the_oracles(spark, events, paths):
    events = [
        {**ev(e["timestamp"], e["user_key"], type="page", page_path=p), **e}
        for e, p in zip(reference.stitch(events), paths, strict=False)
    ]
    identified = spark.createDataFrame([tuple(e[c] for c in IDENTIFIED) for e in events], IDENTIFIED_SCHEMA)
    sessions = sessionize(frame(spark, events), Settings())
    expected = reference.users(events, reference.sessionize(events))
    assert rows(users(sessions, identified), USER_SCHEMA.fieldNames()) == oracle_rows(
        expected, USER_SCHEMA.fieldNames()
    )
