"""A session's default channel group, from a rule table kept as data (``channel_rules.json``).

The table is the contract's: sixteen rules tried in order over the session's campaign fields and referrer host,
with three source categories (search, social, video). A team that files channels otherwise copies the file, edits
it and points ``SESSIONS_CHANNEL_RULES`` at the copy; ``load`` checks it and names what is wrong in one line.
The rules become one ``CASE WHEN`` over the session's columns, so a channel costs nothing past the aggregate.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import Column
from pyspark.sql import functions as F

SHIPPED = Path(__file__).with_name("channel_rules.json")
FIELDS = ("utm_source", "utm_medium", "utm_campaign", "referrer_host", "source")
CONDITIONS = ("empty", "not_empty", "one_of", "contains", "ends_with", "matches", "category")
# scheme://[user@]host[:port][/...]: a referrer without one has no host.
URL_HOST = r"^[A-Za-z][A-Za-z0-9+.\-]*://(?:[^/?#@]*@)?([^/?#:]+)"


class RulesError(ValueError):
    """A rule table that cannot be applied; the message names the file and the fault."""


@dataclass(frozen=True)
class Rules:
    """A checked rule table: where it was read, its fingerprint (what the UI shows), categories and rules."""

    path: str
    digest: str
    categories: dict[str, list[str]]
    rules: list[dict]


@functools.lru_cache(maxsize=8)
def load(path: str = "") -> Rules:
    """The rule table at ``path`` (the shipped one when empty), checked; read once per process."""
    file = Path(path) if path else SHIPPED
    try:
        text = file.read_text()
        table = json.loads(text)
    except (OSError, ValueError) as error:
        raise RulesError(f"channel rules {file}: {error}") from None
    if not isinstance(table, dict):
        raise RulesError(f"channel rules {file}: must be an object with 'categories' and 'rules'")
    categories, rules = table.get("categories", {}), table.get("rules")
    if not isinstance(rules, list) or not rules:
        raise RulesError(f"channel rules {file}: 'rules' must be a non-empty list")
    if not isinstance(categories, dict) or not all(isinstance(v, list) for v in categories.values()):
        raise RulesError(f"channel rules {file}: 'categories' must map names to lists of sources")
    for n, rule in enumerate(rules, 1):
        where = f"channel rules {file}, rule {n}"
        if (
            not isinstance(rule, dict)
            or not isinstance(rule.get("channel"), str)
            or not isinstance(rule.get("when"), list)
        ):
            raise RulesError(f"{where}: needs 'channel' (text) and 'when' (a list of objects)")
        for entry in rule["when"]:
            if not isinstance(entry, dict):
                raise RulesError(f"{where}: each entry of 'when' is an object of conditions")
            for condition in ("empty", "not_empty"):
                if not isinstance(entry.get(condition, []), list):
                    raise RulesError(f"{where}: '{condition}' takes a list of fields")
            for condition in ("one_of", "contains", "ends_with", "matches"):
                values = entry.get(condition, {})
                wanted = list if condition == "one_of" else str
                if not isinstance(values, dict) or not all(isinstance(v, wanted) for v in values.values()):
                    raise RulesError(f"{where}: '{condition}' maps fields to {'lists' if wanted is list else 'text'}")
            unknown = set(entry) - set(CONDITIONS)
            if unknown:
                raise RulesError(f"{where}: unknown condition {sorted(unknown)[0]!r} (takes {', '.join(CONDITIONS)})")
            named = [*entry.get("empty", []), *entry.get("not_empty", [])]
            named += [f for c in ("one_of", "contains", "ends_with", "matches") for f in entry.get(c, {})]
            if set(named) - set(FIELDS):
                raise RulesError(f"{where}: unknown field {sorted(set(named) - set(FIELDS))[0]!r}")
            if "category" in entry and entry["category"] not in categories:
                raise RulesError(f"{where}: unknown category {entry['category']!r}")
            for pattern in entry.get("matches", {}).values():
                try:
                    re.compile(pattern)
                except re.error as error:
                    raise RulesError(f"{where}: {pattern!r} is not a regular expression ({error})") from None
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return Rules(str(file), digest, categories, rules)


def _clean(value: Column) -> Column:
    """Lowercased, trimmed of whitespace (Java's \\s: space, tab, line breaks, form feed), '' when missing."""
    return F.coalesce(F.regexp_replace(F.lower(value), r"^\s+|\s+\z", ""), F.lit(""))


def referrer_host(referrer: Column, own_domains: tuple[str, ...]) -> Column:
    """The referrer's host, lowercased without a leading ``www.``; '' when there is none or it is one of
    ``own_domains`` or under one (internal navigation)."""
    host = F.regexp_replace(F.lower(F.regexp_extract(F.coalesce(referrer, F.lit("")), URL_HOST, 1)), r"^www\.", "")
    internal = F.lit(False)
    for domain in own_domains:
        internal = internal | (host == domain) | host.endswith("." + domain)
    return F.when(internal, F.lit("")).otherwise(host)


def channel_group(
    utm_source: Column, utm_medium: Column, utm_campaign: Column, referrer: Column, rules: Rules, own_domains
) -> Column:
    """The first rule of ``rules`` that holds for these session columns: its channel."""
    s, m, c = _clean(utm_source), _clean(utm_medium), _clean(utm_campaign)
    h = referrer_host(referrer, tuple(own_domains))
    field = {"utm_source": s, "utm_medium": m, "utm_campaign": c, "referrer_host": h}
    field["source"] = F.when(s != "", s).otherwise(h)
    labels = F.split(field["source"], r"\.")

    def holds(entry: dict) -> Column:
        test = F.lit(True)
        for name in entry.get("empty", []):
            test = test & (field[name] == "")
        for name in entry.get("not_empty", []):
            test = test & (field[name] != "")
        for name, values in entry.get("one_of", {}).items():
            test = test & field[name].isin(*values)
        for name, text in entry.get("contains", {}).items():
            test = test & field[name].contains(text)
        for name, text in entry.get("ends_with", {}).items():
            test = test & field[name].endswith(text)
        for name, pattern in entry.get("matches", {}).items():
            test = test & field[name].rlike(f"(?s)^(?:{pattern})\\z")
        if "category" in entry:
            listed = rules.categories[entry["category"]]
            names = F.array(*[F.lit(n) for n in listed])
            named = field["source"].isin(*listed) | F.arrays_overlap(labels, names)
            test = test & (field["source"] != "") & named
        return test

    chosen = F.lit(None).cast("string")
    for rule in reversed(rules.rules):
        any_entry = F.lit(False)
        for entry in rule["when"]:
            any_entry = any_entry | holds(entry)
        chosen = F.when(any_entry, F.lit(rule["channel"])).otherwise(chosen)
    return chosen
