"""The default channel group: each of the contract's sixteen rules by a case that reaches it first, the shipped
rule table against the oracle's plain reading of the contract, and an edited table pointed at by the setting."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from sessions_assets.engine import channels
from sessions_assets.settings import Settings, SettingsError
from sessions_assets_tests.helpers import reference
from sessions_assets_tests.helpers.budget import examples

OWN = ("example.com",)
# (case, utm_source, utm_medium, utm_campaign, referrer) -> the channel the contract gives it.
CASES = [
    ("nothing_at_all", None, None, None, None, "Direct"),
    ("only_an_internal_referrer", None, None, None, "https://shop.example.com/cart", "Direct"),
    ("a_referrer_that_is_not_a_url", None, None, None, "android-app", "Direct"),
    ("cross_network_campaign", "google", "cpc", "Summer cross-network push", None, "Cross-network"),
    ("google_cpc", "google", "cpc", None, None, "Paid Search"),
    ("paid_search_by_referrer_host", None, "ppc", None, "https://www.google.co.uk/search", "Paid Search"),
    ("facebook_paid_social", "m.facebook.com", "paid-social", None, None, "Paid Social"),
    ("youtube_retargeting", "youtube", "retargeting", None, None, "Paid Video"),
    ("banner", "partner", "banner", None, None, "Display"),
    ("cpm_is_paid_but_display_first", "news-site", "cpm", None, None, "Display"),
    ("paid_other", "partner", "paid", None, None, "Paid Other"),
    ("organic_search_by_host", None, None, None, "https://duckduckgo.com/", "Organic Search"),
    ("organic_medium", "partner", "organic", None, None, "Organic Search"),
    ("organic_social_by_host", None, None, None, "https://old.reddit.com/r/data", "Organic Social"),
    ("social_medium", "partner", "social network", None, None, "Organic Social"),
    ("organic_video_by_host", None, None, None, "https://vimeo.com/123", "Organic Video"),
    ("video_medium", "partner", "in-video", None, None, "Organic Video"),
    ("email_source", "E-Mail ", None, None, None, "Email"),
    ("email_medium", "newsletter", "email", None, None, "Email"),
    ("affiliate", "partner", "affiliate", None, None, "Affiliates"),
    ("sms", "sms", None, None, None, "SMS"),
    ("push", "app", "web-push", None, None, "Mobile Push Notifications"),
    ("mobile_medium", "app", "mobile-banner-ish", None, None, "Mobile Push Notifications"),
    ("referral_medium", "partner", "referral", None, None, "Referral"),
    ("a_plain_referrer", None, None, None, "https://news.ycombinator.com/item", "Referral"),
    ("unassigned", "partner", "weird", None, None, "Unassigned"),
    ("source_alone_is_unassigned", "partner", None, None, None, "Unassigned"),
]


def channel_of(spark, rows, rules=None, own=OWN) -> list[str]:
    df = spark.createDataFrame(
        rows, "n int, utm_source string, utm_medium string, utm_campaign string, referrer string"
    ).orderBy("n")
    column = channels.channel_group(
        F.col("utm_source"),
        F.col("utm_medium"),
        F.col("utm_campaign"),
        F.col("referrer"),
        rules or channels.load(),
        own,
    )
    return [r[0] for r in df.select(column).collect()]


def oracle_of(source, medium, campaign, referrer, own=OWN) -> str:
    session = {"utm_source": source, "utm_medium": medium, "utm_campaign": campaign, "referrer": referrer}
    return reference.channel_group(session, reference.Settings(own_domains=own))


@pytest.fixture(scope="module")
def pipeline_channels(spark):
    rows = [(n, *case[1:5]) for n, case in enumerate(CASES)]
    return dict(zip([c[0] for c in CASES], channel_of(spark, rows), strict=True))


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_each_rule_by_a_case_that_reaches_it(pipeline_channels, case):
    name, *fields, expected = case
    assert (pipeline_channels[name], oracle_of(*fields)) == (expected, expected)


def test_every_channel_is_reached_by_a_case():
    assert {c[-1] for c in CASES} == {rule["channel"] for rule in channels.load().rules}


WORDS = ["", " ", "google", "Google ", "cpc", "paid", "email", "sms", "social", "video", "push", "referral", "x"]
WORDS += ["cross-network", "organic", "display", "affiliate", "m.facebook.com", "youtube.com", "mobile", "link"]
REFERRERS = [None, "", "https://www.bing.com/", "http://t.co/x", "https://a.example.com/", "mailto:x@y", "ftp://x"]


@pytest.mark.property
@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(
        st.tuples(
            st.none() | st.sampled_from(WORDS),
            st.none() | st.sampled_from(WORDS) | st.text(st.characters(codec="ascii"), max_size=6),
            st.none() | st.sampled_from(WORDS),
            st.sampled_from(REFERRERS),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_the_shipped_table_gives_the_contracts_channels(spark, rows):
    got = channel_of(spark, [(n, *r) for n, r in enumerate(rows)])
    assert got == [oracle_of(*r) for r in rows]


def test_an_edited_rule_table_pointed_at_by_the_setting(spark, tmp_path):
    table = json.loads(channels.SHIPPED.read_text())
    table["rules"].insert(0, {"channel": "Partners", "when": [{"one_of": {"utm_source": ["partner"]}}]})
    edited = tmp_path / "rules.json"
    edited.write_text(json.dumps(table))
    rules = channels.load(Settings(channel_rules=str(edited)).channel_rules)
    assert rules.digest != channels.load().digest
    rows = [(0, "partner", "affiliate", None, None), (1, "google", "cpc", None, None)]
    assert channel_of(spark, rows, rules) == ["Partners", "Paid Search"]


def test_a_broken_rule_table_stops_the_settings_in_one_line(tmp_path):
    from sessions_assets.graph.resources import checked

    broken = tmp_path / "rules.json"
    broken.write_text(json.dumps({"rules": [{"channel": "X", "when": [{"startswith": {"utm_source": "a"}}]}]}))
    with pytest.raises(SettingsError, match="unknown condition 'startswith'") as stopped:
        checked(Settings.from_env(channel_rules=str(broken)))
    assert len(str(stopped.value).splitlines()) == 1 and str(stopped.value).startswith("channel_rules: ")
