"""The daily accumulating snapshot: users on hand per lifecycle state at the end of each day.

Like a bank statement, days ``first..last`` are derived from the balance at the end of ``first - 1`` and
the sessions of ``first..last``, never from all history. The balance is kept per user, in
``user_states`` (one row per stay in a state, valid_from..valid_to): seed 003's "fillers at the lowest
granularity", without materializing a row per user per day. Only the users who can change state in the
window are walked day by day: those with a session in it, and those not yet churned at ``first - 1``
(lapsing and dormant users age into the next state with no new data). Churned users without new
sessions never change, and are carried as one count and one age sum.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta
from functools import reduce

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from sessions_assets import ledger, session_feed
from sessions_assets.config import PipelineSettings
from sessions_assets.session_feed import PAIR, SessionFeed
from sessions_assets.session_rebuild import CONSUMER as SESSIONS_CONSUMER
from sessions_assets.tables import DAILY_SNAPSHOT, SESSIONS, USER_STATES, Warehouse, diff_rows

STATES = ("new", "active", "lapsing", "dormant", "churned")
CONSUMER = "daily_snapshot"


@dataclass
class SnapshotChanges:
    first: date | None = None
    days_rewritten: int = 0
    users_walked: int = 0
    users_changed: int = 0
    days_from_feed: bool = False  # corrected users' session days from their stays and the change feed
    on_hand_latest: dict[str, int] = field(default_factory=dict)


def states_on(user_states: DataFrame, day: date | Column) -> DataFrame:
    """Every user's state at the end of ``day`` (a date, or a column per user): ``user_key``, ``state``,
    ``valid_from``."""
    covering = (F.col("valid_from") <= F.lit(day)) & (F.col("valid_to").isNull() | (F.col("valid_to") >= F.lit(day)))
    return user_states.where(covering).select("user_key", "state", "valid_from")


def _last_session_before(state: Column, valid_from: Column, day_before: Column, settings: PipelineSettings) -> Column:
    """The last session day implied by a state entered on ``valid_from`` (lapsing starts the day after)."""
    return (
        F.when(state.isin("new", "active"), day_before)
        .when(state == "lapsing", F.date_sub(valid_from, 1))
        .when(state == "dormant", F.date_sub(valid_from, settings.lapsing_days + 1))
        .when(state == "churned", F.date_sub(valid_from, settings.dormant_days + 1))
    )


def walk_states(
    prior: DataFrame, session_days: DataFrame, starts: DataFrame, last: date, settings: PipelineSettings
) -> DataFrame:
    """Each walked user's state on every day of ``first..last``, with ``prev_state``, ``valid_from`` and age.

    ``starts``: the users to walk and the day each is walked from (``user_key``, ``first``); ``prior``:
    state at ``first - 1`` (``user_key``, ``state``, ``valid_from``) of those who have one;
    ``session_days``: distinct (``user_key``, ``session_date``) from their ``first`` on.
    """
    grid = starts.select("user_key", "first", F.explode(F.sequence("first", F.lit(last))).alias("day"))
    df = (
        grid.join(session_days.withColumn("has_session", F.lit(True)).withColumnRenamed("session_date", "day"),
                  ["user_key", "day"], "left")
        .join(prior.withColumnRenamed("state", "prior_state").withColumnRenamed("valid_from", "prior_from"),
              "user_key", "left")
    )  # fmt: skip
    by_day = Window.partitionBy("user_key").orderBy("day")
    so_far = by_day.rowsBetween(Window.unboundedPreceding, 0)
    session_day = F.when(F.col("has_session"), F.col("day"))
    before = F.date_sub("first", 1)
    last_session = F.greatest(
        _last_session_before(F.col("prior_state"), F.col("prior_from"), before, settings), F.max(session_day).over(so_far)
    )
    first_ever = F.when(F.col("prior_state").isNull(), F.min(session_day).over(Window.partitionBy("user_key")))
    idle = F.datediff(F.col("day"), F.col("last_session"))
    state = (
        F.when(F.col("last_session").isNull(), None)
        .when(F.col("day") == F.col("first_ever"), "new")
        .when(F.col("has_session"), "active")
        .when(idle <= settings.lapsing_days, "lapsing")
        .when(idle <= settings.dormant_days, "dormant")
        .otherwise("churned")
    )
    df = df.withColumn("last_session", last_session).withColumn("first_ever", first_ever).withColumn("state", state)
    df = df.withColumn(
        "prev_state", F.when(F.col("day") == F.col("first"), F.col("prior_state")).otherwise(F.lag("state").over(by_day))
    )
    changed = F.col("state").isNotNull() & ~F.coalesce(F.col("prev_state") == F.col("state"), F.lit(False))
    df = df.withColumn("changed", changed).withColumn("stay", F.sum(F.col("changed").cast("int")).over(so_far))
    valid_from = F.when(F.col("stay") == 0, F.col("prior_from")).otherwise(
        F.min(F.when(F.col("changed"), F.col("day"))).over(Window.partitionBy("user_key", "stay"))
    )
    df = df.withColumn("valid_from", valid_from).withColumn("age", F.datediff(F.col("day"), F.col("valid_from")))
    return df.select(
        "user_key", "first", "day", "state", "prev_state", "changed", "stay", "valid_from", "age",
        "prior_state", "prior_from",
    )


def everyone_from(prior: DataFrame, session_days: DataFrame, first: date) -> DataFrame:
    """The users a walk from ``first`` must take: not churned at ``first - 1``, or with a session since."""
    users = prior.where(F.col("state") != "churned").select("user_key").union(session_days.select("user_key"))
    return users.distinct().withColumn("first", F.lit(first))


def snapshot_rows(walked: DataFrame, resting: DataFrame, first: date, last: date) -> DataFrame:
    """Per (day, state): the walked users counted directly, plus the resting churned users carried as is."""
    present = walked.where(F.col("state").isNotNull())
    on_hand = present.groupBy("day", "state").agg(
        F.count(F.lit(1)).alias("users_on_hand"),
        F.sum(F.col("changed").cast("long")).alias("users_entered"),
        F.sum("age").cast("long").alias("sum_days_in_state"),
    )
    exited = (
        walked.where(F.col("prev_state").isNotNull() & ~F.coalesce(F.col("prev_state") == F.col("state"), F.lit(False)))
        .groupBy("day", F.col("prev_state").alias("state"))
        .agg(F.count(F.lit(1)).alias("users_exited"))
    )
    # Resting users are all churned and stay so: each day adds one day of age to each of them.
    rest = resting.agg(
        F.count(F.lit(1)).alias("n"), F.coalesce(F.sum(F.datediff(F.lit(first), "valid_from")), F.lit(0)).alias("age0")
    )
    days = rest.where("n > 0").select("n", "age0", F.explode(F.sequence(F.lit(first), F.lit(last))).alias("day"))
    carried = days.select(
        "day",
        F.lit("churned").alias("state"),
        F.col("n").alias("users_on_hand"),
        F.lit(0).cast("long").alias("users_entered"),
        (F.col("age0") + F.col("n") * F.datediff(F.col("day"), F.lit(first))).cast("long").alias("sum_days_in_state"),
    )
    counts = (
        on_hand.unionByName(carried)
        .groupBy("day", "state")
        .agg(F.sum("users_on_hand").alias("users_on_hand"), F.sum("users_entered").alias("users_entered"),
             F.sum("sum_days_in_state").alias("sum_days_in_state"))
        .join(exited, ["day", "state"], "full_outer")
    )  # fmt: skip
    zero = F.lit(0).cast("long")
    return counts.select(
        F.col("day").alias("snapshot_date"),
        "state",
        F.coalesce("users_on_hand", zero).cast("long").alias("users_on_hand"),
        F.coalesce("users_entered", zero).cast("long").alias("users_entered"),
        F.coalesce("users_exited", zero).cast("long").alias("users_exited"),
        F.round(F.coalesce(F.try_divide("sum_days_in_state", "users_on_hand"), F.lit(0.0)), 4).alias("avg_days_in_state"),
        F.coalesce("sum_days_in_state", zero).cast("long").alias("sum_days_in_state"),
    ).where("users_on_hand > 0 OR users_entered > 0 OR users_exited > 0")


def state_intervals(walked: DataFrame) -> DataFrame:
    """The walked users' ``user_states`` rows from the stay covering their ``first - 1`` on."""
    present = walked.where(F.col("state").isNotNull())
    stays = present.groupBy("user_key", "stay", "state", "valid_from").agg(F.max("day").alias("until"))
    latest = F.max("stay").over(Window.partitionBy("user_key"))
    stays = stays.withColumn("valid_to", F.when(F.col("stay") < latest, F.col("until")))
    # A stay that ended at first - 1 is closed here (it continues into the window when ``stay`` is 0).
    closed = (
        walked.where((F.col("day") == F.col("first")) & F.col("prior_state").isNotNull() & (F.col("stay") > 0))
        .select("user_key", F.col("prior_state").alias("state"), F.col("prior_from").alias("valid_from"),
                F.date_sub("first", 1).alias("valid_to"))
    )  # fmt: skip
    return stays.select("user_key", "state", "valid_from", "valid_to").unionByName(closed)


def _reaching(states: DataFrame, before: date | Column) -> DataFrame:
    """The stays a walk from ``before + 1`` reads (the balance) and replaces: those reaching ``before``."""
    return states.where(F.col("valid_to").isNull() | (F.col("valid_to") >= F.lit(before)))


def rebuild_snapshot(
    wh: Warehouse, first: date, last: date, settings: PipelineSettings, reads: _Reads | None = None
) -> SnapshotChanges:
    """Make ``daily_snapshot`` and ``user_states`` exact for ``first..last``, given they are up to ``first - 1``
    (or from the first day ``sessions``' change feed shows changed since the stays were last exact)."""
    reads = reads or _Reads.pin(wh)
    behind = _stays_behind(wh)
    first = min(d for d in (first, behind, reads.feed.first_changed) if d is not None)
    first, from_start = _start_of_history(wh, first)
    if first is None or first > last:
        return SnapshotChanges(first=first)
    return _carry_forward(wh, first, last, settings, reads, from_start)


def _on_hand(wh: Warehouse, day: date) -> dict[str, int]:
    return {s: 0 for s in STATES} | {r.state: r.users_on_hand for r in wh.read(DAILY_SNAPSHOT, day, day).collect()}


@dataclass
class _Walk:
    """Users walked day by day to a last day, each from their balance at the day before their ``first``."""

    states: DataFrame  # their stored stays reaching their ``first - 1``: the balance, and the stays to replace
    prior: DataFrame  # their state at ``first - 1``
    walked: DataFrame

    @classmethod
    def of(cls, states: DataFrame, sessions: DataFrame, first: date, last: date, settings: PipelineSettings) -> _Walk:
        """Everyone who can change from ``first`` on; churned users without sessions rest (``resting``)."""
        states = _reaching(states, first - timedelta(days=1)).persist()
        prior = states_on(states, first - timedelta(days=1))
        session_days = sessions.select("user_key", "session_date").distinct()
        walked = walk_states(prior, session_days, everyone_from(prior, session_days, first), last, settings)
        return cls(states, prior, walked.persist())

    @classmethod
    def each_from(
        cls, states: DataFrame, session_days: Callable[[DataFrame], DataFrame], starts: DataFrame, last: date,
        settings: PipelineSettings,
    ) -> _Walk:
        """The users of ``starts``, each from their own ``first``: nobody rests. ``session_days`` gives their
        session days from their ``first`` on, given their stays reaching ``first - 1``."""
        before = F.date_sub("first", 1)
        # ``starts`` is a row per user; the stays and sessions are many per user: broadcast, not shuffled.
        states = _reaching(states.join(F.broadcast(starts), "user_key"), before).persist()  # ``stored`` drops ``first``
        prior = states_on(states, before)
        walked = walk_states(prior, session_days(states), starts, last, settings)
        return cls(states, prior, walked.persist())

    @property
    def users(self) -> DataFrame:
        return self.walked.select("user_key").distinct()

    @property
    def resting(self) -> DataFrame:
        """Churned at ``first - 1`` with no session since: carried as they are, without a walk."""
        return self.prior.join(self.users, "user_key", "left_anti")

    @property
    def stored(self) -> DataFrame:
        """The stored stays the walk's replace: all reaching ``first - 1`` but the resting users'.

        A user with stays in the window and no sessions left in it (a re-ingest dropped them) is not
        walked: their stays are replaced by nothing, so they cannot come back in a later balance.
        """
        return self.states.select(*USER_STATES.schema.fieldNames()).join(self.resting, "user_key", "left_anti")

    @property
    def fresh(self) -> DataFrame:
        return state_intervals(self.walked)

    def unpersist(self) -> None:
        self.walked.unpersist()
        self.states.unpersist()


@dataclass
class _Stays:
    """``user_states`` at the version a run reads: its walks' balance, and the base its rewrite applies to.

    ``watermark``: the ``sessions`` version these stays are exact for (``session_feed``), if known."""

    version: int
    rows: DataFrame
    watermark: int | None = None
    held: list[DataFrame] = field(default_factory=list)

    @classmethod
    def read(cls, wh: Warehouse) -> _Stays:
        version, note = wh.delta(USER_STATES).history(1).select("version", "userMetadata").head()
        return cls(version, wh.read_at(USER_STATES, version), session_feed.watermark(note))

    def reaching(self, starts: DataFrame, others_from: date) -> DataFrame:
        """In one scan, the stays the walks read: each ``starts`` user's reaching the day before their
        ``first`` (in ``_first``), everyone else's reaching ``others_from - 1`` (``_first`` null)."""
        balance = self.rows.join(F.broadcast(starts.withColumnRenamed("first", "_first")), "user_key", "left")
        balance = _reaching(balance, F.date_sub(F.coalesce("_first", F.lit(others_from)), 1)).persist()
        self.held.append(balance)
        return balance

    def release(self) -> None:
        for df in self.held:
            df.unpersist()


@dataclass
class _Reads:
    """What a run reads, pinned once at its start: the stays, and ``sessions`` with its change feed since the
    stays' watermark. Pinned after the ledger is read, so every load the ledger shows absorbed by
    ``sessions`` is in the version read."""

    stays: _Stays
    feed: SessionFeed

    @classmethod
    def pin(cls, wh: Warehouse) -> _Reads:
        stays = _Stays.read(wh)
        return cls(stays, SessionFeed.since(wh, stays.watermark))


def _write(
    wh: Warehouse, changes: SnapshotChanges, rows: DataFrame, first: date, last: date,
    walks: list[_Walk], stays: _Stays, report_day: date, watermark: int | None, txn: str | None = None,
) -> SnapshotChanges:
    """Write snapshot days ``first..last``, then the stays ``walks`` computed: one commit each.

    The stays' commit carries ``watermark``, the ``sessions`` version they are now exact for (``None``:
    not known, so the next run reads ``sessions`` rather than its change feed).

    The stays' difference is found first. A snapshot write that stays follow carries a mark naming the
    ``user_states`` version it was computed against and its first day: if the run dies before the stays
    land, the next run finds the mark unanswered (``_stays_behind``) and rebuilds from that day. With
    ``txn`` it is also tagged with that version, so a concurrent run that computed the same correction
    against the same version does not apply it twice.

    After a commit Spark re-plans every cached frame that reads the table written (a Delta file listing
    each). So the difference is checkpointed, cut from ``user_states``, and the walks (and the stays they
    read) are released before it is applied there: that re-planning cost seconds per run.
    """
    based_on = stays.version
    fresh = reduce(DataFrame.unionByName, [walk.fresh for walk in walks])
    stored = reduce(DataFrame.unionByName, [walk.stored for walk in walks])
    diff = diff_rows(fresh, stored, ["user_key", "valid_from"]).localCheckpoint()  # freed with the frame
    changes.users_changed = diff.select("user_key").distinct().count()
    tag = (txn, based_on) if txn and changes.users_changed else None
    mark = json.dumps({_MARK: based_on, "first": first.isoformat()}) if changes.users_changed else None
    wh.replace_partitions(DAILY_SNAPSHOT, rows, first, last, txn=tag, note=mark)
    for walk in walks:
        walk.unpersist()
    stays.release()
    if changes.users_changed:
        wh.rewrite(USER_STATES, diff, ["user_key", "valid_from"], based_on, note=session_feed.note(watermark))
    changes.days_rewritten = (last - first).days + 1
    changes.on_hand_latest = _on_hand(wh, report_day)
    return changes


_MARK = "user_states_version_before"


def _stays_behind(wh: Warehouse) -> date | None:
    """The first day of the latest snapshot write if the stays it was computed with never reached ``user_states``.

    The two tables are two commits; only a run dying between them leaves this (``_write``). ``user_states``
    is then exact up to the day before, so rebuilding from it repairs both tables.
    """
    note = wh.delta(DAILY_SNAPSHOT).history(1).select("userMetadata").head()
    mark = json.loads(note[0]) if note and note[0] else {}
    if mark.get(_MARK) is not None and mark[_MARK] == wh.version(USER_STATES):
        return date.fromisoformat(mark["first"])
    return None


def _carry_forward(
    wh: Warehouse, first: date, last: date, settings: PipelineSettings, reads: _Reads, from_start: bool = False
) -> SnapshotChanges:
    """Days ``first..last`` from the balance at ``first - 1`` (none: ``first`` is the first session day).

    The stays are exact for the sessions read if every change since their watermark is on ``first`` or
    later (the caller started there), or if nobody's stays predate ``first`` (``from_start``)."""
    stays, feed = reads.stays, reads.feed
    walk = _Walk.of(stays.rows, feed.sessions(wh, first, last), first, last, settings)
    try:
        changes = SnapshotChanges(first=first, users_walked=walk.users.count())
        rows = snapshot_rows(walk.walked, walk.resting, first, last)
        watermark = feed.version if feed.known or from_start else None
        return _write(wh, changes, rows, first, last, [walk], stays, report_day=last, watermark=watermark)
    finally:
        walk.unpersist()


def contributions(intervals: DataFrame, lo: Column, hi: date) -> DataFrame:
    """What stays (``user_states`` rows; open = up to ``hi``) add to each (day, state) of ``lo..hi``.

    The same sums ``snapshot_rows`` takes over walked users: a day on hand with its age, entering on the
    first day of a stay, exiting the day after its last. ``lo`` may differ per row.
    """
    until = F.least(F.coalesce(F.col("valid_to"), F.lit(hi)), F.lit(hi))
    on_hand = intervals.where((F.col("valid_from") <= F.lit(hi)) & (until >= lo)).select(
        "state", "valid_from", F.explode(F.sequence(F.greatest("valid_from", lo), until)).alias("day")
    )
    exits = intervals.where(F.date_add("valid_to", 1).between(lo, F.lit(hi)))
    zero = F.lit(0).cast("long")
    return on_hand.select(
        "day", "state", F.lit(1).cast("long").alias("users_on_hand"),
        (F.col("day") == F.col("valid_from")).cast("long").alias("users_entered"), zero.alias("users_exited"),
        F.datediff("day", "valid_from").cast("long").alias("sum_days_in_state"),
    ).unionByName(exits.select(
        F.date_add("valid_to", 1).alias("day"), "state", zero.alias("users_on_hand"), zero.alias("users_entered"),
        F.lit(1).cast("long").alias("users_exited"), zero.alias("sum_days_in_state"),
    ))  # fmt: skip


_MEASURES = ("users_on_hand", "users_entered", "users_exited", "sum_days_in_state")


def _with_average(counts: DataFrame) -> DataFrame:
    average = F.round(F.coalesce(F.try_divide("sum_days_in_state", "users_on_hand"), F.lit(0.0)), 4)
    return counts.withColumn("avg_days_in_state", average).where(
        "users_on_hand > 0 OR users_entered > 0 OR users_exited > 0"
    )


def absorb_users(
    wh: Warehouse, users: DataFrame, lo: date, last: date, settings: PipelineSettings, reads: _Reads | None = None
) -> SnapshotChanges:
    """Bring the snapshot to ``last`` after ``users``' sessions changed from ``lo`` on.

    ``users`` may say from which day each one's sessions changed (a ``first`` column, none before ``lo``).
    Days already in the snapshot are corrected for those users only; days past it are carried forward from
    the balance as usual. Without a snapshot yet, it is built from the first session day. The users that
    ``sessions``' change feed names since the stays' watermark are corrected too, from their first changed
    day: the ledger may not show them yet (a ``sessions`` run that died before its ledger write).
    """
    reads = reads or _Reads.pin(wh)
    built_from, built_to = wh.read(DAILY_SNAPSHOT).agg(F.min("snapshot_date"), F.max("snapshot_date")).head()
    if built_to is None or _stays_behind(wh) is not None:
        return rebuild_snapshot(wh, lo, last, settings, reads)  # nothing to correct, or a repair
    users = users.select("user_key", (F.col("first") if "first" in users.columns else F.lit(lo)).alias("first"))
    if reads.feed.first_changed is not None:
        users, lo = users.unionByName(reads.feed.users()), min(lo, reads.feed.first_changed)
    if lo < built_from:
        # The snapshot starts at the first session day. ``lo`` reaches a day before it (a late row on
        # that first day reaches back one more day): if no session starts before it, there is nothing
        # to correct there, and the correction starts at ``built_from`` like any other.
        if reads.feed.sessions(wh, last=built_from - timedelta(days=1)).limit(1).count():
            return rebuild_snapshot(wh, lo, last, settings, reads)  # a session older than the snapshot
        lo = built_from
    if lo <= built_to:
        return _correct(wh, users, lo, built_to, last, settings, reads)
    if last > built_to:  # the balance at ``built_to`` exists: no need to look for the start of history
        return _carry_forward(wh, built_to + timedelta(days=1), last, settings, reads)
    return SnapshotChanges(first=built_to + timedelta(days=1), on_hand_latest=_on_hand(wh, last))


def _correct(
    wh: Warehouse, users: DataFrame, lo: date, built_to: date, last: date, settings: PipelineSettings, reads: _Reads
) -> SnapshotChanges:
    """Correct days ``lo..built_to`` for ``users`` and carry every user on to ``last``, in one write per table.

    Every other user's contribution to a built day is untouched, so each such day changes by these users'
    new contribution minus their old one (from ``user_states``): the cost follows the users, not the days of
    history. Each is walked from their own ``first`` (before it, old and new stays are the same), so a user
    whose only late session is yesterday costs two days, not all of ``lo..built_to``. Days past
    ``built_to`` count the corrected users' walk with everyone else's, walked from the balance at ``built_to``.
    """
    end = max(built_to, last)
    # No later than the first day past the snapshot: the carry forward walks only the other users, so a
    # user walked from a later day would be missing from the days between.
    first = F.least(F.greatest(F.min("first"), F.lit(lo)), F.lit(min(end, built_to + timedelta(days=1))))
    starts = users.groupBy("user_key").agg(first.alias("first")).localCheckpoint()
    stays, feed, forward = reads.stays, reads.feed, built_to + timedelta(days=1)
    walks: list[_Walk] = []

    def session_days(since: date) -> DataFrame:
        """The users' session days from their ``first``, read from ``sessions`` days ``since..end``."""
        days = feed.sessions(wh, since, end).join(F.broadcast(starts), "user_key")
        return days.where(F.col("session_date") >= F.col("first")).select(*PAIR).distinct()

    def from_stays(states: DataFrame) -> DataFrame:
        return feed.session_days(states, starts, built_to).unionByName(session_days(forward))

    try:
        balance = stays.reaching(starts, forward)
        mine = _Walk.each_from(balance.where(F.col("_first").isNotNull()).drop("_first"),
                               from_stays if feed.known else lambda _: session_days(lo), starts, end, settings)  # fmt: skip
        walks.append(mine)
        since_first = F.col("first")
        delta = contributions(mine.fresh.join(starts, "user_key"), since_first, built_to).unionByName(
            contributions(mine.stored.join(starts, "user_key"), since_first, built_to)
            .select("day", "state", *[(-F.col(m)).alias(m) for m in _MEASURES])
        )  # fmt: skip
        current = wh.read(DAILY_SNAPSHOT, lo, built_to).select(F.col("snapshot_date").alias("day"), "state", *_MEASURES)
        rows = _with_average(
            current.unionByName(delta).groupBy("day", "state").agg(*[F.sum(m).cast("long").alias(m) for m in _MEASURES])
        ).withColumnRenamed("day", "snapshot_date")
        walked_users = mine.users
        if last > built_to:
            others = _Walk.of(
                balance.where(F.col("_first").isNull()).drop("_first"),
                feed.sessions(wh, forward, last).join(starts, "user_key", "left_anti"), forward, last, settings,
            )  # fmt: skip
            walks.append(others)
            walked = mine.walked.where(F.col("day") >= F.lit(forward)).unionByName(others.walked)
            rows = rows.unionByName(snapshot_rows(walked, others.resting, forward, last))
            walked_users = walked_users.unionByName(others.users)
        changes = SnapshotChanges(first=lo, users_walked=walked_users.count(), days_from_feed=feed.known)
        watermark = feed.version if feed.known else None
        return _write(wh, changes, rows, lo, end, walks, stays, report_day=last, watermark=watermark,
                      txn="daily_snapshot-corrections")  # fmt: skip
    finally:
        for walk in walks:
            walk.unpersist()
        stays.release()


def update_snapshot(wh: Warehouse, first: date, last: date, settings: PipelineSettings) -> SnapshotChanges:
    """Absorb the loads ``sessions`` absorbed since the snapshot last ran, and reach ``last``.

    The users of those loads are the only ones whose sessions changed: they are corrected from the day
    before their earliest load (``absorb_users``). With nothing pending (a re-run, a backfill from the UI)
    or after ``sessions`` recomputed whole days, days ``first..last`` are carried from the balance as before.
    """
    position = ledger.state(wh, CONSUMER, ledger.absorbed(wh, SESSIONS_CONSUMER))
    reads = _Reads.pin(wh)  # after the ledger: what it shows absorbed upstream is in what is read
    one = timedelta(days=1)
    if position.pending and not position.stale_days:
        own_first = F.date_sub(F.min("event_date"), 1)  # the day each user's correction starts
        users = ledger.rows_of(wh, position.pending).groupBy("user_key").agg(own_first.alias("first"))
        changes = absorb_users(wh, users, min(load[0] for load in position.pending) - one, last, settings, reads)
    else:
        changed_days = position.stale_days | {load[0] for load in position.pending}
        changes = rebuild_snapshot(wh, min([first] + [d - one for d in changed_days]), last, settings, reads)
    ledger.record(wh, CONSUMER, position.pending | position.whole, position.stale_days)
    return changes


def _start_of_history(wh: Warehouse, first: date) -> tuple[date | None, bool]:
    """``first``, or the first session day if there is no balance for ``first - 1`` to carry forward; and
    whether that is the start of history (no session before it)."""
    if wh.read(DAILY_SNAPSHOT, first - timedelta(days=1), first - timedelta(days=1)).limit(1).count():
        return first, False
    earliest = wh.read(SESSIONS).agg(F.min("session_date")).head()[0]
    return (earliest if earliest is None or earliest < first else first), True
