"""Ids sent as JSON integers through the real pipeline: a person, a link, and lines stored before they were read,
which an erasure covers and ``reingest`` reads again."""

from __future__ import annotations

from datetime import date

import pytest
from pyspark.sql import functions as F

from sessions_assets.cli.main import main
from sessions_assets.warehouse import journal, ledger, pending
from sessions_assets.warehouse.delta import Warehouse
from sessions_assets.warehouse.storage import Storage
from sessions_assets.warehouse.tables import RAW_EVENTS, RECEIVED_DAYS, SESSIONS
from sessions_assets_tests.helpers.arrivals import running
from sessions_assets_tests.helpers.expected import assert_tables_match_oracle
from sessions_assets_tests.helpers.landing import segment, write_day

pytestmark = pytest.mark.scenario
DAY = date(2024, 3, 6)


def with_user(line: str, user_id) -> str:
    """A line whose last ``userId`` is ``user_id`` as written in JSON (a duplicate key: the last counts)."""
    return line[:-1] + f', "userId": {user_id}}}'


def session_days(wh: Warehouse, user: str) -> list[tuple[date, int]]:
    rows = wh.read(SESSIONS).where(F.col("user_key") == user).orderBy("session_start").collect()
    return [(r.session_date, r.num_events) for r in rows]


def test_an_integer_user_id_is_a_person_and_links_the_device_it_logs_in_on(spark, tmp_path):
    root = tmp_path / "data"
    browsing = segment("browse", None, "2024-03-06 09:00", anonymousId="dev")
    login = with_user(segment("login", None, "2024-03-06 09:10", anonymousId="dev"), 42)
    server = with_user(segment("server", None, "2024-03-06 09:20", anonymousId=None), 42)
    write_day(root, "2024-03-06", [browsing, login, server])
    with running(root) as runner:
        runner.process()
    wh = Warehouse(spark, Storage(str(root)))
    assert session_days(wh, "42") == [(date(2024, 3, 6), 3)]
    assert_tables_match_oracle(wh, root)


def test_forgetting_an_integer_user_id_covers_its_lines_stored_before_integers_were_read(spark, tmp_path, capsys):
    root = tmp_path / "data"
    login = with_user(segment("login", None, "2024-03-06 09:10", anonymousId="dev"), 42)
    shared = with_user(segment("shared", None, "2024-03-06 09:15", anonymousId="dev"), 43)  # another person, kept
    write_day(root, DAY, [segment("browse", None, "2024-03-06 09:00", anonymousId="dev"), login, shared])
    storage = Storage(str(root))
    wh = Warehouse(spark, storage)
    with running(root) as runner:
        runner.process()
        # As an ingest before integers were read stored them: no userId, keyed by the device, the day's zone unknown.
        for table, change in (
            (RAW_EVENTS, "user_id = NULL, user_key = anonymous_id"),
            (RECEIVED_DAYS, "time_zone = NULL"),
        ):
            spark.sql(
                f"UPDATE delta.`{wh.uri(table)}` SET {change} WHERE {'user_id IS NOT NULL' if table is RAW_EVENTS else 'TRUE'}"
            )
        runner.process()
        assert session_days(wh, "dev") == [(DAY, 3)] and ledger.to_reingest(storage, "UTC") == [DAY]
        assert main(["status", "--data-root", str(root)]) == 0
        said = "received days ingested before ids sent as JSON integers were read: 1 (2024-03-06..2024-03-06)"
        assert said in capsys.readouterr().out
        key = journal.key_for(wh, runner.resources["pipeline"])
        runner.forget(journal.user_hashes(key, ["42"]))
        assert wh.read(RAW_EVENTS).where("payload LIKE '%login%'").count() == 0
        assert wh.read(RAW_EVENTS).where("payload LIKE '%shared%'").count() == 1  # another userId's line stays
        runner.reingest(DAY)  # its lines read again: the line of 43 is that person's
        runner.refresh(pending.backlog(storage, runner.bounds()))
    assert ledger.to_reingest(storage, "UTC") == []
    assert_tables_match_oracle(wh, root, forgotten={"42"})
