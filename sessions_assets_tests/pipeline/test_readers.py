"""Every table reads the same outside Spark: delta-rs's query engine (``deltalake.QueryBuilder``, what the
docs/tables.md shows for pandas) returns Spark's rows, every column, also from ``sessions`` once late events have
left deletion vectors in it."""

from __future__ import annotations

import shutil
from collections import Counter
from datetime import datetime

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder
from pyspark.sql import Row

from sessions_assets.cli.generate import generate_landing_zone
from sessions_assets.warehouse.tables import ALL, SESSIONS

pytestmark = pytest.mark.scenario


def _plain(value, arrow: bool = False):
    """A value as both readers agree to spell it: naive UTC datetimes, tuples for arrays and structs (a Spark
    ``Row``, an Arrow dict), sorted pairs for maps (a Spark dict, an Arrow list of pairs)."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=None)
    if isinstance(value, Row) or (arrow and isinstance(value, dict)):
        return tuple(_plain(v, arrow) for v in (value.values() if isinstance(value, dict) else value))
    if isinstance(value, dict):
        return tuple(sorted((k, _plain(v)) for k, v in value.items()))
    if arrow and isinstance(value, list) and value and all(isinstance(v, tuple) for v in value):
        return tuple(sorted((k, _plain(v, arrow)) for k, v in value))
    if isinstance(value, list):
        return tuple(_plain(v, arrow) for v in value)
    return value


def test_every_table_reads_the_same_with_deltalake_as_with_spark(runner, data_root, tmp_path):
    staging = tmp_path / "staging"
    generate_landing_zone(str(staging), days=4, users=12, seed=11)
    folders = sorted((staging / "landing").iterdir())
    for batch in (folders[:2], folders[2:]):  # the later days' late events rewrite stored sessions
        for folder in batch:
            shutil.copytree(folder, data_root / "landing" / folder.name)
        runner.process()
    wh = runner.resources["pipeline"].warehouse(runner.resources["spark"])
    log = (data_root / "warehouse" / SESSIONS.name / "_delta_log").glob("*.json")
    assert any('"deletionVector":{' in commit.read_text() for commit in log), "no deletion vector to read past"

    for table in ALL:
        spark_rows = Counter(tuple(_plain(v) for v in row) for row in wh.read(table).collect())
        found = QueryBuilder().register("t", DeltaTable(str(data_root / "warehouse" / table.name)))
        columns = ", ".join(f'"{c}"' for c in table.columns)
        rows = pa.table(found.execute(f"SELECT {columns} FROM t").read_all()).to_pylist()
        assert Counter(tuple(_plain(r[c], arrow=True) for c in table.columns) for r in rows) == spark_rows, table.name
