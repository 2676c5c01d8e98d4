"""Forget requests at random points of random arrivals end in the tables a full recompute gives without the
forgotten persons' lines: the random time zones, landing zones and arrival orders of ``test_arrival_orders``, with one or two
persons forgotten before, between or after the received days arrive (a person forgotten before their lines arrive
is suppressed; one of the two logged in on the device another person browses from anonymously)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from sessions_assets.warehouse import journal
from sessions_assets.warehouse.delta import Warehouse
from sessions_assets.warehouse.storage import Storage
from sessions_assets_tests.helpers.arrivals import running
from sessions_assets_tests.helpers.budget import examples
from sessions_assets_tests.helpers.expected import assert_tables_match_oracle
from sessions_assets_tests.pipeline.test_arrival_orders import arrive, scenarios

pytestmark = [pytest.mark.property, pytest.mark.scenario]

# Persons with a userId: dan and eli log in on the device "dev" browses from (cat's userId is blank: no one's).
IDENTIFIED = ("ann", "bob", "dan", "eli")


@st.composite
def with_requests(draw):
    """A scenario whose arrival steps have one or two forget requests at random points (the first may come before
    any day)."""
    days, zone, steps = draw(scenarios())
    persons = draw(st.lists(st.sampled_from(IDENTIFIED), min_size=1, max_size=2, unique=True))
    for person in persons:
        steps.insert(draw(st.integers(0, len(steps))), ("forget", (person,)))
    return days, zone, steps


@settings(
    max_examples=examples(1),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    phases=(Phase.explicit, Phase.reuse, Phase.generate),  # no shrinking: each example runs for minutes
)
@given(scenario=with_requests())
def test_forget_requests_at_any_point_of_any_arrival_order_equal_a_recompute_without_them(spark, scenario):
    days, zone, steps = scenario
    with (
        tempfile.TemporaryDirectory(prefix="forget-") as work,
        running(Path(work) / "data", time_zone=days.zone) as runner,
    ):
        root = Path(work) / "data"
        (root / "landing").mkdir(parents=True)
        wh = Warehouse(spark, Storage(str(root)))
        forgotten = set()
        for step in steps:
            if step[0] == "forget":
                key = journal.key_for(wh, runner.resources["pipeline"])
                runner.forget(journal.user_hashes(key, step[1]))
                forgotten.update(step[1])
            else:
                arrive(runner, root, zone, step)
        runner.process()  # a re-ingest last leaves a refresh due; a request, nothing
        assert_tables_match_oracle(wh, root, forgotten=forgotten, time_zone=days.zone)
        assert all(r.state == journal.DONE for r in journal.read(wh))
