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

from dataclasses import dataclass, field
from datetime import date, timedelta

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from sessions_assets.config import PipelineSettings
from sessions_assets.tables import DAILY_SNAPSHOT, SESSIONS, USER_STATES, Warehouse, diff_rows

STATES = ("new", "active", "lapsing", "dormant", "churned")


@dataclass
class SnapshotChanges:
    first: date | None = None
    days_rewritten: int = 0
    users_walked: int = 0
    users_changed: int = 0
    on_hand_latest: dict[str, int] = field(default_factory=dict)


def states_on(user_states: DataFrame, day: date) -> DataFrame:
    """Every user's state at the end of ``day``: ``user_key``, ``state``, ``valid_from``."""
    covering = (F.col("valid_from") <= F.lit(day)) & (F.col("valid_to").isNull() | (F.col("valid_to") >= F.lit(day)))
    return user_states.where(covering).select("user_key", "state", "valid_from")


def _last_session_before(state: Column, valid_from: Column, day_before: date, settings: PipelineSettings) -> Column:
    """The last session day implied by a state entered on ``valid_from`` (lapsing starts the day after)."""
    return (
        F.when(state.isin("new", "active"), F.lit(day_before))
        .when(state == "lapsing", F.date_sub(valid_from, 1))
        .when(state == "dormant", F.date_sub(valid_from, settings.lapsing_days + 1))
        .when(state == "churned", F.date_sub(valid_from, settings.dormant_days + 1))
    )


def walk_states(
    prior: DataFrame, session_days: DataFrame, first: date, last: date, settings: PipelineSettings
) -> DataFrame:
    """Each walked user's state on every day of ``first..last``, with ``prev_state``, ``valid_from`` and age.

    ``prior``: state at ``first - 1`` (``user_key``, ``state``, ``valid_from``) of users who have one;
    ``session_days``: distinct (``user_key``, ``session_date``) in the window.
    """
    before = first - timedelta(days=1)
    users = prior.where(F.col("state") != "churned").select("user_key").union(session_days.select("user_key"))
    grid = users.distinct().withColumn("day", F.explode(F.sequence(F.lit(first), F.lit(last))))
    df = (
        grid.join(session_days.withColumn("has_session", F.lit(True)).withColumnRenamed("session_date", "day"),
                  ["user_key", "day"], "left")
        .join(prior.withColumnRenamed("state", "prior_state").withColumnRenamed("valid_from", "prior_from"),
              "user_key", "left")
    )  # fmt: skip
    by_day = Window.partitionBy("user_key").orderBy("day")
    so_far = by_day.rowsBetween(Window.unboundedPreceding, 0)
    session_day = F.when(F.col("has_session"), F.col("day"))
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
        "prev_state", F.when(F.col("day") == F.lit(first), F.col("prior_state")).otherwise(F.lag("state").over(by_day))
    )
    changed = F.col("state").isNotNull() & ~F.coalesce(F.col("prev_state") == F.col("state"), F.lit(False))
    df = df.withColumn("changed", changed).withColumn("stay", F.sum(F.col("changed").cast("int")).over(so_far))
    valid_from = F.when(F.col("stay") == 0, F.col("prior_from")).otherwise(
        F.min(F.when(F.col("changed"), F.col("day"))).over(Window.partitionBy("user_key", "stay"))
    )
    df = df.withColumn("valid_from", valid_from).withColumn("age", F.datediff(F.col("day"), F.col("valid_from")))
    return df.select("user_key", "day", "state", "prev_state", "changed", "stay", "valid_from", "age", "prior_state", "prior_from")


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


def state_intervals(walked: DataFrame, first: date, last: date) -> DataFrame:
    """The walked users' ``user_states`` rows from the stay covering ``first - 1`` on."""
    present = walked.where(F.col("state").isNotNull())
    stays = present.groupBy("user_key", "stay", "state", "valid_from").agg(F.max("day").alias("until"))
    latest = F.max("stay").over(Window.partitionBy("user_key"))
    stays = stays.withColumn("valid_to", F.when(F.col("stay") < latest, F.col("until")))
    # A stay that ended at first - 1 is closed here (it continues into the window when ``stay`` is 0).
    closed = (
        walked.where((F.col("day") == F.lit(first)) & F.col("prior_state").isNotNull() & (F.col("stay") > 0))
        .select("user_key", F.col("prior_state").alias("state"), F.col("prior_from").alias("valid_from"),
                F.lit(first - timedelta(days=1)).alias("valid_to"))
    )  # fmt: skip
    return stays.select("user_key", "state", "valid_from", "valid_to").unionByName(closed)


def rebuild_snapshot(wh: Warehouse, first: date, last: date, settings: PipelineSettings) -> SnapshotChanges:
    """Make ``daily_snapshot`` and ``user_states`` exact for ``first..last``, given they are up to ``first - 1``."""
    first = _start_of_history(wh, first)
    changes = SnapshotChanges(first=first)
    if first is None or first > last:
        return changes
    before = first - timedelta(days=1)
    states = wh.read(USER_STATES)
    prior = states_on(states, before).persist()
    session_days = wh.read(SESSIONS, first, last).select("user_key", "session_date").distinct()
    walked = walk_states(prior, session_days, first, last, settings).persist()
    try:
        walked_users = walked.select("user_key").distinct()
        resting = prior.join(walked_users, "user_key", "left_anti")
        rows = snapshot_rows(walked, resting, first, last)
        wh.replace_partitions(DAILY_SNAPSHOT, rows, first, last)
        old = states.join(walked_users, "user_key", "left_semi").where(
            F.col("valid_to").isNull() | (F.col("valid_to") >= F.lit(before))
        )
        diff = diff_rows(state_intervals(walked, first, last), old, ["user_key", "valid_from"]).persist()
        changes.users_changed = diff.select("user_key").distinct().count()
        if changes.users_changed:
            wh.apply_diff(USER_STATES, diff, ["user_key", "valid_from"])
        diff.unpersist()
        changes.users_walked = walked_users.count()
        changes.days_rewritten = (last - first).days + 1
        latest = wh.read(DAILY_SNAPSHOT, last, last).collect()
        changes.on_hand_latest = {s: 0 for s in STATES} | {r.state: r.users_on_hand for r in latest}
        return changes
    finally:
        walked.unpersist()
        prior.unpersist()


def _start_of_history(wh: Warehouse, first: date) -> date | None:
    """``first``, or the first session day if there is no balance for ``first - 1`` to carry forward."""
    if wh.read(DAILY_SNAPSHOT, first - timedelta(days=1), first - timedelta(days=1)).limit(1).count():
        return first
    earliest = wh.read(SESSIONS).agg(F.min("session_date")).head()[0]
    return earliest if earliest is None or earliest < first else first
