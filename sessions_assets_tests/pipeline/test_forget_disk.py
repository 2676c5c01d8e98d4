"""A forgotten person is gone from disk: no file under ``warehouse/`` (live or superseded Parquet, change data,
deletion vectors, every file of each ``_delta_log``) holds one of their ids or payloads, also for tables written
before file statistics stopped quoting strings; the notes survive the log's truncation; Dagster's records (events,
check samples, run config) name no one; the key is its owner's only."""

from __future__ import annotations

import json
import stat
from datetime import date
from pathlib import Path

import pytest

from sessions_assets.cli.main import main
from sessions_assets.engine import privacy
from sessions_assets.graph import checks
from sessions_assets.warehouse import journal
from sessions_assets.warehouse.delta import DeltaLog
from sessions_assets.warehouse.tables import ALL, EVENTS, PERSONAL, SESSIONS, USERS, Table
from sessions_assets_tests.helpers.arrivals import running
from sessions_assets_tests.helpers.disk import files_quoting
from sessions_assets_tests.helpers.expected import assert_tables_match_oracle
from sessions_assets_tests.helpers.landing import DESKTOP, segment, write_day

pytestmark = pytest.mark.scenario

D1, D2, D3 = date(2024, 3, 1), date(2024, 3, 2), date(2024, 3, 3)
OLGA, DEVICE = "olga.petrova@example.org", "7e6c1d0a-olga-device"
THEIRS = [
    segment(
        "msg-olga-1", None, "2024-03-01 09:50", kind="page", anonymousId=DEVICE, path="/olga-landing", agent=DESKTOP
    ),
    segment("msg-olga-2", OLGA, "2024-03-01 10:00", kind="identify", anonymousId=DEVICE),
    segment("msg-olga-3", OLGA, "2024-03-02 10:00", anonymousId=DEVICE, path="/olga-cart", event="Order Completed"),
    segment("msg-olga-4", OLGA, "2024-03-02 12:00", "2024-03-02 10:00", anonymousId=DEVICE),  # rejected: ahead
]
OTHERS = {
    D1: [segment("k1", "kim-3301", "2024-03-01 11:00", path="/"), segment("k2", "kim-3301", "2024-03-01 11:10")],
    D2: [segment("k3", "kim-3301", "2024-03-02 11:00", agent=DESKTOP), segment("z1", "zoe-8812", "2024-03-02 08:00")],
}
NEEDLES = [OLGA, DEVICE, "msg-olga-1", "msg-olga-2", "msg-olga-3", "msg-olga-4", *THEIRS]


def legacy_properties(self: Table) -> dict[str, str]:
    """The properties tables were created with before statistics were restricted: Delta's default statistics."""
    return dict(self.properties)


@pytest.fixture(scope="module")
def forgotten(spark, tmp_path_factory):
    """Tables written first as before (statistics of every column), then opened as now; olga forgotten."""
    root = tmp_path_factory.mktemp("disk") / "data"
    with running(root) as runner, pytest.MonkeyPatch.context() as patch:
        patch.setattr(Table, "table_properties", property(legacy_properties))
        write_day(root, D1, [*OTHERS[D1], *THEIRS[:2]])
        runner.process()
        patch.undo()  # the next runs open the stored tables with the properties of now
        write_day(root, D2, [*OTHERS[D2], *THEIRS[2:]])
        runner.process()
        wh = runner.resources["pipeline"].warehouse(runner.resources["spark"])
        before = files_quoting(root / "warehouse", NEEDLES)
        key = journal.key_for(wh, runner.resources["pipeline"])
        step = runner.forget(journal.user_hashes(key, [OLGA]))
        yield runner, root, wh, before, step


def test_no_file_under_the_warehouse_holds_a_forgotten_id_or_payload(forgotten):
    runner, root, wh, before, step = forgotten
    assert {"raw_events", "events", "sessions", "users"} <= {Path(f).parts[0] for f, _ in before}  # they were there
    assert any("_delta_log" in f for f, _ in before)  # quoted by the statistics of the files written first
    assert files_quoting(root / "warehouse", NEEDLES) == []
    assert_tables_match_oracle(wh, root, forgotten={OLGA})
    # The tables that held rows written with statistics of strings (D1 had no reject: rejected_events held none).
    assert set(step.metadata["forget"]["logs_truncated"]) == {t.name for t in PERSONAL} - {"rejected_events"}


def test_statistics_are_kept_for_dates_times_and_numbers_only(forgotten):
    _, root, wh, _, _ = forgotten
    for table in ALL:
        log = DeltaLog(wh.storage, table)
        assert log.metadata()["configuration"]["delta.dataSkippingStatsColumns"] == ",".join(table.stats_columns)
        restricted = [v for v in log.versions() if "dataSkippingStatsColumns" in json.dumps(log.commit_info(v))]
        for version in (v for v in log.versions() if restricted and v > restricted[0]):  # written since
            text = (Path(log.path) / f"{version:020d}.json").read_text()
            for action in (json.loads(line) for line in text.splitlines()):
                stats = json.loads(action.get("add", {}).get("stats") or "{}")
                assert set(stats.get("minValues", {})) <= set(table.stats_columns), (table.name, version)
    # What the day conditions and readers' filters skip by is still recorded.
    assert {"event_date", "message_hash"} <= set(EVENTS.stats_columns) and "session_date" in SESSIONS.stats_columns


def test_a_truncated_log_keeps_the_notes_so_the_next_refresh_is_incremental(forgotten):
    runner, root, wh, _, _ = forgotten
    write_day(root, D3, [segment("k4", "kim-3301", "2024-03-03 11:00"), segment("z2", "zoe-8812", "2024-03-03 08:00")])
    _, refreshed = runner.process()
    assert {refreshed.metadata[t]["refresh"] for t in ("events", "sessions", "users")} == {"incremental"}
    assert_tables_match_oracle(wh, root, forgotten={OLGA})


def evaluate_checks(runner) -> dict[str, list]:
    job = runner.defs.resolve_job_def("checks_job")
    result = job.execute_in_process(instance=runner.instance, resources=runner.resources)
    return {e.check_name: e.metadata["sample"].value for e in result.get_asset_check_evaluations()}


def records(instance, names) -> str:
    """Everything the instance keeps of its runs and checks, as text."""
    found = []
    for record in instance.get_run_records():
        found.append(json.dumps(record.dagster_run.run_config, default=str))
        found += [str(e) for e in instance.all_logs(record.dagster_run.run_id)]
    for key in checks.check_keys(names):
        found += [str(r.event) for r in instance.event_log_storage.get_asset_check_execution_history(key, 1000)]
    return "\n".join(found)


def test_dagster_records_name_no_one_and_older_check_samples_can_be_cleared(forgotten, monkeypatch):
    runner, root, wh, _, step = forgotten
    # Make the checks fail, so their samples show rows: a person without a users row, misnumbered sessions.
    wh.spark.sql(f"DELETE FROM delta.`{wh.uri(USERS)}` WHERE user_key = 'zoe-8812'")
    wh.spark.sql(f"UPDATE delta.`{wh.uri(SESSIONS)}` SET session_number = 9 WHERE user_key = 'kim-3301'")
    with monkeypatch.context() as older:  # samples as they were written before: user_key rows
        older.setattr(checks, "IDENTIFYING", ())
        older.setattr(privacy, "name_by_session", lambda rows, sessions: rows)
        assert "kim-3301" in json.dumps(evaluate_checks(runner))
    assert "kim-3301" in records(runner.instance, runner.names)
    assert checks.clear_check_records(runner.instance, runner.names) == 1
    samples = evaluate_checks(runner)
    assert samples["users_one_row_per_person"] and samples["sessions_numbered_in_order"]
    assert "a_session_id" in json.dumps(samples) and "session_id" in json.dumps(samples)
    text = records(runner.instance, runner.names)
    assert all(needle not in text for needle in [OLGA, DEVICE, "kim-3301", "zoe-8812"])
    hashed = journal.read(wh)[0].user_hashes[0]
    assert hashed in text and privacy.is_hash(hashed)  # the forget run's config: the hash only


def test_the_key_is_kept_beside_the_instance_for_its_owner_only_and_hashes_ids_as_the_pipeline_reads_them(
    forgotten, capsys
):
    _, root, _, _, _ = forgotten
    path = root / "dagster_home" / "forget.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert main(["forget", "--data-root", str(root), "--hash-only", "--user-id", OLGA, "--user-id", " 42 "]) == 0
    key = bytes.fromhex(path.read_text().strip())
    assert capsys.readouterr().out.split() == [privacy.keyed_hash(key, OLGA), privacy.keyed_hash(key, " 42 ")]
    assert main(["forget", "--data-root", str(root), "--hash-only", "--user-id", "\u00a0 "]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert main(["status", "--data-root", str(root)]) == 0
    assert "forget requests not done: none" in capsys.readouterr().out
