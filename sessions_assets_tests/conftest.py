"""One local Spark session for the whole test run, and a fresh data root per test."""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from pathlib import Path

import pytest

os.environ["TZ"] = "UTC"  # Python-side datetimes from Spark are rendered in the process time zone
time.tzset()


@pytest.fixture(scope="session")
def spark():
    from dagster_pyspark import LazyPySparkResource

    from sessions_assets.resources import spark_config

    resource = LazyPySparkResource(spark_config=spark_config(master="local[2]", shuffle_partitions=2, ui=False))
    # pytest-xdist workers start together; on a fresh machine each would resolve Delta's jars into the same
    # Ivy cache at once, which Ivy does not guard. One start-up at a time; the rest find the jars cached.
    with open(Path(tempfile.gettempdir()) / "sessions-assets-spark-start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        session = resource.spark_session
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def data_root(tmp_path):
    return tmp_path / "data"


@pytest.fixture
def resources(spark, data_root):
    from sessions_assets.definitions import build_resources

    return build_resources(data_root=str(data_root), master="local[2]", shuffle_partitions=2, ui=False)


@pytest.fixture
def runner(resources):
    import dagster as dg

    from sessions_assets.runner import Runner

    with dg.instance_for_test() as instance:
        yield Runner(instance, resources)


@pytest.fixture
def warehouse(spark, resources):
    from sessions_assets.tables import Warehouse

    return Warehouse(spark, resources["settings"])
