"""The registry of refresh steps is the one list: the asset graph, the ledger's follow order and ``repair``'s help are
read from it, and its order is one a refresh can run in. No Spark: only the definitions are built."""

from __future__ import annotations

import dagster as dg

from sessions_assets.cli.main import main
from sessions_assets.graph import build
from sessions_assets.graph.names import INGESTED
from sessions_assets.settings import Settings
from sessions_assets.warehouse.refresh.steps import FOLLOWS, STEPS
from sessions_assets.warehouse.tables import ALL

# What a day of each derived table reads of its inputs, as the UI's lineage shows it.
LINEAGE = {
    "events": {"raw_events": "AllPartitionMapping", "partition_map": "AllPartitionMapping"},
    "sessions": {"events": "TimeWindowPartitionMapping(-1, 1)"},
    "users": {"sessions": "TimeWindowPartitionMapping(0, 0)", "events": "TimeWindowPartitionMapping(0, 0)"},
    "daily_snapshot": {"sessions": "TimeWindowPartitionMapping(0, 0)"},
}


def _mapping(mapping) -> str:
    if isinstance(mapping, dg.TimeWindowPartitionMapping):
        return f"TimeWindowPartitionMapping({mapping.start_offset}, {mapping.end_offset})"
    return type(mapping).__name__


def test_the_asset_graph_is_the_registrys_steps_with_their_inputs(tmp_path):
    graph = build(Settings(data_root=str(tmp_path))).resolve_asset_graph()
    derived = {k.to_user_string() for k in graph.get_all_asset_keys()} - set(INGESTED)
    assert derived == {step.name for step in STEPS}
    lineage = {
        name: {p.to_user_string(): _mapping(graph.get_partition_mapping(key, p)) for p in graph.get(key).parent_keys}
        for name in derived
        for key in [dg.AssetKey(name)]
    }
    assert lineage == LINEAGE
    assert {s.name: graph.get(dg.AssetKey(s.name)).description for s in STEPS} == {s.name: s.description for s in STEPS}


def test_every_table_a_step_absorbs_is_brought_up_to_date_before_it_is_read():
    """In ``FOLLOWS`` order, a table's input is a landing table, or a table already refreshed by then."""
    names = {t.name for t in ALL}
    refreshed: set[str] = set()
    for table, source in FOLLOWS:
        assert {table.name, source.name} <= names
        assert source.name in refreshed or not any(source is t for t, _ in FOLLOWS), (table.name, source.name)
        refreshed.add(table.name)
    kept = {t.name for step in STEPS for t, _ in step.kept}
    assert kept == {"identities", "lifecycle"}
    assert {t.name for t, _ in FOLLOWS} == {step.name for step in STEPS} | kept


def test_repair_help_says_what_each_table_recomputes(capsys):
    try:
        main(["repair", "--help"])
    except SystemExit:
        pass
    said = " ".join(capsys.readouterr().out.split())
    for part in ("events: those days", "sessions: those days", "users: every row", "daily_snapshot: every row"):
        assert part in said, said
