"""The pipeline on object storage: the data root is ``s3a://bucket/<layout>`` on an S3-compatible server.

The landing zone is uploaded with s3fs, in either layout (``received_date=`` folders, or Segment's S3
destination: ``segment-logs/<source>/<day in ms>/``); ``sessions-assets run`` lists it through fsspec (s3fs) and
reads and writes through Spark's s3a connector (``hadoop-aws``), on a driver of its own. Two received days
first, then a third whose late events reach back into theirs. The warehouse, copied back as it is on the
store, must then equal the oracle's full recompute of the landing zone, and a third run finds nothing to do.

Marked ``s3``: it needs Maven Central (S3Proxy's jar, ``hadoop-aws`` and the AWS SDK bundle, ~700 MB on first
use) and the ``s3`` extra (``pip install -e ".[s3]"``).
"""

from __future__ import annotations

from pathlib import Path

import fsspec
import pytest

from sessions_assets.warehouse.delta import Warehouse
from sessions_assets.warehouse.storage import Storage
from sessions_assets.warehouse.tables import PARTITION_MAP
from sessions_assets_tests.helpers.expected import assert_tables_match_oracle
from sessions_assets_tests.slow.commands import cli

pytestmark = [pytest.mark.slow, pytest.mark.s3]


def _cli(*args: str, cwd: Path, env: dict[str, str]) -> str:
    return cli(*args, cwd=cwd, env=env, timeout=900)  # uploads and S3 round trips


@pytest.mark.parametrize("layout", ["received_date", "segment"])
def test_the_pipeline_on_s3_builds_exact_tables(layout, s3_server, spark, tmp_path, monkeypatch):
    staging = tmp_path / "staging"
    generate = ("generate", "--data-root", str(staging), "--days", "3", "--users", "8", "--seed", "11")
    _cli(*generate, "--layout", layout, cwd=tmp_path, env={})
    root = f"{s3_server.bucket}/{layout}"  # the bucket is the module's: a data root per layout
    data_root = f"s3a://{root}"
    fs = s3_server.filesystem()
    env = {**s3_server.env(), "DAGSTER_HOME": str(tmp_path / "dagster_home"), "SPARK_DRIVER_MEMORY": "2g", "TZ": "UTC"}
    env["SPARK_REMOTE"] = ""  # a driver of their own, with hadoop-aws: the tests' server was started without it

    folders = Storage(str(staging)).landing_folders()  # a received day's folder, or each source's of a day
    days = sorted({f.day for f in folders})
    for batch in (days[:2], days[2:]):
        for folder in (f for f in folders if f.day in batch):
            local = Path(folder.uri.removeprefix("file:"))
            fs.put(str(local), f"{root}/landing/{local.relative_to(staging / 'landing')}", recursive=True)
        assert "- refresh:" in _cli("run", "--data-root", data_root, cwd=tmp_path, env=env)
    assert "Nothing to do" in _cli("run", "--data-root", data_root, cwd=tmp_path, env=env)
    assert "received days to ingest: none" in _cli("status", "--data-root", data_root, cwd=tmp_path, env=env)

    # The tables are on the store; they are read from a copy of it here.
    tables = {p.rsplit("/", 1)[-1] for p in fs.ls(f"{root}/warehouse")}
    assert {"raw_events", "rejected_events", "partition_map", "events", "sessions", "daily_snapshot"} <= tables
    copy = tmp_path / "copy"
    fs.get(f"{root}/warehouse", str(copy / "warehouse"), recursive=True)
    warehouse = Warehouse(spark, Storage(str(copy)))
    last_day = days[-1].isoformat()
    late = warehouse.read(PARTITION_MAP).where(f"received_date = '{last_day}' AND event_date < '{last_day}'")
    assert late.count() > 0, "the last received day brought no late events"
    # The landing folders' fingerprints as the store lists them: fsspec took its settings from the environment
    # when it was imported, so the endpoint goes into its configuration.
    for name, value in s3_server.env().items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": s3_server.endpoint})
    assert_tables_match_oracle(warehouse, staging, landing=Storage(data_root))
