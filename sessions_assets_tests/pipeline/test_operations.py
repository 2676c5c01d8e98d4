"""What an operator does to a running warehouse: the weekly compaction, and a repair after changing a
lifecycle setting. Neither may lose a row or the tables' place in their input."""

from __future__ import annotations

import pytest

from sessions_assets.settings import Settings
from sessions_assets.warehouse import pending
from sessions_assets.warehouse.storage import Storage
from sessions_assets.warehouse.tables import ALL, EVENTS, SESSIONS
from sessions_assets_tests.helpers import reference
from sessions_assets_tests.helpers.arrivals import running
from sessions_assets_tests.helpers.expected import assert_tables_match_oracle
from sessions_assets_tests.helpers.landing import landing_lines, write_day
from sessions_assets_tests.helpers.late_days import D1, D4, LATE, ON_TIME

pytestmark = pytest.mark.scenario


@pytest.fixture(scope="module")
def operated(spark, tmp_path_factory):
    """The on-time days processed one at a time (several small files a month), and the instance."""
    root = tmp_path_factory.mktemp("operated") / "data"
    with running(root) as runner:
        for day, lines in ON_TIME.items():
            write_day(root, day, lines)
            runner.process()
        yield runner, root


def _warehouse(runner):
    resources = runner.resources
    return resources["pipeline"].warehouse(resources["spark"])


def _files(wh, table) -> int:
    return wh.spark.sql(f"DESCRIBE DETAIL delta.`{wh.uri(table)}`").first().numFiles


def test_compaction_keeps_every_row_and_the_next_late_day_refreshes_from_there(operated):
    runner, root = operated
    wh = _warehouse(runner)
    before = {t.name: sorted(map(tuple, wh.read(t).collect())) for t in ALL}
    files = {t.name: _files(wh, t) for t in (EVENTS, SESSIONS)}

    runner.maintain()

    assert pending.backlog(Storage(str(root)), runner.bounds()) is None  # compaction and vacuum change no row
    assert {t.name: sorted(map(tuple, wh.read(t).collect())) for t in ALL} == before
    assert all(_files(wh, t) < files[t.name] for t in (EVENTS, SESSIONS)), files
    write_day(root, D4, LATE)
    _, refresh = runner.process()
    assert refresh.metadata["sessions"]["refresh"] == "incremental"
    assert_tables_match_oracle(wh, root)


def test_a_snapshot_repair_recounts_every_day_with_new_lifecycle_settings(operated):
    from sessions_assets.cli.runner import Runner

    runner, root = operated
    stricter = Settings(data_root=str(root), lapsing_days=1, dormant_days=2)
    Runner(runner.instance, stricter).repair(D1, D4, {"daily_snapshot"})

    oracle = reference.recompute(landing_lines(root), reference.Settings(lapsing_days=1, dormant_days=2))
    assert_tables_match_oracle(_warehouse(runner), root, oracle)
