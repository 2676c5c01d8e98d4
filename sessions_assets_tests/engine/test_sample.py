"""The bundled sample (``sessions-assets generate``) shows what the tables can hold, read by the oracle alone."""

from __future__ import annotations

from datetime import date

from sessions_assets.cli.generate import SOURCES, generate_landing_zone
from sessions_assets_tests.helpers import reference
from sessions_assets_tests.helpers.landing import landing_lines

CHANNELS = {
    "Direct",
    "Cross-network",
    "Paid Search",
    "Paid Social",
    "Paid Video",
    "Display",
    "Paid Other",
    "Organic Search",
    "Organic Social",
    "Organic Video",
    "Email",
    "Affiliates",
    "SMS",
    "Mobile Push Notifications",
    "Referral",
    "Unassigned",
}


def test_the_sample_reaches_every_channel_and_has_bots_and_conversions(tmp_path):
    generate_landing_zone(str(tmp_path), days=7, users=100, end_date=date(2024, 3, 17))
    oracle = reference.recompute(landing_lines(tmp_path), reference.Settings(own_domains=("shop.example",)))
    sessions = oracle["sessions"]
    assert {s["default_channel_group"] for s in sessions} == CHANNELS
    assert any(s["is_bot"] for s in sessions) and not all(s["is_bot"] for s in sessions)
    converted = [s for s in sessions if s["conversions"]]
    assert any(s["revenue"] is None for s in converted) and any(s["revenue"] for s in converted)


def test_the_segment_sample_has_every_source_and_the_same_lines(tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "segment"
    generate_landing_zone(str(ours), days=3, users=20, end_date=date(2024, 3, 17))
    generate_landing_zone(str(theirs), days=3, users=20, end_date=date(2024, 3, 17), layout="segment")
    by_source = landing_lines(theirs)
    assert {source for day in by_source.values() for source in day} == set(SOURCES)
    assert {d: sorted(lines) for d, lines in landing_lines(ours).items()} == {
        d: sorted(line for lines in sources.values() for line in lines) for d, sources in by_source.items()
    }
