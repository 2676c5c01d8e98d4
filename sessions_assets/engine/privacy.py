"""Forgetting a person: ids as keyed hashes, and which lines a set of hashes forgets.

A person's ids reach the pipeline, and are kept, only as HMAC-SHA-256 of the id under a key of the deployment
(``warehouse/journal.py`` keeps it): a plain SHA-256 of an email or a numeric id is reversed by hashing candidates,
a keyed one is not without the key. An id is hashed exactly as the pipeline reads it (``accept.parse``): a JSON
string holding a character that is not Unicode White_Space, taken as sent (no trimming, no case folding), its UTF-8
bytes hashed. Anything else (a number, a boolean, a blank string) is no id at all.

The contract's rule: a line is forgotten when its ``userId`` is a forgotten user's, or when it has no ``userId`` and
its ``anonymousId`` was ever linked to one (a line carrying both: accepted or rejected, any copy, before or after the
request). Lines carrying another ``userId`` are kept, even on a device a forgotten user shared.
"""

from __future__ import annotations

import hashlib
import hmac

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

# Unicode's White_Space characters (Java's ``(?U)\s``, what ``accept._NOT_BLANK`` excludes): a string of nothing
# else is blank, no id.
WHITE_SPACE = frozenset(
    "\u0009\u000a\u000b\u000c\u000d\u0020\u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_BLOCK = 64  # SHA-256's block size: HMAC pads its key to it
# What a key's id is computed from: stored with each request, so a key restored wrongly is noticed.
_KEY_CHECK = "sessions-assets forget key"
# The columns a hashed line carries beside its ids.
USER_HASH, ANONYMOUS_HASH = "_user_hash", "_anonymous_hash"


def normalised(user_id: str) -> str | None:
    """A ``userId`` as the pipeline reads it, or None when it is none (blank: only white space)."""
    return user_id if any(c not in WHITE_SPACE for c in user_id) else None


def keyed_hash(key: bytes, text: str) -> str:
    """HMAC-SHA-256 of ``text``'s UTF-8 bytes under ``key``, as 64 lower-case hex digits."""
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).hexdigest()


def key_id(key: bytes) -> str:
    """A short name of a key that says nothing of it: which key a request was hashed with."""
    return keyed_hash(key, _KEY_CHECK)[:16]


def is_hash(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def hashed(column: Column, key: bytes) -> Column:
    """``keyed_hash`` in Spark: HMAC from SHA-256 (``H(K^opad || H(K^ipad || m))``), null for a null id. The key's
    two pads are literals of the query: its plan holds them (not the key's file), as it holds the rows."""
    padded = (hashlib.sha256(key).digest() if len(key) > _BLOCK else key).ljust(_BLOCK, b"\0")
    inner, outer = bytes(b ^ 0x36 for b in padded), bytes(b ^ 0x5C for b in padded)
    digest = F.unhex(F.sha2(F.concat(F.lit(inner), F.encode(column, "UTF-8")), 256))
    return F.when(column.isNotNull(), F.sha2(F.concat(F.lit(outer), digest), 256))


def with_hashes(lines: DataFrame, key: bytes) -> DataFrame:
    """Lines (``user_id``, ``anonymous_id`` as parsed) with both ids hashed."""
    return lines.withColumns(
        {USER_HASH: hashed(F.col("user_id"), key), ANONYMOUS_HASH: hashed(F.col("anonymous_id"), key)}
    )


def mark(lines: DataFrame, users: DataFrame, devices: DataFrame, column: str = "forgotten") -> DataFrame:
    """``lines`` (with ``with_hashes``' columns) with ``column``: whether the line is forgotten by these hashes
    (``users``: a column ``hash`` of forgotten users' ids; ``devices``: a column ``hash`` of anonymous ids linked to
    one of them). Both sets are small: they are broadcast."""
    user = F.broadcast(users.select(F.col("hash").alias("_forgotten_user")).distinct())
    device = F.broadcast(devices.select(F.col("hash").alias("_forgotten_device")).distinct())
    joined = lines.join(user, F.col(USER_HASH) == F.col("_forgotten_user"), "left").join(
        device, F.col(ANONYMOUS_HASH) == F.col("_forgotten_device"), "left"
    )
    by_user = F.col("_forgotten_user").isNotNull()
    by_device = F.col("user_id").isNull() & F.col("_forgotten_device").isNotNull()
    return joined.withColumn(column, by_user | by_device).drop("_forgotten_user", "_forgotten_device")


def links(lines: DataFrame, users: DataFrame) -> DataFrame:
    """The anonymous ids that lines of forgotten users carry (``user_hash``, ``hash``): each is linked to its user
    and forgotten with them."""
    user = F.broadcast(users.select(F.col("hash").alias("_forgotten_user")).distinct())
    return (
        lines.where(F.col("anonymous_id").isNotNull())
        .join(user, F.col(USER_HASH) == F.col("_forgotten_user"), "left_semi")
        .select(F.col(USER_HASH).alias("user_hash"), F.col(ANONYMOUS_HASH).alias("hash"))
        .distinct()
    )


def name_by_session(rows: DataFrame, sessions: DataFrame) -> DataFrame:
    """Rows naming persons (``user_key``) named instead by one of each person's sessions (its first
    ``session_id``, null when it has none): what a check's sample may show."""
    first = sessions.groupBy("user_key").agg(F.min_by("session_id", "session_start").alias("a_session_id"))
    return rows.join(first, "user_key", "left").drop("user_key")
