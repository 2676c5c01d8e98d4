"""The two resources every step of an instance takes, under keys of the instance's own (``names.py``): Spark (with
Delta) and the pipeline's settings.

The Spark session starts lazily, on first use inside a run, never at import: a driver of the run's own, or, with
a ``remote`` URL, a session on a long-lived Spark Connect server (``warehouse/spark.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from typing import Any

import dagster as dg
from dagster_pyspark import LazyPySparkResource

from sessions_assets.engine import channels, days
from sessions_assets.graph.names import Names
from sessions_assets.settings import Settings, SettingsError
from sessions_assets.warehouse import spark
from sessions_assets.warehouse.delta import Warehouse
from sessions_assets.warehouse.storage import Storage


class SparkResource(LazyPySparkResource):
    """Spark with Delta, on first use inside a run: the process's own driver, or, when ``remote`` names a Spark
    Connect server, the process's session there."""

    remote: str = ""

    def _init_session(self) -> None:
        if self._spark_session is None:
            # Dagster resolves an ``EnvVar`` when a run binds the resource; a caller using it directly (a test, a
            # benchmark) holds the variable's name.
            remote = self.remote.get_value() if isinstance(self.remote, dg.EnvVar) else self.remote
            self._spark_session = spark.session(self.spark_config, remote or "")


class PipelineResource(dg.ConfigurableResource, Settings):
    """The pipeline's settings (``settings.py``) as a resource: its config is those fields, so the UI shows the
    rules in force, and the engine is given the resource itself."""

    def storage(self) -> Storage:
        return Storage.of(self)

    def warehouse(self, spark: LazyPySparkResource) -> Warehouse:
        """The tables, on the run's Spark session, once its JVM is known to give the days this process does."""
        session = spark.spark_session
        days.check_rules(session, self.time_zone, [self.first_day, date.today()])
        return Warehouse(session, self.storage())

    def rules(self) -> channels.Rules:
        """The channel rule table in force."""
        return channels.load(self.channel_rules)


def checked(settings: Settings) -> Settings:
    """``settings``, once what they point at can be used: the rule table applies. A table that cannot stops the
    definitions (or the command) in one line, ``SettingsError`` naming ``channel_rules``."""
    try:
        channels.load(settings.channel_rules)
    except channels.RulesError as error:
        raise SettingsError([("channel_rules", str(error), False)]) from None
    return settings


def resources(
    settings: Settings, names: Names, remote: str | dg.EnvVar | None = None, spark_conf: Mapping[str, Any] | None = None
) -> dict[str, dg.ConfigurableResource]:
    """An instance's resources, under its keys: ``settings``, and Spark from ``SPARK_*`` variables with
    ``spark_conf`` over them; ``remote`` the Spark Connect server its runs attach to ("" for a driver of their
    own; default: ``SPARK_REMOTE`` when it is set as the definitions load, passed as the variable, so the UI shows
    its name and never a URL's token)."""
    if remote is None:
        remote = dg.EnvVar("SPARK_REMOTE") if spark.remote() else ""
    elif not isinstance(remote, dg.EnvVar):  # config the UI shows: the run takes the token from its environment
        remote = spark.without_token(remote)
    return {
        names.spark: SparkResource(spark_config=spark.spark_config(**(spark_conf or {})), remote=remote),
        names.pipeline: PipelineResource(**settings.model_dump()),
    }


def spark_of(context, names: Names) -> LazyPySparkResource:
    """The instance's Spark resource, in a step or a sensor."""
    return getattr(context.resources, names.spark)


def pipeline_of(context, names: Names) -> PipelineResource:
    """The instance's settings resource, in a step or a sensor."""
    return getattr(context.resources, names.pipeline)
