"""What one instance of the graph calls its definitions, so that two instances in one code location never clash.

With no key prefix the names are the plain ones (``raw_events``, ``process_job``, ``spark``); with a prefix ``web``
asset keys are ``web/raw_events``, …, every job, sensor, schedule, check, group and resource key is
``web_<name>``, and the ops follow their asset keys (``web__events``). Each instance's refreshes carry a tag value of their own (its data root), so a run queue limits
them per instance (``tag_concurrency_limits`` with ``applyLimitPerUniqueValue``).
"""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

from sessions_assets.settings import KEY_PREFIX
from sessions_assets.warehouse.refresh import steps

# Jobs that rewrite the derived tables queue behind each other, one per value (dagster.yaml's
# tag_concurrency_limits): the instance's data root.
REFRESH_TAG = "sessions/refresh"
# The ingest assets (one multi-asset), and the derived assets in refresh order (the registry's: ``refresh/steps.py``).
INGESTED = ("raw_events", "rejected_events", "partition_map")
DERIVED = steps.NAMES


@dataclass(frozen=True)
class Names:
    """The names of one instance's definitions. ``prefix``: "" or a name (letters, digits, _); ``data_root``: the
    instance's data root as a URI, the value of its refresh tag."""

    prefix: str = ""
    data_root: str = ""

    def __post_init__(self):
        if self.prefix and not KEY_PREFIX.match(self.prefix):
            raise ValueError(f"key prefix {self.prefix!r} is not a name: a letter, then letters, digits or _")

    def of(self, name: str) -> str:
        """A job's, sensor's, schedule's, check's, op's or group's name."""
        return f"{self.prefix}_{name}" if self.prefix else name

    def key(self, asset: str) -> dg.AssetKey:
        return dg.AssetKey([self.prefix, asset] if self.prefix else [asset])

    def op(self, asset: str) -> str:
        """The op that materializes an asset (what a run's config names, e.g. ``{ops: {events: …}}``)."""
        return self.key(asset).to_python_identifier()

    @property
    def spark(self) -> str:
        """The key of the instance's Spark resource."""
        return self.of("spark")

    @property
    def pipeline(self) -> str:
        """The key of the instance's settings resource."""
        return self.of("pipeline")

    @property
    def takes_turns(self) -> dict[str, str]:
        """The tags of a job that rewrites the instance's tables: one such run at a time per instance."""
        return {REFRESH_TAG: self.data_root or "data"}

    @property
    def refreshing(self) -> set[str]:
        return {self.of("refresh_job"), self.of("process_job")}

    @property
    def forgetting(self) -> set[str]:
        return {self.of("forget_job")}
