"""`det resources`' inputs within bounds and its answers' assembly (api/allocation_reports.py),
and `epochal resources raw|aggregated` (cli/resources.py) against a fake master. The SQL's
clipping runs against PostgreSQL in tests/integration/test_allocation_history.py."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

import cli.client
from api import allocation_reports as reports
from api.allocation_reports import Named, Period, Window
from api.errors import ApiError
from deploy.console import app
from tests.fakes.cli_master import FakeMaster

DAILY = Period.DAILY.value
MONTHLY = Period.MONTHLY.value


def refused(call: Any, *args: Any) -> str:
    with pytest.raises(ApiError) as raised:
        call(*args)
    assert raised.value.status == 400
    return str(raised.value.details[0])


def test_timestamps_are_rfc3339_in_utc_within_years() -> None:
    assert reports.parse_timestamp("t", "2024-01-02T03:04:05Z") == datetime(
        2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert reports.parse_timestamp("t", "2024-01-02T03:04:05+02:00") == datetime(
        2024, 1, 2, 1, 4, 5, tzinfo=UTC)
    assert reports.parse_timestamp("t", "2024-01-02T03:04:05") == datetime(
        2024, 1, 2, 3, 4, 5, tzinfo=UTC)  # no offset: UTC
    for bad in ("yesterday", "2024-13-01T00:00:00Z", "", "0001-01-01T00:00:00+01:00",
                "1969-12-31T23:59:59Z", "9" * 200):
        detail = refused(reports.parse_timestamp, "timestampAfter", bad)
        assert detail.startswith("timestampAfter: ") and len(detail) < 200


def test_a_raw_window_is_ordered_and_at_most_a_leap_year() -> None:
    after, before = Named("timestamp_after", "2024-01-01T00:00:00Z"), Named(
        "timestamp_before", "2024-12-31T00:00:00Z")
    start, end = reports.raw_window(after, before)
    assert end - start == timedelta(days=365)
    assert refused(reports.raw_window, after, Named("timestamp_before", None)).startswith(
        "timestamp_before: required")
    assert refused(reports.raw_window, after, Named("timestamp_before",
                                                    "2023-12-31T00:00:00Z")).startswith(
        "timestamp_before: must not be before timestamp_after")
    assert "366 days" in refused(reports.raw_window, after,
                                 Named("timestamp_before", "2025-01-02T00:00:01Z"))
    assert reports.given("timestampAfter", None, "timestamp_after", "x") == Named(
        "timestamp_after", "x")
    assert reports.given("timestampAfter", "y", "timestamp_after", "x") == Named(
        "timestampAfter", "y")


def test_periods_by_name_short_name_or_number() -> None:
    for text in (DAILY, "DAILY", "1"):
        assert reports.parse_period(Named("period", text)) is Period.DAILY
    for text in (MONTHLY, "MONTHLY", "2"):
        assert reports.parse_period(Named("period", text)) is Period.MONTHLY
    for bad in ("WEEKLY", "0", "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_UNSPECIFIED", None):
        assert refused(reports.parse_period, Named("period", bad)).startswith("period: ")


def window(start: str, end: str, period: str = DAILY) -> Window:
    return reports.aggregated_window(Named("start_date", start), Named("end_date", end),
                                     Named("period", period))


def test_aggregated_windows_count_days_or_months_within_bounds() -> None:
    days = window("2024-02-27", "2024-03-01")
    assert days.starts() == [date(2024, 2, 27), date(2024, 2, 28), date(2024, 2, 29),
                             date(2024, 3, 1)]
    assert days.label(date(2024, 2, 29)) == "2024-02-29"
    months = window("2023-11", "2024-02", MONTHLY)
    assert months.starts() == [date(2023, 11, 1), date(2023, 12, 1), date(2024, 1, 1),
                               date(2024, 2, 1)]
    assert months.label(date(2024, 1, 1)) == "2024-01" and months.monthly
    assert len(window("2024-01-01", "2024-12-31").starts()) == 366  # the most: a leap year
    assert "at most 366 days" in refused(window, "2023-01-01", "2024-01-02")
    assert len(window("2015-01", "2024-12", MONTHLY).starts()) == 120
    assert "at most 120 months" in refused(window, "2014-12", "2024-12", MONTHLY)
    assert refused(window, "2024-02-30", "2024-03-01").startswith("start_date: not a date")
    assert refused(window, "2024-03", "2024-03-01").startswith("start_date: a date as YYYY-MM-DD")
    assert refused(window, "2024-03-01", "2024-03-01", MONTHLY).startswith("start_date: ")
    assert refused(window, "9999-12-31", "9999-12-31").startswith("start_date: a year from")
    assert refused(window, "1969-12", "1970-01", MONTHLY).startswith("start_date: a year from")
    assert len(window("9998-12", "9998-12", MONTHLY).starts()) == 1
    assert refused(window, "2024-03-02", "2024-03-01").startswith(
        "end_date: must not be before start_date")


def test_every_period_of_the_window_is_an_entry_with_its_groupings() -> None:
    days = window("2024-03-01", "2024-03-03")
    rows = [
        {"period_start": datetime(2024, 3, 1), "aggregation_type": "total", "key": "total",
         "seconds": 7200.0},
        {"period_start": datetime(2024, 3, 1), "aggregation_type": "username", "key": "ann",
         "seconds": 7200.0},
        {"period_start": datetime(2024, 3, 1), "aggregation_type": "workspace", "key": "vision",
         "seconds": 7200.0},
        {"period_start": datetime(2024, 3, 1), "aggregation_type": "resource_pool",
         "key": "gpus", "seconds": 7200.0},
        {"period_start": datetime(2024, 3, 1), "aggregation_type": "experiment_label",
         "key": "big", "seconds": 7200.0},
        {"period_start": datetime(2024, 3, 3), "aggregation_type": "total", "key": "total",
         "seconds": 1e-9},
        {"period_start": datetime(2024, 3, 9), "aggregation_type": "total", "key": "total",
         "seconds": 5.0},  # outside the window: dropped
    ]
    first, second, third = reports.aggregated_entries(days, rows)
    assert first == {"periodStart": "2024-03-01", "period": DAILY, "seconds": 7200.0,
                     "byUsername": {"ann": 7200.0}, "byWorkspace": {"vision": 7200.0},
                     "byResourcePool": {"gpus": 7200.0}, "byExperimentLabel": {"big": 7200.0}}
    assert second == {"periodStart": "2024-03-02", "period": DAILY, "seconds": 0.0,
                      "byUsername": {}, "byWorkspace": {}, "byResourcePool": {},
                      "byExperimentLabel": {}}
    assert third["seconds"] == pytest.approx(1e-9)
    # Determined's client reads the entry (and leaves byWorkspace alone).
    csv = reports.aggregated_csv([first]).splitlines()
    assert csv == ["aggregation_type,aggregation_key,date,seconds",
                   "experiment_label,big,2024-03-01,7200.000000",
                   "username,ann,2024-03-01,7200.000000",
                   "resource_pool,gpus,2024-03-01,7200.000000",
                   "workspace,vision,2024-03-01,7200.000000",
                   "total,total,2024-03-01,7200.000000"]


def row(**changes: Any) -> dict[str, Any]:
    base = {"task_type": "TRIAL", "start_time": datetime(2024, 3, 1, 22, tzinfo=UTC),
            "end_time": datetime(2024, 3, 2, 1, 30, 0, 250000, tzinfo=UTC),
            "experiment_id": 3, "username": "ann", "user_id": 2, "labels": ["a,b", "c\\d"],
            "seconds": 3600.0, "slots": 2, "allocation_id": "3.7.1", "task_id": "3.7",
            "trial_id": 7, "workspace_id": 4, "workspace_name": "vision",
            "resource_pool": "gpus", "agent_ids": ["agent-1"]}
    return {**base, **changes}


def test_raw_entries_and_determineds_csv() -> None:
    entry = reports.raw_entry(row())
    assert entry["kind"] == "trial" and entry["seconds"] == 3600.0
    assert entry["startTime"] == "2024-03-01T22:00:00+00:00"
    task = reports.raw_entry(row(task_type="NOTEBOOK", experiment_id=None, trial_id=None,
                                 end_time=None, labels=[], seconds=-0.5,
                                 allocation_id="f00.1"))
    assert (task["kind"], task["endTime"], task["seconds"]) == ("notebook", None, 0.0)
    assert reports.raw_csv([entry, task]).splitlines() == [
        "experiment_id,kind,username,labels,slots,start_time,end_time,seconds",
        '3,trial,ann,"a\\,b,c\\\\d",2,2024-03-01T22:00:00Z,2024-03-02T01:30:00.25Z,3600.000000',
        "0,notebook,ann,,2,2024-03-01T22:00:00Z,,0.000000",
    ]
    lines = reports.allocations_csv([entry, task]).splitlines()
    assert lines[1] == ("3.7.1,TRIAL,ann,vision,3,2,2024-03-01T22:00:00Z,"
                        "2024-03-02T01:30:00.25Z,0.0,2.000000,gpus")
    assert lines[2].startswith("f00.1,NOTEBOOK,ann,vision,,2,")


# -- the CLI ---------------------------------------------------------------------------------

@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeMaster:
    master = FakeMaster()
    monkeypatch.setattr(cli.client, "transport_factory", master.transport)
    return master


def run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", "EPOCHAL_MASTER": None})


def test_cli_aggregated_shows_slot_hours_by_grouping(fake: FakeMaster) -> None:
    entry = {"periodStart": "2024-03-01", "period": DAILY, "seconds": 7200.0,
             "byUsername": {"ann": 5400.0, "bob": 1800.0}, "byWorkspace": {"vision": 7200.0},
             "byResourcePool": {"gpus": 7200.0}, "byExperimentLabel": {}}
    fake.on("GET", "/resources/allocation/aggregated", {"resourceEntries": [entry]})
    result = run("resources", "aggregated", "2024-03-01", "2024-03-01")
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in result.stdout.splitlines()]
    assert ["2024-03-01", "total", "-", "2.00"] in lines
    assert ["2024-03-01", "user", "ann", "1.50"] in lines
    assert ["2024-03-01", "workspace", "vision", "2.00"] in lines
    sent = fake.sent("GET", "/resources/allocation/aggregated")[0].url.params
    assert dict(sent) == {"startDate": "2024-03-01", "endDate": "2024-03-01", "period": DAILY}

    result = run("resources", "aggregated", "2024-03", "2024-04", "--monthly", "--json")
    assert json.loads(result.stdout) == {"resourceEntries": [entry]}
    assert fake.sent("GET", "/resources/allocation/aggregated")[1].url.params[
        "period"] == MONTHLY


def test_cli_raw_lists_allocations_and_says_why_it_was_refused(fake: FakeMaster) -> None:
    entry = reports.raw_entry(row())
    fake.on("GET", "/resources/allocation/raw", {"resourceEntries": [entry]})
    result = run("resources", "raw", "2024-03-01T00:00:00Z", "2024-03-03T00:00:00Z")
    assert result.exit_code == 0, result.output
    [line] = [line for line in result.stdout.splitlines() if "3.7.1" in line]
    assert line.split()[:9] == ["3.7.1", "trial", "ann", "vision", "3", "7", "gpus", "2",
                                "agent-1"]
    assert line.split()[-2:] == ["1.00", "2.00"]
    import httpx

    fake.on("GET", "/resources/allocation/raw", httpx.Response(400, json={
        "message": "invalid timestampAfter",
        "details": ["timestampAfter: an RFC 3339 timestamp such as 2024-01-02T03:04:05Z"]}))
    result = run("resources", "raw", "soon", "later")
    assert result.exit_code == 1
    assert "timestampAfter: an RFC 3339 timestamp" in result.output
