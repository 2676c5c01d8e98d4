"""The Spark + Delta runtime, as a Dagster resource.

The session is created lazily, on first use inside a run (never at import), by ``dagster-pyspark``'s
``LazyPySparkResource``; every setting that matters for correctness (UTC, Delta) is fixed here, while
the master and sizing come from the environment so the same code runs on a cluster.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dagster_pyspark import LazyPySparkResource
from delta import configure_spark_with_delta_pip
from pyspark.sql import SparkSession


def delta_packages() -> str:
    """The Maven coordinate of the Delta jar matching the installed ``delta-spark`` and ``pyspark``."""
    builder = configure_spark_with_delta_pip(SparkSession.Builder())
    return builder._options["spark.jars.packages"]  # computed by delta-spark, read back here


def spark_config(
    master: str | None = None, shuffle_partitions: int | None = None, ui: bool | None = None
) -> dict[str, Any]:
    """Spark configuration for the pipeline; arguments override ``SPARK_MASTER`` etc. from the environment."""
    master = master or os.environ.get("SPARK_MASTER", "local[2]")
    codegen = os.environ.get("SPARK_CODEGEN", "false").lower() == "true"
    shuffle_partitions = shuffle_partitions or int(os.environ.get("SPARK_SHUFFLE_PARTITIONS", "4"))
    ui = ui if ui is not None else os.environ.get("SPARK_UI", "false").lower() == "true"
    config: dict[str, Any] = {
        "spark.master": master,
        "spark.app.name": "sessions-assets",
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # Partition keys are UTC days and the contract reads offset-less timestamps as UTC.
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.default.parallelism": str(shuffle_partitions),
        # Delta rebuilds its snapshot state with this many tasks (default 50): too many for small tables.
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.databricks.delta.schema.autoMerge.enabled": "false",
        "spark.ui.enabled": str(ui).lower(),
        "spark.ui.showConsoleProgress": "false",
        "spark.log.level": os.environ.get("SPARK_LOG_LEVEL", "ERROR"),
        "spark.driver.memory": os.environ.get("SPARK_DRIVER_MEMORY", "4g"),
        "spark.sql.sources.partitionOverwriteMode": "static",
        # An incremental step is many small queries over few rows: compiling each new plan to Java (Janino)
        # costs more than interpreting it. Measured: one H = 180 benchmark day 56 s -> 41 s, a 3-day CLI
        # run 218 s -> 167 s. Turn it back on (SPARK_CODEGEN=true) for days of millions of rows.
        **_codegen(codegen),
    }
    jars = os.environ.get("SPARK_JARS")  # pre-fetched jars (e.g. `mvn dependency:copy`), if resolution fails
    if jars:
        config["spark.jars"] = jars
    else:
        config["spark.jars.packages"] = delta_packages()
    return config


def _codegen(on: bool) -> dict[str, str]:
    return {
        "spark.sql.codegen.wholeStage": str(on).lower(),
        "spark.sql.codegen.factoryMode": "FALLBACK" if on else "NO_CODEGEN",
    }


@contextmanager
def compiled(spark: SparkSession, when: bool = True) -> Iterator[None]:
    """Compile the block's queries to Java (if ``when``): for the rare query that scans millions of rows.

    The session interprets by default (above), which suits the many small queries of a step; a query over
    a whole history's rows pays its compile time back many times (the ``events`` MERGE at 100,000 events a
    day over 180 days: matching 15.5 M stored rows 5.7 s interpreted, 2.1 s compiled).
    """
    if not when:
        yield
        return
    before = {key: spark.conf.get(key) for key in _codegen(True)}
    for key, value in _codegen(True).items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            spark.conf.set(key, value)


def spark_resource(**overrides: Any) -> LazyPySparkResource:
    return LazyPySparkResource(spark_config=spark_config(**overrides))
