"""End to end: ``sessions-assets generate`` then ``sessions-assets run``, compared with a full recompute."""

from __future__ import annotations

from sessions_assets.cli import main
from sessions_assets.definitions import build_resources
from sessions_assets.tables import DAILY_SNAPSHOT, EVENTS, RAW_EVENTS, SESSIONS, Warehouse
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

    versions = {t.name: wh.version(t) for t in (RAW_EVENTS, EVENTS, SESSIONS, DAILY_SNAPSHOT)}
    assert main(["run", "--data-root", str(root)]) == 0
    assert "Nothing to do" in capsys.readouterr().out
    assert {t.name: wh.version(t) for t in (RAW_EVENTS, EVENTS, SESSIONS, DAILY_SNAPSHOT)} == versions
