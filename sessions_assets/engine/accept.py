"""Landing-zone lines -> parsed events with one verdict each (the contract's "Accepting events").

Spark parses (``from_json`` into ``VARIANT``), so a field of the wrong JSON type (``"userId": {}``,
``"timestamp": 12``) is seen as what it is rather than coerced to a string. Jackson ignores whatever
follows the first JSON value on a line, so each line is parsed as the first element of an array whose
second element is the line's own MD5: trailing content (``{}{}``, ``{"a":1}}``) breaks the array, and
no line can carry its own digest. Strictly JSON: no ``NaN``, no single quotes, no comments.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sessions_assets.engine import days
from sessions_assets.settings import Settings

_JSON_OPTIONS = {"mode": "PERMISSIVE", "allowNonNumericNumbers": "false", "allowSingleQuotes": "false"}

# ISO-8601: date 'T' hh:mm[:ss[.fraction]] then Z, +hh:mm, +hhmm (or -), or nothing (UTC). ASCII digits;
# \z, not $, which in Java also matches before a final line break.
ISO_8601 = (
    r"^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]+))?)?"
    r"(Z|([+-])([0-9]{2}):?([0-9]{2}))?\z"
)
# Present = holds a character that is not Unicode White_Space (Java's \s under (?U)).
_NOT_BLANK = r"(?U)\S"

# Where the session attributes come from in a Segment message (the first path that holds a value wins).
ATTRIBUTES = {
    "page_path": ("$.context.page.path", "$.properties.path"),
    "referrer": ("$.context.page.referrer", "$.properties.referrer"),
    "utm_source": ("$.context.campaign.source",),
    "utm_medium": ("$.context.campaign.medium",),
    "utm_campaign": ("$.context.campaign.name",),
    "user_agent": ("$.context.userAgent",),
    "device_type": ("$.context.device.type",),
}


# JSON numbers as the parser types them (``1.5e3`` is a double, ``19.99`` a decimal).
_NUMBER = r"^(TINYINT|SMALLINT|INT|BIGINT|FLOAT|DOUBLE|DECIMAL\(.*\))$"
REVENUE = "$.properties.revenue"


def _revenue(value: Column) -> Column:
    """``properties.revenue`` when it is a JSON number, rounded half up to 6 places (null if it does not fit)."""
    number = F.schema_of_variant(value).rlike(_NUMBER)
    return F.when(number, F.try_variant_get(value, "$", "decimal(38,6)"))


def _string(value: Column) -> Column:
    """A JSON value if it is a string, else null."""
    return F.when(F.schema_of_variant(value) == "STRING", F.variant_get(value, "$", "string"))


def _present(text: Column) -> Column:
    """A string with something in it, else null (blank counts as missing)."""
    return F.when(text.rlike(_NOT_BLANK), text)


def parse_timestamp(raw: Column) -> Column:
    """An ISO-8601 string as a UTC timestamp (fractions cut to microseconds), null when it is not one."""
    text = lambda n: F.regexp_extract(raw, ISO_8601, n)  # noqa: E731 - "" where the group is absent
    part = lambda n: text(n).try_cast("int")  # noqa: E731
    matched = raw.rlike(ISO_8601)
    fraction = F.rpad(F.substring(text(7), 1, 6), 6, "0").try_cast("int")
    second = F.coalesce(part(6), F.lit(0))
    seconds = (second + fraction / F.lit(1_000_000)).cast("decimal(8,6)")
    local = F.try_make_timestamp(part(1), part(2), part(3), part(4), part(5), seconds, F.lit("UTC"))
    sign = F.when(text(9) == "-", F.lit(-1)).otherwise(F.lit(1))
    offset_hours, offset_minutes = F.coalesce(part(10), F.lit(0)), F.coalesce(part(11), F.lit(0))
    utc = local - F.make_dt_interval(F.lit(0), sign * offset_hours, sign * offset_minutes)
    valid = (
        matched
        & (second < 60)
        & (offset_hours <= 23)
        & (offset_minutes <= 59)
        & (part(1) >= 1)
        & utc.between(F.lit("0001-01-01 00:00:00"), F.lit("9999-12-31 23:59:59.999999"))
    )
    return F.when(valid, utc)


# The fields read from a message, by where they are in it (several paths: the first that holds a string).
FIELDS = {
    "message_id": ("$.messageId",),
    "type": ("$.type",),
    "event": ("$.event",),
    "user_id": ("$.userId",),
    "anonymous_id": ("$.anonymousId",),
    "timestamp": ("$.timestamp",),
    "received_at": ("$.receivedAt",),
    **ATTRIBUTES,
}
# Taken as sent (no blank check): the names analysts see; and the two parsed as ISO-8601.
AS_SENT, TIMESTAMPS = ("type", "event"), ("timestamp", "received_at")


def parse(lines: DataFrame) -> DataFrame:
    """``payload``, ``source_file`` -> the fields the pipeline reads (nulls where absent or mistyped).

    In stages, each reading the previous one's columns, so that the line is parsed once and each field
    looked up once (Spark would otherwise repeat an expression each time a later one names it)."""
    digest = F.md5("payload")
    wrapped = F.from_json(
        F.concat(F.lit("["), F.col("payload"), F.lit(',"'), digest, F.lit('"]')),
        T.ArrayType(T.VariantType()),
        _JSON_OPTIONS,
    )
    parsed = lines.select("payload", "source_file", wrapped.alias("_json"), digest.alias("_md5"))
    is_object = (F.size("_json") == 2) & (F.variant_get(F.col("_json")[1], "$", "string") == F.col("_md5"))
    is_object = F.coalesce(is_object & F.schema_of_variant(F.col("_json")[0]).startswith("OBJECT"), F.lit(False))
    judged = parsed.select("payload", "source_file", is_object.alias("_object"), F.col("_json")[0].alias("_first"))
    # A line that is not one JSON object names no field: not even its ids (it is attributable to no one).
    first = F.when(F.col("_object"), F.col("_first"))
    values = judged.select("payload", "source_file", (~F.col("_object")).alias("malformed"), first.alias("_m"))
    values = values.select(
        "payload",
        "source_file",
        "malformed",
        *[
            F.variant_get("_m", path, "variant").alias(f"{name}_{n}")
            for name, paths in FIELDS.items()
            for n, path in enumerate(paths)
        ],
        F.variant_get("_m", REVENUE, "variant").alias("_revenue"),
    )
    # An id sent as a JSON integer is its decimal text, as written: read from the line again, as text, only when one is.
    integers = F.when(F.lit(False), F.lit(None))
    for name in IDS:
        integers = integers.when(_integer(F.col(f"{name}_0")), F.from_json("payload", _ID_TEXT, _JSON_OPTIONS))
    values = values.withColumn("_ids", integers)
    strings = values.select(
        "payload",
        "source_file",
        "malformed",
        *[
            F.coalesce(
                *[
                    _string(F.col(f"{name}_{n}")) if name in AS_SENT else _present(_string(F.col(f"{name}_{n}")))
                    for n in range(len(paths))
                ],
                *([_integer_text(F.col(f"{name}_0"), F.col("_ids")[IDS[name]])] if name in IDS else []),
            ).alias(name)
            for name, paths in FIELDS.items()
        ],
        _revenue(F.col("_revenue")).alias("revenue"),
    )
    return strings.withColumns({name: parse_timestamp(F.col(name)) for name in TIMESTAMPS})


# The ids, by the name their field has in a message: each may be sent as a JSON integer.
IDS = {"message_id": "messageId", "user_id": "userId", "anonymous_id": "anonymousId"}
_ID_TEXT = T.StructType([T.StructField(field, T.StringType()) for field in IDS.values()])
# A JSON integer as Spark's JSON reader writes a number back as text: no fraction or exponent, at most 38 digits (a
# number with either is written back with a point or an E: 42.0, 4.2E1).
_INTEGER_TEXT = r"^-?[0-9]{1,38}\z"


def _integer(value: Column) -> Column:
    """Whether a JSON value is a number without a fractional part (``42``, but also ``42.0``, which ``VARIANT``
    keeps as ``DECIMAL(2,0)``: the text tells them apart)."""
    return F.coalesce(
        F.schema_of_variant(value).rlike(r"^(TINYINT|SMALLINT|INT|BIGINT|DECIMAL\([0-9]+,0\))$"), F.lit(False)
    )


def _integer_text(value: Column, text: Column) -> Column:
    """An id sent as a JSON integer: its decimal text (``42`` is ``"42"``), else null."""
    return F.when(_integer(value) & text.rlike(_INTEGER_TEXT), text)


def classify(parsed: DataFrame, settings: Settings) -> DataFrame:
    """Add ``user_key``, ``event_date`` and ``reason`` (null: accepted)."""
    df = parsed.withColumn("user_key", F.coalesce("user_id", "anonymous_id"))
    skew = F.make_dt_interval(F.lit(0), F.lit(0), F.lit(settings.max_future_skew_minutes))
    lateness = F.make_dt_interval(F.lit(settings.max_lateness_days))
    # The first instant of the local start day (a lateness and a skew are durations, whatever the zone).
    start = days.instant(days.day_start(settings.first_day, settings.time_zone))
    reason = (
        F.when(F.col("malformed"), "malformed_json")
        .when(F.col("message_id").isNull(), "missing_message_id")
        .when(F.col("user_key").isNull(), "missing_user")
        .when(F.col("timestamp").isNull() | F.col("received_at").isNull(), "bad_timestamp")
        .when(F.col("timestamp") > F.col("received_at") + skew, "future_timestamp")
        .when((F.col("timestamp") < F.col("received_at") - lateness) | (F.col("timestamp") < start), "too_late")
    )
    return df.withColumn("reason", reason).withColumn(
        "event_date", days.local_date(F.col("timestamp"), settings.time_zone)
    )
