"""Each corrected user's session days for the snapshot's walk, without reading ``sessions``' history.

A user is ``new`` or ``active`` on a day exactly when they have a session that day, so ``user_states``
already holds every user's session days up to the snapshot's last day, as of the ``sessions`` version the
stays were last made exact against: the stays' *watermark*, kept in each ``user_states`` rewrite's commit
note. Since then only the (user, day) pairs that ``sessions``' change feed names can differ. A pair with a
row still standing has a session; a pair whose rows were all deleted (a session merged into one starting
the day before) may still hold another session of that user, so its day is looked up. At a long history
this replaces reading every session of the corrected users' window with reading one run's changes.

The watermark only moves when every change up to the new version has reached the stays: the users the
feed names are corrected along with the ledger's, from their first changed day. A run that cannot read
the feed (no watermark yet, or the feed's files gone) reads the sessions as before and writes no
watermark, unless it walked every user from the start of history.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date

from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sessions_assets.tables import SESSIONS, Warehouse

WATERMARK = "sessions_version"
PAIR = ["user_key", "session_date"]


def note(version: int | None) -> str | None:
    """A ``user_states`` commit note: its stays are exact for ``sessions`` up to ``version``."""
    return None if version is None else json.dumps({WATERMARK: version})


def watermark(commit_note: str | None) -> int | None:
    try:
        return int(json.loads(commit_note)[WATERMARK])
    except (TypeError, ValueError, KeyError):
        return None


@dataclass
class SessionFeed:
    """``sessions`` pinned at ``version``, and what changed in it since the stays' watermark."""

    version: int
    changed: DataFrame | None = None  # (user_key, session_date, present) of every pair changed; None: unknown
    first_changed: date | None = None

    @property
    def known(self) -> bool:
        return self.changed is not None

    @classmethod
    def since(cls, wh: Warehouse, mark: int | None) -> SessionFeed:
        version = wh.version(SESSIONS)
        if mark is None or mark > version:
            return cls(version)
        if mark == version:
            return cls(version, wh.spark.createDataFrame([], "user_key string, session_date date, present boolean"))
        try:
            changed = cls._pairs(wh, mark + 1, version)
            days = changed.groupBy("session_date").agg(F.min("present").alias("all_present")).collect()
        except (PySparkException, Py4JJavaError):  # the feed was not on then, or its files are gone
            return cls(version)
        unsure = sorted(r.session_date for r in days if not r.all_present)
        if unsure:
            standing = (
                wh.read_at(SESSIONS, version).where(F.col("session_date").isin(unsure))
                .join(F.broadcast(changed.where(~F.col("present")).select(*PAIR)), PAIR, "left_semi")
                .select(*PAIR).distinct().withColumn("_standing", F.lit(True))
            )  # fmt: skip
            changed = changed.join(standing, PAIR, "left").select(
                *PAIR, (F.col("present") | F.coalesce("_standing", F.lit(False))).alias("present")
            ).localCheckpoint()  # fmt: skip
        return cls(version, changed, min((r.session_date for r in days), default=None))

    @staticmethod
    def _pairs(wh: Warehouse, first: int, last: int) -> DataFrame:
        """(user, day) pairs with a change in versions ``first..last``. ``present``: a row of the pair stands at
        ``last``; false only says its changed rows do not (``since`` looks for others)."""
        changes = wh.changes(SESSIONS, first, last).where(F.col("_change_type") != "update_preimage")
        latest = changes.groupBy("session_id", *PAIR).agg(F.max_by("_change_type", "_commit_version").alias("_last"))
        standing = F.max(F.col("_last").isin("insert", "update_postimage"))
        return latest.groupBy(*PAIR).agg(standing.alias("present")).localCheckpoint()

    def users(self) -> DataFrame:
        """The users the feed names, each from their first changed day (``user_key``, ``first``)."""
        return self.changed.groupBy("user_key").agg(F.min("session_date").alias("first"))

    def sessions(self, wh: Warehouse, first: date | None = None, last: date | None = None) -> DataFrame:
        """``sessions`` at the pinned version, days ``first..last``."""
        return wh.read_at(SESSIONS, self.version, first, last)

    def session_days(self, stays: DataFrame, starts: DataFrame, built_to: date) -> DataFrame:
        """Each ``starts`` user's session days from their ``first`` to ``built_to`` (``user_key``, ``session_date``).

        ``stays``: their stays reaching ``first - 1`` (so every stay from ``first`` on), at the watermark.
        """
        until = F.least(F.coalesce("valid_to", F.lit(built_to)), F.lit(built_to))
        span = F.sequence(F.greatest("valid_from", "first"), until)
        held = (
            stays.where(F.col("state").isin("new", "active") & (F.greatest("valid_from", "first") <= until))
            .select("user_key", F.explode(span).alias("session_date"))
        )  # fmt: skip
        changed = self.changed.where(F.col("session_date") <= F.lit(built_to)).join(F.broadcast(starts), "user_key")
        changed = changed.where(F.col("session_date") >= F.col("first"))
        kept = held.join(changed.select(*PAIR), PAIR, "left_anti")
        return kept.unionByName(changed.where("present").select(*PAIR))
