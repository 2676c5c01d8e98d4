"""The two resources every asset takes: Spark (with Delta) and the pipeline's settings.

The Spark session starts lazily, on first use inside a run, never at import: a driver of the run's own, or, with
``SPARK_REMOTE`` set, a session on a long-lived Spark Connect server (``warehouse/spark.py``).
"""

from __future__ import annotations

from typing import Any

import dagster as dg
from dagster_pyspark import LazyPySparkResource

from sessions_assets.settings import Settings
from sessions_assets.warehouse import spark
from sessions_assets.warehouse.delta import Warehouse


class SparkResource(LazyPySparkResource):
    """Spark with Delta, on first use inside a run: the process's own driver, or, when ``remote`` names a Spark
    Connect server, the process's session there. ``remote`` is config the UI shows, so it never holds the token:
    the run takes that from its environment (``warehouse/spark.py`` ``token_for``)."""

    remote: str = ""

    def _init_session(self) -> None:
        if self._spark_session is None:
            self._spark_session = spark.session(self.spark_config, self.remote)


class PipelineResource(dg.ConfigurableResource, Settings):
    """The pipeline's settings (``settings.py``) as a resource: its config is those fields, so the UI shows the
    rules in force, and the engine is given the resource itself."""

    def warehouse(self, spark: LazyPySparkResource) -> Warehouse:
        return Warehouse(spark.spark_session, self.storage())


# Read once, when the definitions load: the partitions' first day and the resource's defaults agree.
CONFIGURED = Settings.from_env()


def resources(settings: Settings | None = None, remote: str | None = None, **spark_overrides: Any) -> dict:
    """The resources of a deployment (``SESSIONS_*`` and ``SPARK_*`` variables) or of a test (``settings``, and
    ``remote``: the Spark Connect server to attach to, "" for a driver of its own; default ``SPARK_REMOTE``, without
    its token)."""
    settings = settings or CONFIGURED
    url = spark.without_token(spark.remote() if remote is None else remote)
    return {
        "spark": SparkResource(spark_config=spark.spark_config(**spark_overrides), remote=url),
        "pipeline": PipelineResource(**settings.model_dump()),
    }


@dg.definitions
def defs() -> dg.Definitions:
    # One process and one Spark session per run: the steps of a run share it.
    return dg.Definitions(resources=resources(), executor=dg.in_process_executor)
