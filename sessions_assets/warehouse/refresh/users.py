"""``users``: the rows of the persons whose sessions or events changed since the last step, recomputed.

A person's row is a function of its sessions and the ids its events carry (``identities``, which tallies them), so
the step notes the version of ``sessions`` and ``events`` it absorbed and recomputes every person either feed names. A person written while ``sessions`` lags behind
``events`` is written again when ``sessions`` catches up (its feed names the person then).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sessions_assets.engine.users import IDENTIFIED, users
from sessions_assets.warehouse import ledger
from sessions_assets.warehouse.delta import Commit, Warehouse, assign, insert
from sessions_assets.warehouse.refresh import identities
from sessions_assets.warehouse.refresh.outcome import Outcome
from sessions_assets.warehouse.tables import EVENTS, IDENTITIES, SESSIONS, USERS

REBUILD = "rebuild"  # a feed whose changes are unknown: the table is rebuilt whole


def refresh_users(wh: Warehouse, repair: bool = False) -> Outcome:
    """Recompute the persons the sessions and events changed since the last run touch (``repair``: all)."""
    identities.catch_up(wh)  # the ids each person's events carry, as of the events read below
    at = [ledger.position(wh, USERS, source) for source in (SESSIONS, EVENTS)]
    commit = Commit({ledger.ABSORBED: {p.source.name: p.latest for p in at}})
    feeds = [] if repair else [_feed(wh, p) for p in at]
    if repair or any(f is REBUILD for f in feeds):
        wh.overwrite(USERS, users(wh.read(SESSIONS, at[0].latest), wh.read(IDENTITIES)), commit)
        done = Outcome("repaired" if repair else "rebuilt whole", at[0].latest)
        done.counts["persons"] = wh.read(USERS).count()
        return done
    changed = [f.select("user_key") for f in feeds if f is not None]
    if not changed:
        return Outcome("up to date", at[0].latest)
    persons = changed[0] if len(changed) == 1 else changed[0].union(changed[1])
    done = Outcome("incremental", at[0].latest)
    done.counts.update(_write_persons(wh, persons.distinct().localCheckpoint(), [p.latest for p in at], commit))
    return done


def _feed(wh: Warehouse, at: ledger.Position) -> DataFrame | str | None:
    """The input's changes since the note (None: none), or ``REBUILD`` when they are unknown."""
    if at.absorbed is None:
        return REBUILD
    if at.current:
        return None
    feed = ledger.unabsorbed(wh, at)
    return REBUILD if feed is None else feed


def _write_persons(wh: Warehouse, persons: DataFrame, versions: list[int], commit: Commit) -> dict[str, int]:
    """The rows of ``persons`` recomputed, and those left with no session removed, in one ``MERGE``."""
    theirs = F.broadcast(persons)
    sessions = wh.read(SESSIONS, versions[0]).join(theirs, "user_key", "left_semi")
    ids = wh.read(IDENTITIES).select(*IDENTIFIED).join(theirs, "user_key", "left_semi")
    fresh = users(sessions, ids)
    rows = persons.join(fresh, "user_key", "left").withColumn("_gone", F.col("first_seen").isNull()).localCheckpoint()
    wh.merge(
        USERS,
        rows,
        "t.user_key = s.user_key",
        [
            "WHEN MATCHED AND s._gone THEN DELETE",
            f"WHEN MATCHED THEN UPDATE SET {assign(USERS.columns)}",
            f"WHEN NOT MATCHED AND NOT s._gone THEN INSERT {insert(USERS.columns)}",
        ],
        commit,
    )
    gone = rows.agg(F.sum(F.col("_gone").cast("int")), F.count(F.lit(1))).head()
    return {"persons_written": gone[1] - (gone[0] or 0), "persons_removed": gone[0] or 0}
