"""The pipeline on a real standalone Spark cluster (``SPARK_MASTER=spark://...``), as a deployment runs it there.

The driver is a Spark Connect server started with the cluster's settings, and the CLI's runs attach to it; the tasks
run in executors the master starts on two workers, which load Delta's jars from the driver (``spark.jars``) and
start Python workers with this interpreter. A run with a driver of its own differs only in where the driver lives
(``slow/test_cli.py`` runs one, locally). Two received days first, then a third whose late events reach back into
theirs; then every table equals the oracle's full recompute and a third run finds nothing to do.
"""

from __future__ import annotations

import shutil
import sys

import pytest

from sessions_assets.cli.server import Server
from sessions_assets.warehouse.delta import Warehouse
from sessions_assets.warehouse.spark import TOKEN_VARIABLE
from sessions_assets.warehouse.storage import Storage
from sessions_assets.warehouse.tables import PARTITION_MAP
from sessions_assets_tests.helpers.deployed import free_port
from sessions_assets_tests.helpers.expected import assert_tables_match_oracle
from sessions_assets_tests.slow.commands import cli

pytestmark = pytest.mark.slow


def test_the_pipeline_on_a_standalone_cluster_builds_exact_tables(spark_cluster, spark, tmp_path, monkeypatch):
    staging, data_root = tmp_path / "staging", tmp_path / "data"
    cli("generate", "--data-root", str(staging), "--days", "3", "--users", "8", "--seed", "3", cwd=tmp_path, env={})
    (data_root / "landing").mkdir(parents=True)
    on_the_cluster = {
        "SPARK_MASTER": spark_cluster.url,
        "SPARK_DRIVER_MEMORY": "1g",
        "SPARK_CONF": "spark.executor.memory=512m",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }
    for name, value in on_the_cluster.items():  # the server's settings; the runs only attach to it
        monkeypatch.setenv(name, value)
    server = Server(tmp_path / "spark-server")
    server.start(port=free_port())
    env = {
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
        "TZ": "UTC",
        "SPARK_REMOTE": server.running()["url"],
        TOKEN_VARIABLE: server.token(),
    }
    try:
        _runs(staging, data_root, tmp_path, env)
    finally:
        server.stop()

    # The executors did the work: the server was an application of the master, with an executor on each worker
    # that ran tasks.
    state = spark_cluster.state()
    assert not state["activeapps"], state["activeapps"]
    apps = [a for a in state["completedapps"] if a["name"] == "sessions-assets Spark Connect server"]
    assert len(apps) == 1, state["completedapps"]
    executors = spark_cluster.executor_dirs()
    assert {d.parents[1] for d in executors} == set(spark_cluster.work_dirs), executors
    ran_tasks = [d for d in executors if "Finished task" in (d / "stderr").read_text(errors="replace")]
    assert {d.parents[1] for d in ran_tasks} == set(spark_cluster.work_dirs), "an idle worker"

    warehouse = Warehouse(spark, Storage(str(data_root)))
    last_day = max(f.name for f in (data_root / "landing").iterdir()).split("=")[1]
    late = warehouse.read(PARTITION_MAP).where(f"received_date = '{last_day}' AND event_date < '{last_day}'")
    assert late.count() > 0, "the last received day brought no late events"
    assert_tables_match_oracle(warehouse, data_root)


def _runs(staging, data_root, tmp_path, env) -> None:
    """Two received days, then a third; then nothing is left to do."""
    folders = sorted((staging / "landing").iterdir())
    for batch in (folders[:2], folders[2:]):
        for folder in batch:
            shutil.move(folder, data_root / "landing" / folder.name)
        assert "- refresh:" in cli("run", "--data-root", str(data_root), cwd=tmp_path, env=env)
    assert "Nothing to do" in cli("run", "--data-root", str(data_root), cwd=tmp_path, env=env)
