"""Bring ``sessions`` up to date with ``events``, recomputing only the chains that new events touch.

The unit of recomputation is the chain (see ``sessionize``). A run starts from *seeds*, (user, event
day) pairs whose events changed: the rows of the loads ``events`` absorbed since ``sessions`` last ran
(``ledger.py``), or every user of a day that ``events`` rebuilt whole. Every chain of a seed user with an
event on a seed day is re-sessionized whole from ``events`` (the truth, never earlier session rows) and
merged into ``sessions`` wherever its sessions start, deleting the rows it supersedes in whatever
partition holds them. The result for those chains is therefore exact in any order of runs, and a run
that is repeated finds nothing to change.

Reads: the seed users' ``events`` on the seed days and their neighbours (more days only for chains that
come within one gap of the edge of what was read: continuous, bot-like activity), and their ``sessions``
rows on those days. Most late rows never become seeds: a user whose pending rows are all new is extended
from their stored sessions instead (``session_extend``), unless the 24 h cap must cut the joined chain.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from functools import reduce

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from sessions_assets import events as ev
from sessions_assets import ledger, session_extend
from sessions_assets.config import PipelineSettings
from sessions_assets.partitions import days_between
from sessions_assets.sessionize import _interval, assign_chains, sessions_from_chains
from sessions_assets.tables import EVENTS, PARTITION_MAP, SESSIONS, Warehouse, diff_rows

CONSUMER = "sessions"
SESSION_COLUMNS = SESSIONS.schema.fieldNames()
SEED_SCHEMA = "user_key string, event_date date"


@dataclass
class SessionChanges:
    """What one rebuild changed, for materialization metadata."""

    written: int = 0  # new or changed session rows
    merged_away: int = 0  # rows deleted because their events now belong to another session
    moved: int = 0  # rows superseded by a session that starts on another day
    capped: int = 0  # rows written that were ended by the 24 h cap
    users: int = 0  # users whose sessions were recomputed or extended
    extended: int = 0  # of which extended from their stored sessions, without reading their events
    committed: bool = False
    loads_absorbed: int = 0
    days_rebuilt_whole: tuple[date, ...] = ()
    days_written: tuple[date, ...] = ()
    days_compacted: tuple[date, ...] = ()


def _last_event_day(wh: Warehouse) -> date | None:
    return wh.read(PARTITION_MAP).agg(F.max("event_date")).head()[0]


def _days(df: DataFrame, column: str = "event_date") -> list[date]:
    return sorted(r[0] for r in df.select(column).distinct().collect())


def _midnight(day: str) -> F.Column:
    return F.col(day).cast("timestamp")  # the session time zone is UTC


def load_chains(wh: Warehouse, seeds: DataFrame, settings: PipelineSettings, read_days: set[date] | None = None) -> DataFrame:
    """Events, chained, of every chain of a seed user with an event on one of that user's seed days.

    Each chain is complete: reading starts at the seed days and their neighbours and grows, per user and
    doubling, wherever a chain comes within one gap of the edge of what was read. The event days read
    are added to ``read_days``.
    """
    gap, first_day = settings.session_gap, settings.first_day
    horizon = _last_event_day(wh) or first_day
    one = F.expr("INTERVAL 1 DAY")
    read = seeds.select("user_key", F.explode(F.array(
        F.date_sub("event_date", 1), F.col("event_date"), F.date_add("event_date", 1))).alias("event_date"))  # fmt: skip
    read = read.where(F.col("event_date").between(F.lit(first_day), F.lit(horizon))).distinct()
    flagged = seeds.withColumn("_seed", F.lit(1))
    step = 1
    while True:
        days = _days(read)
        if read_days is not None:
            read_days.update(days)
        events = (
            wh.read(EVENTS)
            .where(F.col("event_date").isin(days))
            .select("user_key", "timestamp", "message_id", "event_date")
            .join(read, ["user_key", "event_date"], "left_semi")
        )
        chained = assign_chains(events, gap).join(flagged, ["user_key", "event_date"], "left")
        relevant = F.max("_seed").over(Window.partitionBy("user_key", "chain")).isNotNull()
        chained = chained.withColumn("_relevant", relevant).where("_relevant").drop("_seed", "_relevant").persist()
        start_day, end_day = F.to_date("chain_start"), F.to_date("chain_end")
        wanted = chained.select(
            "user_key",
            F.explode(F.array(
                F.when(F.col("chain_start") < start_day.cast("timestamp") + _interval(gap), F.date_sub(start_day, 1)),
                F.when(F.col("chain_end") >= (end_day + one).cast("timestamp") - _interval(gap), F.date_add(end_day, 1)),
            )).alias("event_date"),
            start_day.alias("_start"),
        ).where(F.col("event_date").between(F.lit(first_day), F.lit(horizon)))  # fmt: skip
        edges = wanted.join(read, ["user_key", "event_date"], "left_anti").distinct().collect()
        if not edges:
            return chained
        chained.unpersist()
        # Read ``step`` more days beyond each edge, in the direction the chain runs off.
        more = [
            (e.user_key, e.event_date - timedelta(days=k) if e.event_date < e._start else e.event_date + timedelta(days=k))
            for e in edges for k in range(step)
        ]  # fmt: skip
        read = read.unionByName(wh.spark.createDataFrame(more, SEED_SCHEMA)).distinct()
        step *= 2


def _superseded(wh: Warehouse, seeds: DataFrame, fresh: DataFrame) -> DataFrame:
    """Stored sessions the recomputed chains decide: those overlapping a chain or holding an event on a seed day."""
    chains = fresh.select("user_key", "chain_start", "chain_end").distinct()
    around = fresh.select(F.explode(F.sequence(F.date_sub(F.to_date("chain_start"), 1), F.to_date("chain_end"))).alias("d"))
    seed_days = seeds.select(F.explode(F.array(F.date_sub("event_date", 1), F.col("event_date"))).alias("d"))
    stored = wh.read(SESSIONS).where(F.col("session_date").isin(_days(around.union(seed_days), "d")))
    stored = stored.join(seeds.select("user_key").distinct(), "user_key", "left_semi")
    overlapping = stored.alias("o").join(chains.alias("c"), "user_key").where(
        (F.col("o.session_start") <= F.col("c.chain_end")) & (F.col("o.session_end") >= F.col("c.chain_start"))
    )
    on_seed_day = stored.join(seeds, "user_key").where(
        F.col("event_date").between(F.to_date("session_start"), F.to_date("session_end"))
    )
    return overlapping.select(*SESSION_COLUMNS).union(on_seed_day.select(*SESSION_COLUMNS)).distinct()


def _uncovered_days(old: DataFrame, fresh: DataFrame, seeds: DataFrame) -> DataFrame:
    """(user, day) of stored sessions that no recomputed chain contains and that are not seeds yet.

    Only a removed event (a received day re-ingested with other rows) can leave such a session: its
    remaining events may sit in chains that were not recomputed, so its days become seeds too.
    """
    chains = fresh.select("user_key", "chain_start", "chain_end").distinct()
    outside = old.alias("o").join(
        chains.alias("c"),
        (F.col("o.user_key") == F.col("c.user_key"))
        & (F.col("c.chain_start") <= F.col("o.session_start"))
        & (F.col("o.session_end") <= F.col("c.chain_end")),
        "left_anti",
    )
    days = outside.select("user_key", F.explode(F.array(F.to_date("session_start"), F.to_date("session_end"))).alias("event_date"))
    return days.distinct().join(seeds, ["user_key", "event_date"], "left_anti")


def rebuild_sessions(wh: Warehouse, seeds: DataFrame, settings: PipelineSettings, new: DataFrame | None = None) -> SessionChanges:
    """Recompute the chains of ``seeds`` (``user_key``, ``event_date``) and merge the difference into ``sessions``.

    ``new``: rows no stored session counts yet (``session_extend.tag_unseen``), of users not in ``seeds``,
    added to their users' stored sessions instead (their users are recomputed too if that needs events).
    """
    read_days: set[date] = set()
    held: list[DataFrame] = []
    extension = None
    if new is not None:
        extension = session_extend.extend(wh, new, settings)
        held.append(extension.cached)
        read_days.update(extension.days)
        seeds = seeds.unionByName(new.join(extension.overflow, "user_key", "left_semi").select(*seeds.columns))
    seeds = seeds.select("user_key", "event_date").distinct().persist()
    held.append(seeds)
    try:
        fresh = old = None
        while not seeds.isEmpty():
            chained = load_chains(wh, seeds, settings, read_days)
            fresh = sessions_from_chains(chained, settings.max_session).persist()
            old = _superseded(wh, seeds, fresh).persist()
            held += [chained, fresh, old]
            more = _uncovered_days(old, fresh, seeds).collect()
            if not more:
                break
            seeds = seeds.union(wh.spark.createDataFrame(more, SEED_SCHEMA)).distinct().persist()
            held.append(seeds)
        news, olds = ([fresh.select(*SESSION_COLUMNS)], [old]) if fresh is not None else ([], [])
        if extension is not None:
            news.append(extension.fresh)
            olds.append(extension.old)
        if not news:
            return SessionChanges()
        # Counted before the write: after it, a re-read of ``sessions`` would see the new rows.
        extended = extension.fresh.select("user_key").distinct().count() if extension is not None else 0
        note = session_extend.mark(wh.version(EVENTS), min(read_days, default=None), max(read_days, default=None))
        changes = _merge(wh, reduce(DataFrame.unionByName, news), reduce(DataFrame.unionByName, olds), note)
        changes.extended = extended
        return changes
    finally:
        for df in held:
            df.unpersist()


def users_on_days(wh: Warehouse, days: list[date]) -> DataFrame:
    """Seeds for recomputing whole days: every user with an event, or a stored session, on one of them."""
    from_events = wh.read(EVENTS).where(F.col("event_date").isin(days)).select("user_key", "event_date")
    previous = sorted({d - timedelta(days=k) for d in days for k in (0, 1)})
    stored = wh.read(SESSIONS).where(F.col("session_date").isin(previous)).select(
        "user_key", F.explode(F.array(F.to_date("session_start"), F.to_date("session_end"))).alias("event_date")
    )
    return from_events.union(stored.where(F.col("event_date").isin(days))).distinct()


def rebuild_session_days(wh: Warehouse, first: date, last: date, settings: PipelineSettings) -> SessionChanges:
    """Recompute sessions days ``first..last`` whole (what a whole-day rebuild does; the benchmark's baselines)."""
    return rebuild_sessions(wh, users_on_days(wh, days_between(first, last)), settings)


def update_sessions(wh: Warehouse, first: date, last: date, settings: PipelineSettings) -> SessionChanges:
    """Absorb the loads ``events`` absorbed on event days ``first..last`` and ``sessions`` has not yet."""
    position = ledger.state(wh, CONSUMER, ledger.absorbed(wh, ev.CONSUMER), first, last)
    seeds, new, held = [], None, []
    if position.pending:
        rows = ev.dedupe(ledger.rows_of(wh, position.pending))
        if position.stale_days:  # a day rebuilt whole rewrites its users' events: recompute them all
            seeds.append(rows.select("user_key", "event_date"))
        else:
            tagged = session_extend.tag_unseen(wh, rows, position, wh.version(EVENTS)).persist()
            held.append(tagged)
            new = tagged.where("_unseen").select("user_key", "timestamp", "event_date")
            seeds.append(tagged.where(~F.col("_unseen")).select("user_key", "event_date"))
    if position.stale_days:
        seeds.append(users_on_days(wh, sorted(position.stale_days)))
    changes = SessionChanges()
    if seeds:
        union = seeds[0] if len(seeds) == 1 else seeds[0].union(seeds[1])
        try:
            changes = rebuild_sessions(wh, union, settings, new)
        finally:
            for df in held:
                df.unpersist()
    loads = position.pending | position.whole
    ledger.record(wh, CONSUMER, loads, position.stale_days)
    changes.loads_absorbed, changes.days_rebuilt_whole = len(loads), tuple(sorted(position.stale_days))
    compacted = wh.compact(SESSIONS, changes.days_written, settings.compact_min_files, settings.compact_most_days)
    changes.days_compacted = tuple(compacted)
    return changes


def _merge(wh: Warehouse, fresh: DataFrame, old: DataFrame, note: str) -> SessionChanges:
    changes = SessionChanges()
    changes.users = fresh.select("user_key").distinct().count()
    new = fresh.select(*SESSION_COLUMNS)
    # Checkpointed (freed with the frame), not cached: the MERGE re-plans a source that reads its own
    # target against the version it writes, which misses the cache and would recompute the diff.
    diff = diff_rows(new, old, ["session_id", "session_date"]).localCheckpoint()
    written = F.col("_op") != "delete"
    summary = diff.agg(
        F.sum(written.cast("int")),
        F.sum((~written).cast("int")),
        F.sum((written & F.col("ended_by_cap")).cast("int")),
        # Only the days of stored sessions that change or go: a new session's key is in no other day
        # (``old`` holds every stored session its chain could share a start with), so the MERGE need
        # not read the other days to find it absent.
        F.collect_set(F.when(F.col("_op") != "insert", F.col("session_date"))),
        F.collect_set("session_date"),
    ).head()
    changes.days_written = tuple(sorted(summary[4]))
    changes.written, changes.merged_away, changes.capped = (summary[0] or 0, summary[1] or 0, summary[2] or 0)
    if changes.merged_away:
        changes.moved = _moved(diff.where("_op = 'delete'"), new)
    if changes.written or changes.merged_away:
        wh.apply_diff(SESSIONS, diff, ["session_id", "session_date"], sorted(summary[3]), note=note)
        changes.committed = True
    return changes


def _moved(deleted: DataFrame, new: DataFrame) -> int:
    """Deleted rows whose events now belong to a session starting on another day."""
    return (
        deleted.alias("o")
        .join(new.alias("n"), "user_key")
        .where(
            (F.col("o.session_start") <= F.col("n.session_end"))
            & (F.col("o.session_end") >= F.col("n.session_start"))
            & (F.col("o.session_date") != F.col("n.session_date"))
        )
        .select("o.session_id")
        .distinct()
        .count()
    )
