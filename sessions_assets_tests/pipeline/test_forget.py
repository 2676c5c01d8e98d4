"""Forgetting persons through the real pipeline, against the oracle's recompute without their lines.

Three received days bring a person identified throughout (ida), one whose anonymous browsing was linked by a login
that came days late (leo), one who logged in on a device another person (tia) logged in on too (sam), and people
kept (kim, tia). One request forgets ida, leo and sam; then their later lines arrive (a new visit, a late event, a
re-delivery, a login of sam on a new device whose browsing is stored already); then a received day is ingested
again; then the same person is forgotten twice. After every step every table equals the oracle's recompute from all
landing lines but the forgotten ones.
"""

from __future__ import annotations

from datetime import date

import pytest
from pyspark.sql import functions as F

from sessions_assets.warehouse import journal, pending
from sessions_assets.warehouse.delta import DeltaLog
from sessions_assets.warehouse.tables import (
    ALL,
    EVENTS,
    FORGET_REQUESTS,
    RAW_EVENTS,
    RECEIVED_DAYS,
    REJECTED_EVENTS,
    SESSIONS,
)
from sessions_assets_tests.helpers.arrivals import running
from sessions_assets_tests.helpers.expected import assert_tables_match_oracle
from sessions_assets_tests.helpers.landing import segment, write_day

pytestmark = pytest.mark.scenario

D1, D2, D3, D4, D5 = (date(2024, 3, n) for n in range(1, 6))
FORGOTTEN = {"ida", "leo", "sam"}


def browse(message_id: str, device: str, at: str, **kw) -> str:
    return segment(message_id, None, at, kind="page", anonymousId=device, path="/", **kw)


def login(message_id: str, user: str, device: str, at: str, received: str | None = None) -> str:
    return segment(message_id, user, at, received, kind="identify", anonymousId=device)


def backend(message_id: str, user: str, at: str, **kw) -> str:
    return segment(message_id, user, at, anonymousId=None, **kw)


DAYS = {
    D1: [
        login("i1", "ida", "dev-ida", "2024-03-01 09:00"),
        segment("i2", "ida", "2024-03-01 09:10", anonymousId="dev-ida", path="/pricing"),
        browse("l1", "dev-leo", "2024-03-01 10:00"),
        browse("s1", "dev-shared", "2024-03-01 08:00"),
        login("s2", "sam", "dev-shared", "2024-03-01 08:05"),
        browse("n1", "dev-new", "2024-03-01 12:00"),  # sam's other device: his login on it comes on D4
        segment("k1", "kim", "2024-03-01 11:00"),
        segment("i3", "ida", "2024-03-01 10:00", "2024-03-01 08:00"),  # rejected: two hours ahead of its receipt
        '{"messageId": "i-broken", "userId": "ida", ',  # not JSON: attributable to no one, kept
    ],
    D2: [
        backend("i4", "ida", "2024-03-02 09:00"),
        browse("l2", "dev-leo", "2024-03-02 10:00"),
        browse("s3", "dev-shared", "2024-03-02 20:00"),
        login("t1", "tia", "dev-shared", "2024-03-02 21:00"),  # tia's own lines on the shared device stay
        segment("t2", "tia", "2024-03-02 21:10", anonymousId="dev-shared"),
        segment("k2", "kim", "2024-03-02 11:00"),
    ],
    D3: [
        login("l3", "leo", "dev-leo", "2024-03-01 10:05", "2024-03-03 08:00"),  # leo's login, two days late
        browse("s4", "dev-shared", "2024-03-03 07:00"),
        segment("t3", "tia", "2024-03-03 09:00", anonymousId="dev-shared"),
        segment("k3", "kim", "2024-03-03 11:00"),
    ],
}
LATER = {
    D4: [
        segment("i5", "ida", "2024-03-04 09:00", anonymousId="dev-ida"),  # a new visit
        browse("i6", "dev-ida", "2024-03-04 09:30"),  # logged out, on her device
        segment("l4", "leo", "2024-03-01 10:30", "2024-03-04 08:00"),  # a late event
        segment("i2", "ida", "2024-03-01 09:10", "2024-03-04 08:00", anonymousId="dev-ida", path="/pricing"),  # again
        login("n2", "sam", "dev-new", "2024-03-04 12:00"),  # a new device linked: its stored browsing goes
        browse("n3", "dev-new", "2024-03-04 12:05"),
        segment("k4", "kim", "2024-03-04 11:00"),
    ],
}


@pytest.fixture(scope="module")
def forgotten(spark, tmp_path_factory):
    """The three days processed, then one request to forget ida, leo and sam (what ``sessions-assets forget``
    does); the runner, the data root and the forget run."""
    root = tmp_path_factory.mktemp("forgotten") / "data"
    with running(root) as runner:
        for day, lines in DAYS.items():
            write_day(root, day, lines)
        runner.process()
        wh = warehouse(runner)
        key = journal.key_for(wh, runner.resources["pipeline"])
        step = runner.forget(journal.user_hashes(key, sorted(FORGOTTEN)), landing="list")
        yield runner, root, step


def warehouse(runner):
    return runner.resources["pipeline"].warehouse(runner.resources["spark"])


def persons(wh) -> set[str]:
    return {r.user_key for r in wh.read(SESSIONS).select("user_key").distinct().collect()}


def ids_in(wh, table) -> set[str]:
    rows = wh.read(table).select(*[c for c in ("user_id", "anonymous_id", "user_key") if c in table.columns])
    return {v for r in rows.collect() for v in r if v is not None}


def test_persons_identified_throughout_linked_late_and_on_a_shared_device_are_forgotten(forgotten):
    runner, root, step = forgotten
    wh = warehouse(runner)
    assert_tables_match_oracle(wh, root, forgotten=FORGOTTEN)
    assert persons(wh) == {"kim", "tia", "dev-new"}  # dev-new: not linked to sam yet
    # leo's browsing before his late login, and the shared device's anonymous lines, went with them; tia's lines on
    # the shared device stayed.
    assert not {"dev-leo", "dev-ida"} & ids_in(wh, RAW_EVENTS)
    anonymous = wh.read(RAW_EVENTS).where("user_id IS NULL").select("anonymous_id").collect()
    assert {r.anonymous_id for r in anonymous} == {"dev-new"}
    tia = wh.read(EVENTS).where(F.col("user_id") == "tia").select("message_id", "anonymous_id").collect()
    assert sorted(tuple(r) for r in tia) == [("t1", "dev-shared"), ("t2", "dev-shared"), ("t3", "dev-shared")]
    # A rejected line of ida's went; the one that is not JSON, though it says "ida", names no one and stayed.
    assert [r.payload for r in wh.read(REJECTED_EVENTS).collect()] == [DAYS[D1][-1]]
    [request] = journal.read(wh)
    assert (request.state, request.reason, len(request.user_hashes)) == (journal.DONE, journal.REQUEST, 3)
    # dev-ida, dev-leo, dev-shared and the anon-ida her rejected line carried: found when taken, or in their lines
    assert len(request.anonymous_hashes) == 4
    assert request.removed["raw_events"] == 10 and request.removed["rejected_events"] == 1
    summary = step.metadata["forget"]
    assert summary["requests_done"] == 1 and set(summary["tables_purged"]) >= {"raw_events", "events", "sessions"}
    landing = summary["landing_files_holding_lines"]
    assert [f.rsplit("/", 2)[-2] for f in landing] == [f"received_date={d}" for d in (D1, D2, D3)]


def test_later_lines_of_the_forgotten_are_suppressed_and_a_new_device_linked_to_one_goes(forgotten):
    runner, root, _ = forgotten
    for day, lines in LATER.items():
        write_day(root, day, lines)
    steps, _ = runner.process()
    wh = warehouse(runner)
    assert_tables_match_oracle(wh, root, forgotten=FORGOTTEN)
    ingest = steps[0].metadata["raw_events"]
    assert ingest["suppressed"] == 6 and ingest["accepted"] == 1  # all but kim's line, never stored
    assert [r["suppressed"] for r in ingest["files"]] == [6]
    assert "dev-new" not in persons(wh) and "dev-new" not in ids_in(wh, RAW_EVENTS)
    # What the ingest found: sam's new device (whose stored browsing went) and the anon-leo his late event carried.
    links = [r for r in journal.read(wh) if r.reason == journal.LINK]
    assert sorted(r.removed.get("raw_events", 0) for r in links) == [0, 1]
    assert all(r.state == journal.DONE for r in links) and steps[-1].metadata["forget"]["requests_done"] == 2


def recorded(wh) -> dict:
    """Each received day's record: its totals and each file's fingerprint and counts."""
    return {
        r.received_date: (
            r.fingerprint,
            r.lines,
            r.accepted,
            r.rejected,
            sorted(
                (f.source_file, f.fingerprint, f.lines, f.accepted, f.rejected, sorted(f.events_per_day.items()))
                for f in r.files
            ),
        )
        for r in wh.read(RECEIVED_DAYS).collect()
    }


def test_a_received_day_ingested_again_brings_nothing_back(forgotten):
    runner, root, _ = forgotten
    wh = warehouse(runner)
    before = recorded(wh)
    step = runner.reingest(D1, D4, folders=True)  # every file read again, as a re-delivery would have it
    runner.process()
    assert_tables_match_oracle(wh, root, forgotten=FORGOTTEN)
    assert step.metadata["raw_events"]["suppressed"] == 18
    assert recorded(wh) == before  # the counts the erasure corrected are what an ingest counts
    assert not pending.erasures(wh.storage, 0).due and all(r.state == journal.DONE for r in journal.read(wh))


def test_forgetting_the_same_person_again_changes_nothing(forgotten):
    runner, root, _ = forgotten
    wh = warehouse(runner)
    versions = {t.name: DeltaLog(wh.storage, t).version() for t in ALL if t is not FORGET_REQUESTS}
    key = journal.key_for(wh, runner.resources["pipeline"])
    step = runner.forget(journal.user_hashes(key, ["ida"]))
    assert {t.name: DeltaLog(wh.storage, t).version() for t in ALL if t is not FORGET_REQUESTS} == versions
    assert step.metadata["forget"]["rows_removed"] == {} and step.metadata["forget"]["tables_purged"] == []
    assert journal.read(wh)[-1].state == journal.DONE
    assert_tables_match_oracle(wh, root, forgotten=FORGOTTEN)
