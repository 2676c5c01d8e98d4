"""Every tunable of the pipeline, in one place, with the data contract's defaults.

``Settings`` is the one model, and a value: the engine and the warehouse take one, the Dagster resource
(``graph/resources.py``) *is* one, so the UI shows these fields, their descriptions and the values in force, and
the definitions of one instance are built from one (``graph.build``). The command line and this project's own
instance read them from ``SESSIONS_<FIELD>`` variables (``Settings.from_env``); a ``SessionsComponent`` takes
them as attributes, a missing one from its variable. The README's configuration table lists them.

It imports nothing of the project: the rule table and the data root's storage are opened where they are used.
"""

from __future__ import annotations

import functools
import os
import re
import zoneinfo
from datetime import date, timedelta
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from sessions_assets.warehouse.layouts import CHOICES as LAYOUTS  # the landing layouts by name, and auto

ENV_PREFIX = "SESSIONS_"
# What an instance's key prefix may be (``graph/names.py``): a name, as Dagster's names are.
KEY_PREFIX = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


@functools.cache
def _zone_names() -> frozenset[str]:
    """The zone names Python's time zone database holds (its aliases, ``US/Pacific``, and ``Etc/GMT+5`` included)."""
    return frozenset(zoneinfo.available_timezones() | {"UTC"})


class SettingsError(ValueError):
    """Settings a user gave are not valid. ``problems``: (field, what is wrong, whether the value came from its
    ``SESSIONS_<FIELD>`` variable); the message names each variable, or field, and its rule, in one line."""

    def __init__(self, problems: list[tuple[str, str, bool]]):
        self.problems = problems
        super().__init__("; ".join(f"{variable(f) if env else f}: {m}" for f, m, env in problems))


def variable(field: str) -> str:
    """The environment variable of a field: ``SESSIONS_<FIELD>``."""
    return ENV_PREFIX + field.upper()


class Settings(BaseModel):
    """Where the data lives and the acceptance, session and lifecycle rules."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    data_root: str = Field("data", description="$ROOT: a local path or an s3a://, abfss:// or gs:// URI.")
    landing_layout: str = Field(
        "auto",
        description="How landing/ is laid out: received_date=YYYY-MM-DD/ folders, Segment's S3 destination "
        "(segment-logs/<source-id>/<day in ms>/), or auto: whichever is there (both at once is refused).",
    )
    landing_recent_days: int = Field(
        3,
        ge=0,
        description="The landing sensor lists the files of this many latest received days at every tick (with new "
        "folders and days still due); the others' at its full listing.",
    )
    landing_full_listing_minutes: int = Field(
        60,
        ge=0,
        description="How often the landing sensor lists every received day's files (0: at every tick): a file added "
        "to an older day's folder waits for it.",
    )
    start_date: str = Field(
        "2020-01-01",
        description="The first partition day (YYYY-MM-DD, a local day of time_zone, read when the definitions load); "
        "earlier events are too_late.",
    )
    time_zone: str = Field(
        "UTC",
        description="The business's time zone (an IANA name, e.g. America/Los_Angeles): event, session and snapshot "
        "days, and the partitions of events, sessions, users and daily_snapshot, are its local days; received days "
        "stay the collector's (UTC) days.",
    )
    max_future_skew_minutes: int = Field(60, description="A timestamp more than this after receivedAt is rejected.")
    max_lateness_days: int = Field(400, description="A timestamp more than this before receivedAt is rejected.")
    session_gap_minutes: int = Field(
        30, gt=0, description="A longer gap between a person's events starts a new session."
    )
    max_session_hours: int = Field(
        24, gt=0, description="No session lasts longer: the first event past it starts the next."
    )
    lapsing_days: int = Field(7, ge=1, description="Idle days (1..this) a user is lapsing.")
    dormant_days: int = Field(
        30,
        validate_default=True,  # checked against lapsing_days when only that one is given
        description="Idle days up to which a user is dormant (above lapsing_days); churned after.",
    )
    stitch_identities: bool = Field(
        True,
        description="An anonymousId belongs to the userId of its latest link; off: user_key is userId, else anonymousId.",
    )

    own_domains: str = Field(
        "",
        description="Comma-separated domains of the site itself: a referrer on one (or under one) is internal "
        "navigation, no referrer, for the channel group.",
    )
    conversion_events: str = Field(
        "Order Completed,Signed Up",
        description="Comma-separated track event names that count as conversions (and carry revenue).",
    )
    channel_rules: str = Field(
        "",
        description="A channel rule table (JSON) to use instead of the shipped one, "
        "sessions_assets/engine/channel_rules.json: copy it, edit it, point this at the copy.",
    )
    forget_key_file: str = Field(
        "",
        description="The deployment's key for hashing the ids of persons to forget (made at first use, readable by "
        "its owner only; back it up): empty means forget.key in $DAGSTER_HOME, else in <data root>/dagster_home.",
    )
    forget_purge_hours: int = Field(
        0,
        ge=0,
        le=24,
        description="A forgotten person's rows leave the tables at once; the files that held them are removed from "
        "disk in the same run (0), or by the first run this many hours after the oldest request waiting (at most 24).",
    )

    @field_validator("landing_layout")
    @classmethod
    def _a_layout(cls, value: str) -> str:
        if value not in LAYOUTS:
            raise ValueError(f"takes {', '.join(LAYOUTS)}")
        return value

    @field_validator("start_date")
    @classmethod
    def _a_day(cls, value: str) -> str:
        try:
            date.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a day (YYYY-MM-DD)") from None
        return value

    @field_validator("time_zone")
    @classmethod
    def _a_zone(cls, value: str) -> str:
        if value not in _zone_names():
            raise ValueError(
                f"{value!r} is not an IANA time zone name (such as UTC, Europe/Berlin, America/Los_Angeles)"
            )
        return value

    @field_validator("dormant_days")
    @classmethod
    def _after_lapsing(cls, value: int, info: ValidationInfo) -> int:
        lapsing = info.data.get("lapsing_days")
        if lapsing is not None and value <= lapsing:
            raise ValueError(f"must be above lapsing_days ({lapsing})")
        return value

    @classmethod
    def from_env(cls, **overrides) -> Settings:
        """The settings from ``SESSIONS_<FIELD>`` variables (``SESSIONS_DATA_ROOT``, ...), then ``overrides``."""
        given = {name: os.environ[variable(name)] for name in cls.model_fields if variable(name) in os.environ}
        try:
            return cls(**{**given, **overrides})
        except ValidationError as error:
            problems = []
            for e in error.errors():
                field = str(e["loc"][0]) if e["loc"] else "settings"
                problems.append(
                    (field, e["msg"].removeprefix("Value error, "), field in given and field not in overrides)
                )
            raise SettingsError(problems) from None

    def instance_home(self) -> Path:
        """``$DAGSTER_HOME``, or ``<data root>/dagster_home`` for a local data root: where the command line keeps
        the Dagster instance, and the forget key lives beside it."""
        home = os.environ.get("DAGSTER_HOME")
        if not home:
            root = self.data_root
            if "://" in root and not root.startswith("file:"):
                said = f"{root} is not a local path: set DAGSTER_HOME to where Dagster keeps its runs"
                raise SettingsError([("data_root", said, False)])
            home = str(Path(root.removeprefix("file:")) / "dagster_home")
        return Path(home)

    @property
    def forget_key_path(self) -> Path:
        return Path(self.forget_key_file) if self.forget_key_file else self.instance_home() / "forget.key"

    @property
    def own_domain_list(self) -> tuple[str, ...]:
        return tuple(d.strip().lower().removeprefix("www.") for d in self.own_domains.split(",") if d.strip())

    @property
    def conversion_event_list(self) -> tuple[str, ...]:
        return tuple(e.strip() for e in self.conversion_events.split(",") if e.strip())

    @property
    def first_day(self) -> date:
        return date.fromisoformat(self.start_date)

    @property
    def zone(self) -> zoneinfo.ZoneInfo:
        return zoneinfo.ZoneInfo(self.time_zone)

    @property
    def session_gap(self) -> timedelta:
        return timedelta(minutes=self.session_gap_minutes)

    @property
    def max_session(self) -> timedelta:
        return timedelta(hours=self.max_session_hours)
