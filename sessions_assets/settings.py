"""Every tunable of the pipeline, in one place, with the data contract's defaults.

``Settings`` is the one model: the engine and the warehouse take one, and the Dagster resource
(``defs/resources.py``) *is* one, so the UI shows these fields, their descriptions and the values in force.
A deployment sets them with ``SESSIONS_<FIELD>`` variables, read once when the definitions load
(``Settings.from_env``); the README's configuration table lists them.
"""

from __future__ import annotations

import os
from datetime import date, timedelta
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sessions_assets.warehouse.layouts import CHOICES

ENV_PREFIX = "SESSIONS_"


class SettingsError(ValueError):
    """A setting a user gave is not valid; the message names the variable and the rule."""


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
        description="The first partition day (read when the definitions load); earlier events are too_late.",
    )
    max_future_skew_minutes: int = Field(60, description="A timestamp more than this after receivedAt is rejected.")
    max_lateness_days: int = Field(400, description="A timestamp more than this before receivedAt is rejected.")
    session_gap_minutes: int = Field(30, description="A longer gap between a person's events starts a new session.")
    max_session_hours: int = Field(24, description="No session lasts longer: the first event past it starts the next.")
    lapsing_days: int = Field(7, description="Idle days (1..this) a user is lapsing.")
    dormant_days: int = Field(30, description="Idle days up to which a user is dormant; churned after.")
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

    @model_validator(mode="after")
    def _rules_hold(self) -> Settings:
        if not 1 <= self.lapsing_days < self.dormant_days:
            raise ValueError("lapsing_days must be at least 1 and below dormant_days")
        if self.session_gap_minutes <= 0 or self.max_session_hours <= 0:
            raise ValueError("session_gap_minutes and max_session_hours must be positive")
        date.fromisoformat(self.start_date)
        if self.landing_layout not in CHOICES:
            raise ValueError(f"landing_layout takes {', '.join(CHOICES)}")
        _ = self.rules  # a rule table that cannot be applied stops the definitions, in one line
        return self

    @classmethod
    def from_env(cls, **overrides) -> Settings:
        """The settings from ``SESSIONS_<FIELD>`` variables (``SESSIONS_DATA_ROOT``, ...), then ``overrides``."""
        names = (ENV_PREFIX + name.upper() for name in Settings.model_fields)
        given = {name[len(ENV_PREFIX) :].lower(): os.environ[name] for name in names if name in os.environ}
        try:
            return cls(**{**given, **overrides})
        except ValidationError as error:
            problems = "; ".join(
                f"{ENV_PREFIX + str(e['loc'][0]).upper() if e['loc'] else 'settings'}: {e['msg']}"
                for e in error.errors()
            )
            raise SettingsError(problems) from None

    def instance_home(self) -> Path:
        """``$DAGSTER_HOME``, or ``<data root>/dagster_home`` for a local data root: where the command line keeps
        the Dagster instance, and the forget key lives beside it."""
        home = os.environ.get("DAGSTER_HOME")
        if not home:
            root = self.data_root
            if "://" in root and not root.startswith("file:"):
                raise SettingsError(f"{root} is not a local path: set DAGSTER_HOME to where Dagster keeps its runs.")
            home = str(Path(root.removeprefix("file:")) / "dagster_home")
        return Path(home)

    @property
    def forget_key_path(self) -> Path:
        return Path(self.forget_key_file) if self.forget_key_file else self.instance_home() / "forget.key"

    def storage(self):
        """The data root, its landing zone read in this layout."""
        from sessions_assets.warehouse.storage import Storage

        return Storage(self.data_root, self.landing_layout)

    @property
    def rules(self):
        """The channel rule table in force (``engine/channels.py``)."""
        from sessions_assets.engine import channels

        return channels.load(self.channel_rules)

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
    def session_gap(self) -> timedelta:
        return timedelta(minutes=self.session_gap_minutes)

    @property
    def max_session(self) -> timedelta:
        return timedelta(hours=self.max_session_hours)
