"""The Dagster objects of one instance of the graph, built from its settings: ``build``.

Nothing here is global: the calendar, the resources, the asset keys and every name come from the settings and the
key prefix given (``names.py``), so two instances live side by side in one code location. Each part below is a
function ``(names, calendars) -> dg.Definitions``: a new job of an instance is its module and one more line in
``PARTS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg

from sessions_assets.graph import assets, checks, forget, ingest, jobs, maintenance, sensors
from sessions_assets.graph.names import Names
from sessions_assets.graph.partitions import calendars as calendars_of
from sessions_assets.graph.resources import checked, resources
from sessions_assets.settings import Settings
from sessions_assets.warehouse.storage import as_uri

PARTS = (
    ingest.definitions,
    assets.definitions,
    checks.definitions,
    jobs.definitions,
    maintenance.definitions,
    sensors.definitions,
    forget.definitions,
)


def build(
    settings: Settings,
    key_prefix: str = "",
    spark_remote: str | dg.EnvVar | None = None,
    spark_conf: Mapping[str, Any] | None = None,
) -> dg.Definitions:
    """The definitions of one instance: its partitions from ``settings.start_date`` and ``time_zone``, its resources under keys of
    its own, its assets, checks, jobs, schedules and sensors named by ``key_prefix``. ``spark_remote``: the Spark
    Connect server its runs attach to ("" for a driver of their own; default ``SPARK_REMOTE``); ``spark_conf``:
    Spark settings over the ``SPARK_*`` variables. ``SettingsError`` when what the settings point at is not
    usable (a rule table)."""
    names = names_of(checked(settings), key_prefix)
    calendars = calendars_of(settings)
    parts = [part(names, calendars) for part in PARTS]
    # One process and one Spark session per run: the steps of a run share it.
    own = dg.Definitions(
        resources=resources(settings, names, spark_remote, spark_conf), executor=dg.in_process_executor
    )
    return dg.Definitions.merge(*parts, own)


def names_of(settings: Settings, key_prefix: str = "") -> Names:
    """The names of the instance of ``settings`` with ``key_prefix``."""
    return Names(key_prefix, as_uri(settings.data_root))
