"""The identity lookups read the internal ``identities`` table, not every event: it stays exact when a link
arrives months late, when a run dies between the events' commit and its own, and when it is lost."""

from __future__ import annotations

import shutil
from dataclasses import replace
from datetime import date

import pytest

from sessions_assets.graph import planning
from sessions_assets.warehouse import ledger
from sessions_assets.warehouse.refresh import identities
from sessions_assets.warehouse.tables import EVENTS, IDENTITIES
from sessions_assets_tests.helpers.arrivals import arrive_in_steps, running
from sessions_assets_tests.helpers.expected import assert_tables_match_oracle
from sessions_assets_tests.helpers.landing import segment, write_day

pytestmark = pytest.mark.scenario

JAN, MAY, JUN = date(2024, 1, 10), date(2024, 5, 2), date(2024, 6, 1)


def browse(message_id: str, device: str, at: str) -> str:
    return segment(message_id, None, at, kind="page", anonymousId=device, path="/")


def login(message_id: str, user: str, device: str, at: str, received: str | None = None) -> str:
    return segment(message_id, user, at, received, kind="identify", anonymousId=device)


WINTER = {JAN: [browse("w1", "dev-kim", "2024-01-10 10:00"), browse("w2", "dev-kim", "2024-01-10 10:20")]}
SPRING = {MAY: [browse("s1", "dev-kim", "2024-05-02 18:00"), login("s2", "lee", "dev-lee", "2024-05-02 18:30")]}
# kim's login on January 10th, received in June: both devices' past moves to kim, five months back.
LATE_LINK = {JUN: [login("late", "kim", "dev-kim", "2024-01-10 10:25", "2024-06-01 08:00")]}


def test_a_link_months_late_moves_a_devices_events_of_every_day_to_the_person(spark, tmp_path):
    root = tmp_path / "data"
    wh = arrive_in_steps(spark, root, [WINTER, SPRING, LATE_LINK])
    assert_tables_match_oracle(wh, root)
    persons = {r.user_key for r in wh.read(IDENTITIES).where("anonymous_id = 'dev-kim'").collect()}
    assert persons == {"kim"}  # the device's anonymous events, and the link, under kim


def killed_between_the_two_commits(runner, root, monkeypatch) -> None:
    """The late link lands and its run dies after the events' commit, before identities' own."""
    catch_up = identities.catch_up

    def dies_after_the_events_commit(wh, rebuild=False):
        if ledger.position(wh, IDENTITIES, EVENTS).current:  # before the step reads: caught up
            return catch_up(wh, rebuild)
        raise RuntimeError("killed")

    for day, lines in LATE_LINK.items():
        write_day(root, day, lines)
    with monkeypatch.context() as dying:
        dying.setattr(identities, "catch_up", dies_after_the_events_commit)
        with pytest.raises(Exception, match="killed"):
            runner.defs.resolve_job_def("process_job").execute_in_process(
                instance=runner.instance,
                resources=runner.resources,
                partition_key=JUN.isoformat(),
                tags=planning.ingest_tags(JUN, JUN),
            )


def test_a_run_killed_between_the_events_commit_and_its_own_is_caught_up_by_the_next(spark, tmp_path, monkeypatch):
    root = tmp_path / "data"
    arrive_in_steps(spark, root, [WINTER, SPRING])
    with running(root) as runner:
        killed_between_the_two_commits(runner, root, monkeypatch)
        runner.process()
    assert_tables_match_oracle(warehouse_of(spark, root), root)


def test_two_runs_catching_up_from_the_same_position_count_each_event_once(spark, tmp_path, monkeypatch):
    """Two ``sessions-assets run`` at once, outside the run queue: both read where ``identities`` stood, both add
    the same events; Delta sees no conflict when one run's rows were all new."""
    root = tmp_path / "data"
    arrive_in_steps(spark, root, [WINTER, SPRING])
    with running(root) as runner:
        killed_between_the_two_commits(runner, root, monkeypatch)
        wh = warehouse_of(spark, root)
        stale = ledger.position(wh, IDENTITIES, EVENTS)
        identities.catch_up(wh)  # one run
        wh.compact(EVENTS)  # a version more, with no row changed: the other's absorbs up to it
        with monkeypatch.context() as other:  # the other, which read the position before the first committed
            other.setattr(ledger, "position", lambda *_: replace(stale, latest=wh.version(EVENTS)))
            identities.catch_up(wh)
        runner.process()
    assert_tables_match_oracle(wh, root)


def test_a_lost_identities_table_is_rebuilt_whole_by_the_next_refresh(spark, tmp_path):
    root = tmp_path / "data"
    arrive_in_steps(spark, root, [WINTER, SPRING])
    shutil.rmtree(root / "warehouse" / IDENTITIES.name)
    assert_tables_match_oracle(arrive_in_steps(spark, root, [LATE_LINK]), root)


def warehouse_of(spark, root):
    from sessions_assets.warehouse.delta import Warehouse
    from sessions_assets.warehouse.storage import Storage

    return Warehouse(spark, Storage(str(root)))
