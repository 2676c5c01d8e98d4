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

from dataclasses import dataclass
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


def transitions(session_days: DataFrame, settings: Settings) -> DataFrame:
    """Per (``day``, ``state``): ``TOTALS`` over the users of ``session_days`` (``user_key``, ``day``: a day
    with a session). With a ``weight`` column, each (user, weight) is a separate timeline counted that many
    times: +1 and -1 timelines of the same users give the difference their change makes, in one pass."""
    weight = F.col("weight") if "weight" in session_days.columns else F.lit(1)
    days = session_days.select("user_key", weight.alias("weight"), _n(F.col("day")).alias("today")).distinct()
    timeline = ("user_key", "weight")
    by_user = Window.partitionBy(*timeline).orderBy("today")
    days = days.withColumns(
        {
            "previous": F.lag("today").over(by_user),  # the user's session day before this one
            "next": F.lead("today").over(by_user),  # and after it
            "first": F.min("today").over(Window.partitionBy(*timeline)),
        }
    )
    # A run: consecutive session days. Its first day tells when an active stay began.
    after_a_break = F.col("previous").isNull() | (F.col("today") - F.col("previous") > 1)
    days = days.withColumn("run", F.sum(after_a_break.cast("int")).over(by_user))
    days = days.withColumn("run_start", F.min("today").over(Window.partitionBy(*timeline, "run")))
    columns = _transition_columns(settings)
    moves = F.array(*[_move(t, columns) for t in TRANSITIONS])
    moves = days.select("weight", F.explode(moves).alias("m")).where(F.col("m").isNotNull()).select("weight", "m.*")
    entering, leaving = F.col("sign") == 1, F.col("sign") == -1
    count = lambda when, value=F.lit(1): F.coalesce(F.sum(F.when(when, value * F.col("weight"))), F.lit(0))  # noqa: E731, B008
    totals = moves.groupBy(F.date_add(F.lit(EPOCH), F.col("day")).alias("day"), "state").agg(
        count(entering).cast("long").alias("entered"),
        count(leaving).cast("long").alias("exited"),
        count(leaving, F.col("began")).cast("long").alias("began_exited"),
    )
    return totals.where(" OR ".join(f"{c} != 0" for c in TOTALS))


@dataclass(frozen=True)
class Transition:
    """A user entering (``sign`` 1) or leaving (-1) ``state`` on ``day``, for a session day where ``when``
    holds; ``began`` is the day the stay that is left began (for an entry, ``day`` itself). Each field names a
    column of ``_transition_columns``."""

    name: str
    day: str
    state: str
    sign: int
    began: str
    when: str


ENTERS, LEAVES = 1, -1
# What one session day ("today") sets off, in the user's timeline of session days.
TRANSITIONS = (
    Transition("first session: enters new", "today", "new", ENTERS, "today", "is_first"),
    Transition("second day in a row: leaves new", "today", "new", LEAVES, "first", "new_to_active"),
    Transition("back, or on after the first day: enters active", "today", "active", ENTERS, "today", "starts_active"),
    Transition("back after idle days: leaves the idle state", "today", "idle_state", LEAVES, "idle_began", "is_back"),
    Transition("first day, then idle: leaves new", "tomorrow", "new", LEAVES, "first", "first_then_idle"),
    Transition("active, then idle: leaves active", "tomorrow", "active", LEAVES, "active_from", "active_then_idle"),
    Transition("then idle: enters lapsing", "tomorrow", "lapsing", ENTERS, "tomorrow", "ends_run"),
    Transition("idle past lapsing: leaves lapsing", "dormant_from", "lapsing", LEAVES, "tomorrow", "quiet_to_dormant"),
    Transition(
        "idle past lapsing: enters dormant", "dormant_from", "dormant", ENTERS, "dormant_from", "quiet_to_dormant"
    ),
    Transition(
        "idle past dormant: leaves dormant", "churned_from", "dormant", LEAVES, "dormant_from", "quiet_to_churned"
    ),
    Transition(
        "idle past dormant: enters churned", "churned_from", "churned", ENTERS, "churned_from", "quiet_to_churned"
    ),
)


def _transition_columns(settings: Settings) -> dict[str, Column]:
    """The days, states and conditions the transitions are written in, from a row of session days
    (``today``, ``previous``, ``next``, ``first``, ``run_start``; days as numbers)."""
    lapsing, dormant = settings.lapsing_days, settings.dormant_days
    today, previous, next_, first = F.col("today"), F.col("previous"), F.col("next"), F.col("first")
    idle_before = today - previous - 1  # idle days ending yesterday
    ends_run = next_.isNull() | (next_ > today + 1)  # tomorrow is idle

    def quiet_until(k: int) -> Column:  # still idle on day today + k
        return ends_run & (next_.isNull() | (next_ > today + k))

    return {
        "today": today,
        "tomorrow": today + 1,
        "first": first,
        "dormant_from": today + lapsing + 1,
        "churned_from": today + dormant + 1,
        # The active stay holding today began at its run's start, or the day after a first day that opened it.
        "active_from": F.when(F.col("run_start") == first, first + 1).otherwise(F.col("run_start")),
        "idle_state": F.when(idle_before <= lapsing, "lapsing")
        .when(idle_before <= dormant, "dormant")
        .otherwise("churned"),
        "idle_began": F.when(idle_before <= lapsing, previous + 1)
        .when(idle_before <= dormant, previous + lapsing + 1)
        .otherwise(previous + dormant + 1),
        "is_first": previous.isNull(),
        "new_to_active": (previous == today - 1) & (previous == first),
        "starts_active": previous.isNotNull() & ((previous < today - 1) | (previous == first)),
        "is_back": previous < today - 1,
        "first_then_idle": ends_run & (today == first),
        "active_then_idle": ends_run & (today != first),
        "ends_run": ends_run,
        "quiet_to_dormant": quiet_until(lapsing + 1),
        "quiet_to_churned": quiet_until(dormant + 1),
    }


def _move(t: Transition, columns: dict[str, Column]) -> Column:
    """The transition's record, or null where its condition does not hold."""
    state = columns[t.state] if t.state in columns else F.lit(t.state)
    record = F.struct(
        columns[t.day].alias("day"), state.alias("state"), F.lit(t.sign).alias("sign"), columns[t.began].alias("began")
    )
    return F.when(columns[t.when], record)


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
