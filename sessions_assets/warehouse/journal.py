"""The journal of requests to forget a person, and the key their ids are hashed with.

Every request is a row of ``forget_requests``: the keyed hashes of the users to forget and of every anonymous id
linked to them (``engine/privacy.py``), when it was taken, its state and what it removed from each table. Nothing
else records an erasure: a run that dies leaves the request in its state and the next run resumes it.

- ``pending``: taken; lines of the persons may still be stored. From the moment it commits, every ingest drops
  their lines (the suppression list is every row's hashes).
- ``removed``: their rows are gone from every table; the files that held them are not yet removed from disk.
- ``done``: purged.

Rows are ``request``s (a ``forget`` command or a ``forget_job`` run; its id is the run's), ``link``s (an ingest
found a forgotten user's line carrying an anonymous id not yet forgotten: its stored anonymous lines must go) and
``purge``s (an ingest committed beside a request: the files it superseded must go too).

The key is 32 random bytes, made at first use in ``forget.key`` beside the Dagster instance (``Settings.
forget_key_path``), readable by its owner only. Without it no later line can be matched to a forgotten person, so
it is backed up with the instance; each row names the key it was hashed with (``key_id``), and a different key is
refused.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pyspark.sql import DataFrame

from sessions_assets.engine import privacy
from sessions_assets.settings import Settings, SettingsError
from sessions_assets.warehouse.delta import DeltaLog, Merge, Warehouse
from sessions_assets.warehouse.storage import Storage
from sessions_assets.warehouse.tables import FORGET_REQUESTS, IDENTITIES

PENDING, REMOVED, DONE = "pending", "removed", "done"
REQUEST, LINK, PURGE = "request", "link", "purge"


class ForgetError(ValueError):
    """A request cannot be taken or matched (no key, another key, not a hash); the message says so in one line."""


def load_key(settings: Settings, create: bool = False) -> bytes:
    """The deployment's key; made (mode 0600) when missing and ``create``."""
    try:
        path = settings.forget_key_path
    except SettingsError as error:
        raise ForgetError(str(error)) from None
    if not path.exists():
        if not create:
            raise ForgetError(f"no forget key at {path}: restore it from its backup (forgotten ids cannot be matched)")
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # made by another process just now
            return load_key(settings)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
    if stat.S_IMODE(path.stat().st_mode) & 0o077:
        raise ForgetError(f"the forget key {path} is readable by others: chmod 600 {path}")
    text = path.read_text().strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) < 32:
        raise ForgetError(f"{path} holds no forget key (64 hex digits)")
    return key


def user_hashes(key: bytes, user_ids: Iterable[str]) -> list[str]:
    """Each ``userId`` hashed as the pipeline reads it; a blank one is refused."""
    found = []
    for user_id in user_ids:
        if privacy.normalised(user_id) is None:
            raise ForgetError(
                f"{user_id!r} is not a userId: the pipeline reads only a string with a non-blank character"
            )
        found.append(privacy.keyed_hash(key, user_id))
    return found


@dataclass(frozen=True)
class Request:
    request_id: str
    reason: str
    user_hashes: tuple[str, ...]
    anonymous_hashes: tuple[str, ...]
    key_id: str
    requested_at: datetime
    state: str
    removed: dict[str, int] = field(default_factory=dict)
    purged_at: datetime | None = None
    updated_at: datetime | None = None  # when it reached its state


def _request(row: dict) -> Request:
    removed = row.get("removed") or {}
    return Request(
        row["request_id"],
        row["reason"],
        tuple(row["user_hashes"] or ()),
        tuple(row["anonymous_hashes"] or ()),
        row["key_id"],
        row["requested_at"],
        row["state"],
        dict(removed.items() if isinstance(removed, dict) else removed),
        row.get("purged_at"),
        row.get("updated_at"),
    )


def read(wh: Warehouse) -> list[Request]:
    """Every request (one small query)."""
    if DeltaLog(wh.storage, FORGET_REQUESTS).version() is None:
        return []
    return sorted((_request(r.asDict()) for r in wh.read(FORGET_REQUESTS).collect()), key=lambda r: r.requested_at)


def read_without_spark(storage: Storage) -> list[Request]:
    """Every request, read with delta-rs (the sensors and ``status``)."""
    from sessions_assets.warehouse.ledger import small_table

    return sorted((_request(r) for r in small_table(storage, FORGET_REQUESTS)), key=lambda r: r.requested_at)


def version(storage: Storage) -> int | None:
    """The journal's version: what an ingest's suppression was read at (None: no request ever)."""
    return DeltaLog(storage, FORGET_REQUESTS).version()


@dataclass(frozen=True)
class Suppression:
    """What an ingest drops: the lines of these users, and those without a ``userId`` of these devices."""

    version: int | None
    users: frozenset[str] = frozenset()
    devices: frozenset[str] = frozenset()
    key_ids: frozenset[str] = frozenset()  # the keys the requests were hashed with: one

    def __bool__(self) -> bool:
        return bool(self.users)

    def frames(self, wh: Warehouse) -> tuple[DataFrame, DataFrame]:
        """The two sets as DataFrames (a column ``hash``), for ``privacy.mark``."""
        make = lambda hashes: wh.spark.createDataFrame([(h,) for h in sorted(hashes)], "hash string")  # noqa: E731
        return make(self.users), make(self.devices)


def suppression(wh: Warehouse) -> Suppression:
    """Every request's hashes, and the journal's version they were read at."""
    at = version(wh.storage)
    if at is None:
        return Suppression(None)
    rows = wh.read(FORGET_REQUESTS, at).select("user_hashes", "anonymous_hashes", "key_id").collect()
    users = frozenset(h for r in rows for h in r.user_hashes or ())
    devices = frozenset(h for r in rows for h in r.anonymous_hashes or ())
    return Suppression(at, users, devices, frozenset(r.key_id for r in rows if r.key_id))


def check_key(key: bytes, key_ids) -> None:
    """Refuse a key other than the one the stored requests were hashed with."""
    if set(key_ids) - {privacy.key_id(key)}:
        raise ForgetError(
            "the forget key is not the one the stored requests were hashed with: restore forget.key from its backup"
        )


def key_for(wh: Warehouse, settings: Settings) -> bytes:
    """The key, made at first use (when no request was ever stored), and checked against the stored requests."""
    requests = read(wh)
    key = load_key(settings, create=not requests)
    check_key(key, {r.key_id for r in requests})
    return key


def take(wh: Warehouse, key: bytes, hashes: list[str], request_id: str) -> Request:
    """Store a request to forget the users of ``hashes`` (``pending``), with every anonymous id linked to them that
    ``identities`` holds now (the erasure finds the others among the stored lines). Taking the same request again
    (a retried run) changes nothing."""
    bad = [h for h in hashes if not privacy.is_hash(h)]
    if bad or not hashes:
        raise ForgetError("a forget request takes keyed hashes: 64 lower-case hex digits each (forget --hash-only)")
    users = wh.spark.createDataFrame([(h,) for h in sorted(set(hashes))], "hash string")
    linked = privacy.links(privacy.with_hashes(wh.read(IDENTITIES).select("user_id", "anonymous_id"), key), users)
    devices = sorted({r.hash for r in linked.collect()})
    now = datetime.now(UTC)
    request = Request(
        request_id, REQUEST, tuple(sorted(set(hashes))), tuple(devices), privacy.key_id(key), now, PENDING
    )
    _insert(wh, [request])
    return request


def add(wh: Warehouse, key: bytes, reason: str, by_user: dict[str, set[str]] | None = None) -> None:
    """Store ``link`` rows (a forgotten user's newly seen anonymous ids: ``pending``) or a ``purge`` (``removed``)."""
    now, kid = datetime.now(UTC), privacy.key_id(key)
    if reason == PURGE:
        rows = [Request(f"purge-{secrets.token_hex(8)}", PURGE, (), (), kid, now, REMOVED)]
    else:
        rows = [
            Request(f"link-{secrets.token_hex(8)}", LINK, (user,), tuple(sorted(devices)), kid, now, PENDING)
            for user, devices in sorted((by_user or {}).items())
        ]
    _insert(wh, rows)


def _insert(wh: Warehouse, requests: list[Request]) -> None:
    rows = wh.spark.createDataFrame(
        [
            (
                r.request_id,
                r.reason,
                list(r.user_hashes),
                list(r.anonymous_hashes),
                r.key_id,
                r.requested_at,
                r.state,
                r.requested_at,
                r.removed,
                None,
            )
            for r in requests
        ],
        FORGET_REQUESTS.schema,
    )
    wh.merge(
        FORGET_REQUESTS, rows, Merge("t.request_id = s.request_id").when_not_matched_insert(FORGET_REQUESTS.columns)
    )


def update(wh: Warehouse, changes: list[Request]) -> None:
    """Store the requests' new states, anonymous hashes, counts and purge times, in one commit."""
    now = datetime.now(UTC)
    rows = wh.spark.createDataFrame(
        [(r.request_id, list(r.anonymous_hashes), r.state, now, r.removed, r.purged_at) for r in changes],
        "request_id string, anonymous_hashes array<string>, state string, updated_at timestamp, "
        "removed map<string,long>, purged_at timestamp",
    )
    columns = ["anonymous_hashes", "state", "updated_at", "removed", "purged_at"]
    wh.merge(FORGET_REQUESTS, rows, Merge("t.request_id = s.request_id").when_matched_update(columns))
