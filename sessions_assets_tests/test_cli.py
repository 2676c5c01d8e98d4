"""End to end: ``sessions-assets generate`` then ``sessions-assets run``, compared with a full recompute."""

from __future__ import annotations

import deltalake

from sessions_assets.cli import main
from sessions_assets.definitions import build_resources
from sessions_assets.tables import (
    DAILY_SNAPSHOT,
    EVENTS,
    PARTITION_MAP,
    RAW_EVENTS,
    REJECTED_EVENTS,
    SESSIONS,
    Warehouse,
)
from sessions_assets_tests.compare import assert_tables_match_oracle


def test_run_processes_a_generated_landing_zone_exactly_once(tmp_path, spark, monkeypatch, capsys):
    root = tmp_path / "data"
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    (tmp_path / "dagster_home").mkdir()
    assert main(["generate", "--data-root", str(root), "--days", "3", "--users", "12", "--seed", "3"]) == 0
    assert main(["run", "--data-root", str(root)]) == 0
    printed = capsys.readouterr().out
    assert printed.count("touched event days") == 3

    wh = Warehouse(spark, build_resources(data_root=str(root))["settings"])
    assert_tables_match_oracle(wh, root)
    assert_readable_by_delta_rs(wh)

    versions = {t.name: wh.version(t) for t in (RAW_EVENTS, EVENTS, SESSIONS, DAILY_SNAPSHOT)}
    assert main(["run", "--data-root", str(root)]) == 0
    assert "Nothing to do" in capsys.readouterr().out
    assert {t.name: wh.version(t) for t in (RAW_EVENTS, EVENTS, SESSIONS, DAILY_SNAPSHOT)} == versions


def assert_readable_by_delta_rs(wh: Warehouse) -> None:
    """The contract promises any Delta reader: a table feature that delta-rs's Arrow reader lacks (deletion
    vectors, for one) would break an analyst's ``DeltaTable(path).to_pandas()``."""
    for table in (RAW_EVENTS, REJECTED_EVENTS, PARTITION_MAP, EVENTS, SESSIONS, DAILY_SNAPSHOT):
        arrow = deltalake.DeltaTable(wh.path(table)).to_pyarrow_table()
        assert arrow.num_rows == wh.read(table).count() > 0, table.name
        assert set(table.schema.fieldNames()) <= set(arrow.column_names), table.name
    sessions = deltalake.DeltaTable(wh.path(SESSIONS)).to_pyarrow_table(columns=["session_id", "num_events"])
    assert dict(zip(*sessions.to_pydict().values())) == {
        r.session_id: r.num_events for r in wh.read(SESSIONS).select("session_id", "num_events").collect()
    }
