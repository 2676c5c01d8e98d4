"""The two resources every asset takes: Spark (with Delta) and the pipeline's settings.

The Spark session starts lazily, on first use inside a run, never at import. What matters for
correctness (UTC, Delta, strict JSON) is fixed here; the master, memory and extra configuration come from
the environment, so the same definitions run on ``local[2]`` and on a cluster.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from typing import Any

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from dagster_pyspark.resources import spark_session_from_config

from sessions_assets.settings import Settings
from sessions_assets.warehouse import jars
from sessions_assets.warehouse.delta import Warehouse
from sessions_assets.warehouse.storage import Storage

# Many small queries: the parallel collector pauses less often than the default G1 at this heap size.
DRIVER_JAVA_OPTIONS = "-XX:+UseParallelGC"


def spark_config(**overrides: Any) -> dict[str, str]:
    """The pipeline's Spark configuration: defaults, then ``SPARK_*`` variables, then ``overrides``.

    ``SPARK_MASTER`` (``local[2]``), ``SPARK_DRIVER_MEMORY`` (``3g``), ``SPARK_SHUFFLE_PARTITIONS`` (``2``),
    ``SPARK_JARS_DIR`` (where ``fetch-jars`` left Delta's jars and those of ``SPARK_PACKAGES``: ``jars.py``),
    ``SPARK_JARS`` (more local jars) and ``SPARK_CONF`` (``key=value`` pairs, space-separated).
    """
    env = os.environ.get
    shuffle = env("SPARK_SHUFFLE_PARTITIONS", "2")
    config = {
        "spark.master": env("SPARK_MASTER", "local[2]"),
        "spark.app.name": "sessions-assets",
        "spark.driver.memory": env("SPARK_DRIVER_MEMORY", "3g"),
        "spark.driver.extraJavaOptions": DRIVER_JAVA_OPTIONS,
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # Partition keys are UTC days, and the contract reads offset-less timestamps as UTC.
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": shuffle,
        "spark.default.parallelism": shuffle,
        # Small queries on two cores: one job per query and interpreted plans cost less than adaptive
        # re-planning and compiling each plan to Java.
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.codegen.wholeStage": "false",
        "spark.sql.codegen.factoryMode": "NO_CODEGEN",
        # Inferring constraints through unions of wide comparisons grows exponentially (the corrections of
        # a re-ingested day hung in it); no query here needs inferred filters.
        "spark.sql.constraintPropagation.enabled": "false",
        # Delta rebuilds a table's state with this many tasks (default 50): too many for small logs.
        "spark.databricks.delta.snapshotPartitions": "2",
        # Python's json keeps the last of duplicate keys; so does the parser, as the contract's oracle.
        "spark.sql.variant.allowDuplicateKeys": "true",
        "spark.ui.enabled": env("SPARK_UI", "false"),
        "spark.ui.showConsoleProgress": "false",
        "spark.log.level": env("SPARK_LOG_LEVEL", "ERROR"),
        # A write with nothing to change still commits, so a table's note and version always move with it.
        "spark.databricks.delta.skipRecordingEmptyCommits": "false",
        # Tables are addressed by path; the catalog's folder is kept out of the working directory.
        "spark.sql.warehouse.dir": os.path.join(tempfile.gettempdir(), "sessions-assets-spark-warehouse"),
        # More local jars; Delta's are added from disk when the session starts (``SparkResource``).
        "spark.jars": ",".join(shlex.split(env("SPARK_JARS", "").replace(",", " "))),
    }
    for pair in shlex.split(env("SPARK_CONF", "")):
        key, _, value = pair.partition("=")
        config[key] = value
    return {**config, **{k: str(v) for k, v in overrides.items()}}


class SparkResource(LazyPySparkResource):
    """Spark with Delta, started on first use inside a run, with the jars and the driver's class-data archive
    ``fetch-jars`` left on disk. They are looked up then, not when the definitions load: the sensors and the UI
    need no Spark, and a missing jar fails the run in one line (``jars.JarsMissing``) rather than the code
    location."""

    def _init_session(self) -> None:
        if self._spark_session is None:
            listed = [j for j in (self.spark_config.get("spark.jars") or "").split(",") if j]
            config = {**self.spark_config, "spark.jars": ",".join(jars.local_jars() + listed)}
            java = " ".join(filter(None, [config.get("spark.driver.extraJavaOptions"), jars.driver_java_options()]))
            config["spark.driver.extraJavaOptions"] = java
            self._spark_session = spark_session_from_config(config)


class PipelineResource(dg.ConfigurableResource, Settings):
    """The pipeline's settings (``settings.py``) as a resource: its config is those fields, so the UI shows the
    rules in force, and the engine is given the resource itself."""

    def warehouse(self, spark: LazyPySparkResource) -> Warehouse:
        return Warehouse(spark.spark_session, Storage(self.data_root))


# Read once, when the definitions load: the partitions' first day and the resource's defaults agree.
CONFIGURED = Settings.from_env()


def resources(settings: Settings | None = None, **spark_overrides: Any) -> dict:
    """The resources of a deployment (``SESSIONS_*`` and ``SPARK_*`` variables) or of a test (``settings``)."""
    settings = settings or CONFIGURED
    return {
        "spark": SparkResource(spark_config=spark_config(**spark_overrides)),
        "pipeline": PipelineResource(**settings.model_dump()),
    }


@dg.definitions
def defs() -> dg.Definitions:
    # One process and one Spark start per run: the steps of a run share the session.
    return dg.Definitions(resources=resources(), executor=dg.in_process_executor)
