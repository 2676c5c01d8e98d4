"""``SessionsComponent``: the whole graph for one data root, declared in a ``defs.yaml``.

Its attributes are the settings by name (``settings.py``), a ``key_prefix`` that keeps two instances apart, and
how its runs reach Spark. ``build_defs`` only checks them and assembles (``graph.build``); a mistake a user can
make in a ``defs.yaml`` stops the code location with one line naming the file and the attribute.
"""

import json
import re
import textwrap
from dataclasses import dataclass, field, fields
from typing import Annotated, Any

import dagster as dg
from pydantic import BaseModel

from sessions_assets.settings import KEY_PREFIX, Settings, SettingsError, variable

# An attribute written as one `{{ env.NAME }}`: a Spark Connect URL written so reaches the resource as the
# variable itself (dg.EnvVar), so the UI shows its name, never its value (a URL may carry a token).
ENV_TEMPLATE = re.compile(r"^\s*\{\{\s*env\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}\s*$")
TOKEN = re.compile(r";\s*token\s*=", re.IGNORECASE)
# A Spark setting that holds a credential: the UI shows spark_conf, so such a one comes from the environment.
CREDENTIAL = re.compile(r"secret|password|token|credential|(access|account|private)[._-]?key", re.IGNORECASE)


class SessionsComponentError(ValueError):
    """A ``defs.yaml`` of the component is not valid: the file, the attribute and the rule, in one line."""


@dataclass(frozen=True)
class Unset:
    """An attribute whose template gave nothing (an unset variable): reported, never taken for "not given"."""

    template: str


def _given(context: dg.ResolutionContext, raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    value = context.resolve_value(raw)
    return Unset(raw) if value is None else value


def _remote(context: dg.ResolutionContext, raw: Any) -> Any:
    if isinstance(raw, str) and (found := ENV_TEMPLATE.match(raw)):
        return dg.EnvVar(found.group(1))
    return _given(context, raw)


# The attributes that are not settings.
OWN = {
    "key_prefix": "Asset keys become <key_prefix>/raw_events, …; every job, sensor, schedule, check, group and "
    "resource key <key_prefix>_<name>. Each instance in a code location needs its own (one may have none).",
    "spark_remote": 'The Spark Connect server its runs attach to (sc://host:port), "" for a driver of each run\'s '
    'own. Not given: SPARK_REMOTE, when set as the definitions load. "{{ env.NAME }}" passes the variable, not its '
    "value: the UI shows its name. A token goes in the environment, never here.",
    "spark_conf": "Spark settings over those of the SPARK_* variables (spark.master, spark.driver.memory, "
    "spark.sql.shuffle.partitions, …).",
}
EXAMPLES = {"key_prefix": "web", "spark_remote": '"{{ env.SPARK_REMOTE }}"', "spark_conf": "{spark.driver.memory: 2g}"}


def description(name: str) -> str:
    """What an attribute means, and, for a setting, what it is when not given."""
    if name in OWN:
        return OWN[name]
    return f"{Settings.model_fields[name].description} Not given: {variable(name)}, else {_default(name)}."


def _default(name: str) -> str:
    return json.dumps(Settings.model_fields[name].default)


def _attribute(name: str) -> dg.Resolver:
    return dg.Resolver(_given, inject_before_resolve=False, description=description(name))


class ScaffoldParams(BaseModel):
    key_prefix: str = ""
    data_root: str = ""


class SessionsScaffolder(dg.Scaffolder[ScaffoldParams]):
    """A ``defs.yaml`` that lists every attribute, commented out but ``data_root``, with what it means."""

    @classmethod
    def get_scaffold_params(cls) -> type[ScaffoldParams]:
        return ScaffoldParams

    def scaffold(self, request: dg.ScaffoldRequest[ScaffoldParams]) -> None:
        if request.scaffold_format != "yaml":
            dg.scaffold_component(request, {})
            return
        params = request.params or ScaffoldParams()
        chosen = {"key_prefix": params.key_prefix, "data_root": params.data_root or "data"}
        lines = [
            "# One instance of sessions-assets: sessions, users and a daily lifecycle snapshot from the landing zone",
            "# of one data root. An attribute left out takes its SESSIONS_<NAME> variable, else its default;",
            '# "{{ env.NAME }}" reads a variable. Two instances need two data roots and two key prefixes.',
            f"type: {request.type_name}",
            "attributes:",
        ]
        for attribute in fields(SessionsComponent):
            lines += [f"  # {line}" for line in textwrap.wrap(description(attribute.name), 110)]
            if chosen.get(attribute.name):
                lines.append(f"  {attribute.name}: {json.dumps(chosen[attribute.name])}")
            else:
                lines.append(f"  # {attribute.name}: {EXAMPLES.get(attribute.name) or _default(attribute.name)}")
        (request.target_path / "defs.yaml").write_text("\n".join(lines) + "\n")


@dg.scaffold_with(SessionsScaffolder)
@dataclass
class SessionsComponent(dg.Component, dg.Resolvable):
    """Sessions, users and a daily user-lifecycle snapshot from Segment-style events landed under one data root,
    kept exactly equal to a full recompute under late data: the asset graph, its checks, jobs, schedules and
    sensors, and its Spark and settings resources. Attributes: the settings by name, ``key_prefix``, and
    ``spark_remote``/``spark_conf`` for its runs' Spark."""

    key_prefix: Annotated[str, _attribute("key_prefix")] = ""
    spark_remote: Annotated[
        str | dg.EnvVar | None,
        dg.Resolver(_remote, inject_before_resolve=False, model_field_type=str | None, description=OWN["spark_remote"]),
    ] = None
    spark_conf: Annotated[dict[str, str], dg.Resolver.default(description=OWN["spark_conf"])] = field(
        default_factory=dict
    )
    data_root: Annotated[str | None, _attribute("data_root")] = None
    landing_layout: Annotated[str | None, _attribute("landing_layout")] = None
    landing_recent_days: Annotated[int | None, _attribute("landing_recent_days")] = None
    landing_full_listing_minutes: Annotated[int | None, _attribute("landing_full_listing_minutes")] = None
    start_date: Annotated[str | None, _attribute("start_date")] = None
    time_zone: Annotated[str | None, _attribute("time_zone")] = None
    max_future_skew_minutes: Annotated[int | None, _attribute("max_future_skew_minutes")] = None
    max_lateness_days: Annotated[int | None, _attribute("max_lateness_days")] = None
    session_gap_minutes: Annotated[int | None, _attribute("session_gap_minutes")] = None
    max_session_hours: Annotated[int | None, _attribute("max_session_hours")] = None
    lapsing_days: Annotated[int | None, _attribute("lapsing_days")] = None
    dormant_days: Annotated[int | None, _attribute("dormant_days")] = None
    stitch_identities: Annotated[bool | None, _attribute("stitch_identities")] = None
    own_domains: Annotated[str | None, _attribute("own_domains")] = None
    conversion_events: Annotated[str | None, _attribute("conversion_events")] = None
    channel_rules: Annotated[str | None, _attribute("channel_rules")] = None
    forget_key_file: Annotated[str | None, _attribute("forget_key_file")] = None
    forget_purge_hours: Annotated[int | None, _attribute("forget_purge_hours")] = None

    def settings(self, **given: Any) -> Settings:
        """The instance's settings: ``given``, then the attributes given, each other from its variable, else its
        default (``SettingsError`` naming the attribute, or the variable, and the rule)."""
        attributes = {name: value for name, value in self._attributes() if name not in given}
        unset = [(name, f"{value.template} is not set", False) for name, value in attributes.items() if _unset(value)]
        if unset:
            raise SettingsError(unset)
        return Settings.from_env(**attributes, **given)

    def _attributes(self):
        for name in Settings.model_fields:
            value = getattr(self, name)
            if value is not None:
                yield name, value

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        from sessions_assets.graph import build

        where = context.path / "defs.yaml" if (context.path / "defs.yaml").exists() else context.path
        problems = self._problems(context)
        if problems:
            raise SessionsComponentError(f"{where}: " + "; ".join(problems))
        try:
            settings = self.settings()
            return build(settings, self.key_prefix, self.spark_remote, self.spark_conf)
        except SettingsError as error:
            raise SessionsComponentError(f"{where}: {said(error)}") from None

    def _problems(self, context: dg.ComponentLoadContext) -> list[str]:
        """What is wrong with the attributes, each ``attributes.<name>: <rule>``; settings are checked apart."""
        from sessions_assets.warehouse.storage import as_uri

        problems = []
        if _unset(self.key_prefix) or not isinstance(self.key_prefix, str):
            problems.append(
                f"attributes.key_prefix: {getattr(self.key_prefix, 'template', self.key_prefix)!r} is not a name"
            )
        elif self.key_prefix and not KEY_PREFIX.match(self.key_prefix):
            problems.append(
                f"attributes.key_prefix: {self.key_prefix!r} is not a name (a letter, then letters, digits, _)"
            )
        if _unset(self.spark_remote):
            problems.append(f"attributes.spark_remote: {self.spark_remote.template} is not set")
        elif isinstance(self.spark_remote, str) and TOKEN.search(self.spark_remote):
            problems.append(
                "attributes.spark_remote: a token goes in the environment, never in defs.yaml "
                '(write "{{ env.NAME }}", or set SPARK_CONNECT_AUTHENTICATE_TOKEN)'
            )
        if not isinstance(self.spark_conf, dict) or not all(isinstance(k, str) for k in self.spark_conf):
            problems.append("attributes.spark_conf: takes Spark settings by name (spark.master: local[2], …)")
        elif secret := next((k for k in self.spark_conf if CREDENTIAL.search(k)), None):
            problems.append(
                f"attributes.spark_conf: {secret} holds a credential, which the UI would show: give it in the "
                "environment (the store's own variables, or SPARK_CONF)"
            )
        if problems:
            return problems
        try:
            mine = as_uri(self.settings().data_root)
        except SettingsError:
            return []  # said by build_defs, attribute by attribute
        for other in context.component_tree.get_all_components(of_type=SessionsComponent):
            if other is self:
                continue
            try:
                theirs = as_uri(other.settings().data_root)
            except SettingsError:
                continue  # the other instance says what is wrong with it
            if other.key_prefix == self.key_prefix:
                problems.append(
                    f"attributes.key_prefix: {self.key_prefix or '(none)'} is also the key prefix of the instance on "
                    f"{theirs}: give each instance its own"
                )
            if theirs == mine:
                problems.append(
                    f"attributes.data_root: {mine} is also the data root of the instance with key prefix "
                    f"{other.key_prefix or '(none)'}: two instances would write the same tables"
                )
        return problems


def _unset(value: Any) -> bool:
    return isinstance(value, Unset)


def said(error: SettingsError) -> str:
    """A settings error as a ``defs.yaml`` reader needs it: each attribute (or the variable it came from) and its
    rule."""
    return "; ".join(f"{variable(f) if env else 'attributes.' + f}: {m}" for f, m, env in error.problems)
