"""The daily accumulating snapshot, from each user's session days, as sums that late data can correct.

A user's state on any day follows from their sorted session days alone: ``new`` on the first, ``active`` on
the others, then ``lapsing``, ``dormant`` and ``churned`` as the idle days pass. So each user contributes a
handful of *transitions* (day, state, entered or exited, and the day the stay began), all known as soon
as their session days are, including those still in the future. Summed over users per (day, state), the
transitions are additive: a late session changes one user's transitions, and the totals change by the
difference. The snapshot is their running sum up to the horizon: on hand = entered - exited so far, and
the days in state from the sum of the days each stay began.
"""

from __future__ import annotations

from datetime import date

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from sessions_assets.settings import Settings

STATES = ("new", "active", "lapsing", "dormant", "churned")
# Per (day, state): users entering, users exiting, and the sum of the days the exiting users' stays began
# (an entering user's stay begins that day, so their sum is entered x day).
TOTALS = ("entered", "exited", "began_exited")
EPOCH = date(1970, 1, 1)


def _n(day: Column) -> Column:
    """A day as a number (days since 1970-01-01), for sums of days."""
    return F.datediff(day, F.lit(EPOCH))


def _move(day: Column, state: str | Column, sign: int, began: Column, when: Column) -> Column:
    """A transition record (entering when ``sign`` is 1, exiting when -1), or null where ``when`` does not hold."""
    state = F.lit(state) if isinstance(state, str) else state
    return F.when(
        when, F.struct(day.alias("day"), state.alias("state"), F.lit(sign).alias("sign"), began.alias("began"))
    )


def transitions(session_days: DataFrame, settings: Settings) -> DataFrame:
    """Per (``day``, ``state``): ``TOTALS`` over the users of ``session_days`` (``user_key``, ``day``: a day
    with a session). With a ``weight`` column, each (user, weight) is a separate timeline counted that many
    times: +1 and -1 timelines of the same users give the difference their change makes, in one pass."""
    lapsing, dormant = settings.lapsing_days, settings.dormant_days
    weight = F.col("weight") if "weight" in session_days.columns else F.lit(1)
    days = session_days.select("user_key", weight.alias("weight"), _n(F.col("day")).alias("s")).distinct()
    timeline = ("user_key", "weight")
    by_user = Window.partitionBy(*timeline).orderBy("s")
    days = days.withColumns({
        "p": F.lag("s").over(by_user),
        "n": F.lead("s").over(by_user),
        "first": F.min("s").over(Window.partitionBy(*timeline)),
    })  # fmt: skip
    days = days.withColumn(
        "run", F.sum((F.col("p").isNull() | (F.col("s") - F.col("p") > 1)).cast("int")).over(by_user)
    )
    days = days.withColumn("run_start", F.min("s").over(Window.partitionBy(*timeline, "run")))
    s, p, n, first = F.col("s"), F.col("p"), F.col("n"), F.col("first")
    # The active stay holding day s began at its run's start, or the day after a first day that opened it.
    active_from = F.when(F.col("run_start") == first, first + 1).otherwise(F.col("run_start"))
    idle_before = s - p - 1  # idle days ending the day before s
    idle_state = F.when(idle_before <= lapsing, "lapsing").when(idle_before <= dormant, "dormant").otherwise("churned")
    idle_began = (
        F.when(idle_before <= lapsing, p + 1).when(idle_before <= dormant, p + lapsing + 1).otherwise(p + dormant + 1)
    )
    ends_run = n.isNull() | (n > s + 1)
    quiet_until = lambda k: ends_run & (n.isNull() | (n > s + k))  # noqa: E731 - still idle on day s + k
    is_first = s == first
    records = F.array(
        _move(s, "new", 1, s, p.isNull()),
        _move(s, "new", -1, first, (p == s - 1) & (p == first)),
        _move(s, "active", 1, s, p.isNotNull() & ((p < s - 1) | (p == first))),
        _move(s, idle_state, -1, idle_began, p < s - 1),
        _move(s + 1, "new", -1, first, ends_run & is_first),
        _move(s + 1, "active", -1, active_from, ends_run & ~is_first),
        _move(s + 1, "lapsing", 1, s + 1, ends_run),
        _move(s + lapsing + 1, "lapsing", -1, s + 1, quiet_until(lapsing + 1)),
        _move(s + lapsing + 1, "dormant", 1, s + lapsing + 1, quiet_until(lapsing + 1)),
        _move(s + dormant + 1, "dormant", -1, s + lapsing + 1, quiet_until(dormant + 1)),
        _move(s + dormant + 1, "churned", 1, s + dormant + 1, quiet_until(dormant + 1)),
    )
    moves = days.select("weight", F.explode(records).alias("m")).where(F.col("m").isNotNull()).select("weight", "m.*")
    entering, leaving = F.col("sign") == 1, F.col("sign") == -1
    count = lambda when, value=F.lit(1): F.coalesce(F.sum(F.when(when, value * F.col("weight"))), F.lit(0))  # noqa: E731, B008
    totals = moves.groupBy(F.date_add(F.lit(EPOCH), F.col("day")).alias("day"), "state").agg(
        count(entering).cast("long").alias("entered"),
        count(leaving).cast("long").alias("exited"),
        count(leaving, F.col("began")).cast("long").alias("began_exited"),
    )
    return totals.where(" OR ".join(f"{c} != 0" for c in TOTALS))


def combined(*totals: DataFrame) -> DataFrame:
    """Transition totals summed per (day, state); rows that cancel out drop out."""
    union = totals[0]
    for more in totals[1:]:
        union = union.unionByName(more)
    summed = union.groupBy("day", "state").agg(*[F.sum(c).cast("long").alias(c) for c in TOTALS])
    return summed.where(" OR ".join(f"{c} != 0" for c in TOTALS))


def snapshot(totals: DataFrame, horizon: date) -> DataFrame:
    """The ``daily_snapshot`` rows up to ``horizon`` from transition totals (``day``, ``state``, ``TOTALS``)."""
    first = totals.agg(F.min("day").alias("first"))
    # No days when the first transition is after the horizon (a descending sequence would give some).
    days = first.where(F.col("first") <= F.lit(horizon)).select(
        F.explode(F.sequence("first", F.lit(horizon))).alias("day")
    )
    calendar = days.crossJoin(totals.sparkSession.createDataFrame([(s,) for s in STATES], "state string"))
    so_far = Window.partitionBy("state").orderBy("day").rowsBetween(Window.unboundedPreceding, 0)
    df = calendar.join(totals, ["day", "state"], "left").fillna(0, list(TOTALS))
    on_hand = F.sum(F.col("entered") - F.col("exited")).over(so_far)
    began = F.sum(F.col("entered") * _n(F.col("day")) - F.col("began_exited")).over(so_far)
    df = df.withColumn("on_hand", on_hand).withColumn("days", F.col("on_hand") * _n(F.col("day")) - began)
    # Rounded half up to 4 decimals in integers, as exactly as the oracle's fractions.
    average = F.when(
        F.col("on_hand") > 0, F.expr("(days * 20000 + on_hand) div (on_hand * 2)") / F.lit(10000.0)
    ).otherwise(F.lit(0.0))
    return df.select(
        F.col("day").alias("snapshot_date"),
        "state",
        F.col("on_hand").cast("long").alias("users_on_hand"),
        F.col("entered").cast("long").alias("users_entered"),
        F.col("exited").cast("long").alias("users_exited"),
        average.alias("avg_days_in_state"),
        F.col("days").cast("long").alias("sum_days_in_state"),
    ).where("users_on_hand > 0 OR users_entered > 0 OR users_exited > 0")
