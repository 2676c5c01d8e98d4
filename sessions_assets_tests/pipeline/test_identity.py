"""Identity stitching through the real pipeline, with the linking calls late or early, against the oracle.

Three received days bring visitors' browsing, logins and backend calls on time; the fourth brings the
identify calls that arrived late. In one order the late day comes last, in the other first (a link before
the events it links). Either way every table must equal the oracle's recompute and the persons must show.
"""

from __future__ import annotations

from datetime import date

import pytest
from pyspark.sql import functions as F

from sessions_assets.warehouse import delta
from sessions_assets.warehouse.delta import Warehouse
from sessions_assets.warehouse.tables import DAILY_SNAPSHOT, REJECTED_EVENTS, SESSIONS, USERS
from sessions_assets_tests.helpers import reference
from sessions_assets_tests.helpers.arrivals import arrive_in_steps, running
from sessions_assets_tests.helpers.expected import assert_tables_match_oracle
from sessions_assets_tests.helpers.landing import landing_lines, segment

pytestmark = pytest.mark.scenario

D1, D2, D3, D4 = date(2024, 3, 1), date(2024, 3, 2), date(2024, 3, 3), date(2024, 3, 4)


def anonymous(message_id: str, device: str, at: str, **kw) -> str:
    """A call from a visitor not logged in: only the device's anonymousId."""
    return segment(message_id, None, at, kind="page", anonymousId=device, **kw)


def backend(message_id: str, user: str, at: str) -> str:
    """A server-side call: only the userId."""
    return segment(message_id, user, at, anonymousId=None)


def identify(message_id: str, user: str, device: str, at: str, received: str | None = None) -> str:
    """A login: both ids, the link."""
    return segment(message_id, user, at, received, kind="identify", anonymousId=device)


ON_TIME = {
    D1: [
        # ana browses, then her backend call after a login whose identify is late
        anonymous("a1", "dev-ana", "2024-03-01 09:50", path="/home", referrer="https://search.example/"),
        anonymous("a2", "dev-ana", "2024-03-01 09:55", path="/pricing"),
        backend("a4", "ana", "2024-03-01 10:05"),
        # bo's first anonymous visit
        anonymous("b1", "dev-bo", "2024-03-01 10:00", path="/blog"),
        # a shared device: someone browses, cy logs in
        anonymous("s1", "dev-shared", "2024-03-01 08:00", path="/"),
        # eve on two devices, logged in on both
        identify("e1", "eve", "dev-eve-phone", "2024-03-01 12:00"),
        identify("e2", "eve", "dev-eve-laptop", "2024-03-01 18:00"),
        # fay's backend call; her identify is late
        backend("f2", "fay", "2024-03-01 12:00"),
        # a visitor never identified
        anonymous("n1", "dev-nobody", "2024-03-01 13:00", path="/"),
    ],
    D2: [
        anonymous("b2", "dev-bo", "2024-03-02 10:00", path="/docs"),
        identify("s3", "dee", "dev-shared", "2024-03-02 09:00"),  # dee logs in on the shared device, later
        anonymous("s4", "dev-shared", "2024-03-02 20:00", path="/"),
        anonymous("e3", "dev-eve-phone", "2024-03-02 08:00", path="/app"),
        anonymous("e4", "dev-eve-laptop", "2024-03-02 21:00", path="/app"),
    ],
    D3: [
        backend("b4", "bo", "2024-03-03 12:00"),
        anonymous("f3", "dev-fay", "2024-03-03 15:00", path="/return"),  # fay again, logged out
    ],
}
LATE = [
    identify("a3", "ana", "dev-ana", "2024-03-01 10:00", "2024-03-04 08:00"),
    identify("b3", "bo", "dev-bo", "2024-03-03 11:59", "2024-03-04 08:00"),  # three days after bo's first visit
    identify("s2", "cy", "dev-shared", "2024-03-01 08:05", "2024-03-04 08:00"),  # an older login, arriving late
    identify("f1", "fay", "dev-fay", "2024-03-01 11:00", "2024-03-04 08:00"),
]


@pytest.fixture(scope="module", params=["late_links_last", "late_links_first"])
def arrived(request, spark, tmp_path_factory):
    """The warehouse after all four days, the late links last or first, and its data root."""
    root = tmp_path_factory.mktemp(request.param) / "data"
    steps = [ON_TIME, {D4: LATE}] if request.param == "late_links_last" else [{D4: LATE}, ON_TIME]
    return arrive_in_steps(spark, root, steps), root


def sessions_of(wh, person: str) -> list[tuple]:
    rows = wh.read(SESSIONS).where(F.col("user_key") == person).orderBy("session_start").collect()
    return [(r.session_number, r.session_start.strftime("%m-%d %H:%M"), r.num_events, r.session_date) for r in rows]


def persons(wh) -> set[str]:
    return {r.user_key for r in wh.read(SESSIONS).select("user_key").distinct().collect()}


def test_every_table_equals_a_full_recompute(arrived):
    assert_tables_match_oracle(*arrived)


def test_anonymous_browsing_within_30_minutes_of_a_login_is_one_session(arrived):
    wh, _ = arrived
    assert sessions_of(wh, "ana") == [(1, "03-01 09:50", 4, D1)]
    [row] = wh.read(SESSIONS).where(F.col("user_key") == "ana").collect()
    assert (row.landing_path, row.referrer) == ("/home", "https://search.example/")
    assert "dev-ana" not in persons(wh)


def test_identify_three_days_late_merges_past_sessions_into_the_users_and_renumbers_them(arrived):
    wh, _ = arrived
    assert sessions_of(wh, "bo") == [(1, "03-01 10:00", 1, D1), (2, "03-02 10:00", 1, D2), (3, "03-03 11:59", 2, D3)]
    assert "dev-bo" not in persons(wh)


def test_a_shared_devices_later_login_wins_even_when_it_arrives_first(arrived):
    wh, _ = arrived
    assert sessions_of(wh, "dee") == [(1, "03-01 08:00", 1, D1), (2, "03-02 09:00", 1, D2), (3, "03-02 20:00", 1, D2)]
    assert sessions_of(wh, "cy") == [(1, "03-01 08:05", 1, D1)]


def test_a_persons_two_devices_are_one_user_in_the_snapshot(arrived):
    wh, _ = arrived
    assert sessions_of(wh, "eve") == [
        (1, "03-01 12:00", 1, D1),
        (2, "03-01 18:00", 1, D1),
        (3, "03-02 08:00", 1, D2),
        (4, "03-02 21:00", 1, D2),
    ]
    [eve] = wh.read(USERS).where(F.col("user_key") == "eve").collect()
    assert (eve.user_id, eve.sessions, eve.events, eve.anonymous_ids) == ("eve", 4, 4, 2)
    on_hand = wh.read(DAILY_SNAPSHOT).where(F.col("snapshot_date") == D2).agg(F.sum("users_on_hand")).head()[0]
    assert on_hand == len(persons(wh))  # everyone had a session on D1: each person once, no device on its own
    assert not {"dev-eve-phone", "dev-eve-laptop"} & persons(wh)


def test_a_backend_call_and_a_logged_out_return_visit_belong_to_one_person(arrived):
    wh, _ = arrived
    assert sessions_of(wh, "fay") == [(1, "03-01 11:00", 1, D1), (2, "03-01 12:00", 1, D1), (3, "03-03 15:00", 1, D3)]
    assert "dev-fay" not in persons(wh)


def test_a_visitor_never_identified_is_a_person_of_its_own(arrived):
    wh, _ = arrived
    [row] = wh.read(USERS).where(F.col("user_key") == "dev-nobody").collect()
    assert (row.user_id, row.sessions, row.anonymous_ids, row.first_landing_path) == (None, 1, 1, "/")


def test_stitching_off_gives_one_user_per_userid_else_anonymousid_and_switching_back_rebuilds(spark, tmp_path):
    root = tmp_path / "data"
    wh = arrive_in_steps(spark, root, [ON_TIME, {D4: LATE}], stitch_identities=False)
    unstitched = reference.recompute(landing_lines(root), reference.Settings(stitch_identities=False))
    assert_tables_match_oracle(wh, root, unstitched)
    assert {"dev-ana", "dev-bo", "dev-shared", "dev-fay"} <= persons(wh)
    assert sessions_of(wh, "ana") == [(1, "03-01 10:00", 2, D1)]
    with running(root) as runner:  # switched on: a repair of any day rebuilds events, the rest follows
        runner.repair(D1, D1, {"events"})
    assert_tables_match_oracle(wh, root)


def test_a_received_day_ingested_again_with_its_login_on_another_device_unlinks_the_first(spark, tmp_path):
    root = tmp_path / "data"
    browsing = [anonymous("p1", "dev-x", "2024-03-01 09:00"), anonymous("p2", "dev-why", "2024-03-01 09:05")]
    first = {D1: [*browsing, identify("i1", "una", "dev-x", "2024-03-01 09:10")]}
    again = {D1: [*browsing, identify("i1", "una", "dev-why", "2024-03-01 09:10")]}  # the same message, corrected
    wh = arrive_in_steps(spark, root, [first, again])
    assert_tables_match_oracle(wh, root)
    assert persons(wh) == {"una", "dev-x"}


def test_large_inputs_run_compiled_without_broadcasts_and_build_the_same_tables(spark, tmp_path, monkeypatch):
    """Ingests and ``events`` writes of many rows run compiled, and the joins of steps of many rows are planned
    without broadcast hints: with every input counted as large, the tables still equal the oracle after
    arrivals and a repair of every day, and the session is as it was after each."""
    monkeypatch.setattr(delta, "COMPILED_FROM_ROWS", 1)
    monkeypatch.setattr(delta, "BROADCAST_UP_TO_ROWS", -1)
    seen, writes = [], {name: getattr(Warehouse, name) for name in ("append", "merge", "replace_where")}
    session = ("spark.sql.codegen.wholeStage", "spark.sql.optimizer.disableHints")

    def watching(name):
        def write(wh, table, *args, **kwargs):  # the session's settings as each table is written
            seen.append((table.name, *(wh.spark.conf.get(key, "false") for key in session)))
            return writes[name](wh, table, *args, **kwargs)

        return write

    for name in writes:
        monkeypatch.setattr(Warehouse, name, watching(name))
    root = tmp_path / "data"
    # Judged compiled too: malformed JSON, content after the object, a timestamp too long before its receivedAt.
    rejected = ["{not json", '{"a": 1}}', segment("old", "zed", "2022-01-01 10:00", "2024-03-01 08:00")]
    on_time = {**ON_TIME, D1: [*ON_TIME[D1], *rejected]}
    wh = arrive_in_steps(spark, root, [on_time, {D4: LATE}])  # the late links move stored events: a MERGE
    arrived = set(seen)
    assert {("raw_events", "true", "false"), ("rejected_events", "true", "false")} <= arrived
    assert {("events", "true", "true"), ("sessions", "false", "true")} <= arrived
    assert wh.read(REJECTED_EVENTS).count() == len(rejected)
    before = len(seen)
    with running(root) as runner:
        runner.repair(D1, D4, {"events", "sessions"})
    assert {(table, hints_off) for table, _, hints_off in seen[before:]} >= {("events", "true"), ("sessions", "true")}
    assert [wh.spark.conf.get(key, "false") for key in session] == ["false", "false"]
    assert_tables_match_oracle(wh, root)
