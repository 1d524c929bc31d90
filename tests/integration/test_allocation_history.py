"""The allocation history (issue 38, "a record of who used what") against the session's
PostgreSQL and the live master: the activities that record trial and task states write and
close its rows idempotently, the queries clip slot time to each UTC day or month, and the
routes answer admins only, refusing bad input with a 400 that names the field.

The clipping tests write their own rows in 2001, a year no other test's allocations overlap;
they delete them after.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest
import pytest_asyncio

from activities.experiment_store import ExperimentStore
from activities.task_store import TaskStore
from api.auth import open_session
from common.expconf import validate_experiment_config
from common.states import TaskState, TrialState
from common.temporal_names import allocation_id
from tests.master_fixtures import LiveMaster
from wire.workflow_io import RecordTaskStateInput, RecordTrialStateInput

pytestmark = pytest.mark.asyncio(loop_scope="session")

DAILY = "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY"
MONTHLY = "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_MONTHLY"


async def _user(pool: asyncpg.Pool) -> tuple[int, str]:
    name = f"usage-{uuid.uuid4().hex[:8]}"
    user_id: int = await pool.fetchval(
        "INSERT INTO users (username, admin, active) VALUES ($1, false, true) RETURNING id",
        name)
    return user_id, name


async def _workspace(pool: asyncpg.Pool, owner: str) -> tuple[int, int, str]:
    name = f"ws-{uuid.uuid4().hex[:8]}"
    workspace_id: int = await pool.fetchval(
        "INSERT INTO workspaces (name, owner) VALUES ($1, $2) RETURNING id", name, owner)
    project_id: int = await pool.fetchval(
        "INSERT INTO projects (workspace_id, name, key, owner) VALUES ($1, 'p', $2, $3)"
        " RETURNING id", workspace_id, uuid.uuid4().hex[:8].upper(), owner)
    return workspace_id, project_id, name


async def _trial(pool: asyncpg.Pool, owner: str, project_id: int, *, slots: int = 2,
                 resource_pool: str = "gpus") -> tuple[int, int]:
    # A whole stored config, as the API stores one: other tests of the session list every
    # experiment, and this one is finished so that none waits for it.
    config = validate_experiment_config({
        "name": "usage", "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
        "resources": {"slots_per_trial": slots, "resource_pool": resource_pool},
    }).model_dump(mode="json")
    experiment_id: int = await pool.fetchval(
        "INSERT INTO experiments (name, config, original_config, seed, owner, project_id,"
        " labels, state) VALUES ('usage', $1, '', 1, $2, $3, '{vision,big}', 'COMPLETED')"
        " RETURNING id",
        config, owner, project_id)
    trial_id: int = await pool.fetchval(
        "INSERT INTO trials (experiment_id, request_id, hparams, seed)"
        " VALUES ($1, 0, '{}', 1) RETURNING id", experiment_id)
    return experiment_id, trial_id


async def _rows(pool: asyncpg.Pool, column: str, value: object) -> list[asyncpg.Record]:
    return list(await pool.fetch(
        f"SELECT * FROM allocation_history WHERE {column} = $1 ORDER BY id", value))  # noqa: S608


async def test_a_trials_runs_are_recorded_once_and_each_closed(pool: asyncpg.Pool) -> None:
    user_id, name = await _user(pool)
    workspace_id, project_id, workspace = await _workspace(pool, name)
    experiment_id, trial_id = await _trial(pool, name, project_id)
    store = ExperimentStore(pool)

    async def record(state: TrialState, run_id: int | None = None, *,
                     ended: bool = False) -> None:
        await store.record_trial_state(RecordTrialStateInput(
            trial_id=trial_id, state=state, run_id=run_id, ended=ended, agent_id="agent-a"))

    await record(TrialState.QUEUED)
    assert await _rows(pool, "trial_id", trial_id) == []
    await record(TrialState.RUNNING, 1)
    await record(TrialState.RUNNING, 1)  # a retried activity writes nothing twice
    [first] = await _rows(pool, "trial_id", trial_id)
    assert first["allocation_id"] == allocation_id(experiment_id, trial_id, 1)
    assert first["task_id"] == f"{experiment_id}.{trial_id}"
    assert (first["task_type"], first["experiment_id"], first["run_id"]) == ("TRIAL",
                                                                             experiment_id, 1)
    assert (first["user_id"], first["username"]) == (user_id, name)
    assert (first["workspace_id"], first["workspace_name"]) == (workspace_id, workspace)
    assert (first["slots"], first["resource_pool"]) == (2, "gpus")
    assert first["agent_ids"] == ["agent-a"] and sorted(first["labels"]) == ["big", "vision"]
    assert first["end_time"] is None
    assert abs(first["start_time"] - datetime.now(UTC)) < timedelta(minutes=1)

    await record(TrialState.QUEUED)  # the run failed: its slots went back
    await record(TrialState.QUEUED)
    [first] = await _rows(pool, "trial_id", trial_id)
    assert first["end_time"] is not None and first["end_time"] >= first["start_time"]

    # Run 2 starts; its end is never written (the master died); run 3's start closes it.
    await record(TrialState.RUNNING, 2)
    await record(TrialState.RUNNING, 3)
    _, second, third = await _rows(pool, "trial_id", trial_id)
    assert second["run_id"] == 2 and second["end_time"] is not None
    assert third["run_id"] == 3 and third["end_time"] is None
    await record(TrialState.COMPLETED, ended=True)
    ended = await _rows(pool, "trial_id", trial_id)
    assert all(r["end_time"] is not None for r in ended)
    await record(TrialState.COMPLETED, ended=True)  # retried: the ends stay
    assert await _rows(pool, "trial_id", trial_id) == ended

    # `det experiment continue`: the trial's runs count from 1 again, a new allocation.
    await record(TrialState.RUNNING, 1)
    rows = await _rows(pool, "trial_id", trial_id)
    assert [r["run_id"] for r in rows] == [1, 2, 3, 1] and rows[-1]["end_time"] is None
    await record(TrialState.CANCELED, ended=True)
    assert await pool.fetchval(
        "SELECT count(*) FROM allocation_history WHERE trial_id = $1 AND end_time IS NULL",
        trial_id) == 0


async def test_a_tasks_one_allocation_is_recorded_from_starting_to_terminated(
    pool: asyncpg.Pool,
) -> None:
    user_id, name = await _user(pool)
    workspace_id, _, workspace = await _workspace(pool, name)
    task_id = str(uuid.uuid4())
    await pool.execute(
        "INSERT INTO tasks (id, task_type, owner_id, workspace_id, description, config,"
        " resource_pool, slots, secret) VALUES ($1, 'NOTEBOOK', $2, $3, 'nb', '{}', 'default',"
        " 1, 'x')", task_id, user_id, workspace_id)
    store = TaskStore(pool)

    async def record(state: TaskState) -> None:
        await store.record_task_state(RecordTaskStateInput(
            task_id=task_id, state=state, agent_id="agent-b",
            exit_status="done" if state == TaskState.TERMINATED else None))

    await record(TaskState.STARTING)
    await record(TaskState.STARTING)
    [row] = await _rows(pool, "task_id", task_id)
    assert (row["allocation_id"], row["task_type"], row["experiment_id"], row["trial_id"]) == (
        f"{task_id}.1", "NOTEBOOK", None, None)
    assert (row["user_id"], row["username"], row["workspace_name"]) == (user_id, name,
                                                                         workspace)
    assert (row["slots"], row["resource_pool"], row["agent_ids"]) == (1, "default",
                                                                       ["agent-b"])
    await record(TaskState.TERMINATING)  # still holding its slots
    assert (await _rows(pool, "task_id", task_id))[0]["end_time"] is None
    await record(TaskState.TERMINATED)
    await record(TaskState.STARTING)  # late: the task stays ended, and so does its record
    [row] = await _rows(pool, "task_id", task_id)
    assert row["end_time"] is not None

    # A task killed while it waited for slots held none: nothing is recorded.
    waited = str(uuid.uuid4())
    await pool.execute(
        "INSERT INTO tasks (id, task_type, owner_id, workspace_id, description, config,"
        " resource_pool, slots, secret) VALUES ($1, 'COMMAND', $2, 1, 'c', '{}', 'default',"
        " 1, 'x')", waited, user_id)
    await store.record_task_state(RecordTaskStateInput(
        task_id=waited, state=TaskState.TERMINATED, exit_status="killed"))
    assert await _rows(pool, "task_id", waited) == []


# -- clipping, through the routes -------------------------------------------------------------

def _t(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest_asyncio.fixture(loop_scope="session")
async def history_2001(pool: asyncpg.Pool) -> AsyncIterator[dict[str, Any]]:
    """Allocations in 2001: across a midnight, across a month's end, a task's, and one still
    open (it counts until now)."""
    _, name = await _user(pool)
    other_id, other = await _user(pool)
    workspace_id, project_id, workspace = await _workspace(pool, name)
    experiment_id, trial_id = await _trial(pool, name, project_id)
    mark = uuid.uuid4().hex[:8]
    rows = [  # allocation, user id, username, workspace, labels, pool, slots, start, end
        (f"{mark}.1", None, name, workspace_id, ["vision"], "gpus", 2,
         _t("2001-03-01 22:00"), _t("2001-03-02 01:00")),
        (f"{mark}.2", other_id, other, 1, [], "default", 1,
         _t("2001-03-31 23:30"), _t("2001-04-01 00:30")),
        (f"{mark}.3", other_id, other, 1, [], "default", 4,
         _t("2001-03-02 12:00"), None),
    ]
    await pool.executemany(
        "INSERT INTO allocation_history (allocation_id, task_id, task_type, experiment_id,"
        " trial_id, user_id, username, workspace_id, labels, resource_pool, slots,"
        " start_time, end_time) VALUES ($1, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        [(a, "TRIAL" if i == 0 else "COMMAND", experiment_id if i == 0 else None,
          trial_id if i == 0 else None, uid, user, ws, labels, rp, slots, start, end)
         for i, (a, uid, user, ws, labels, rp, slots, start, end) in enumerate(rows)])
    # The experiment's labels now are what the reports show.
    await pool.execute("UPDATE experiments SET labels = '{vision,relabelled}' WHERE id = $1",
                       experiment_id)
    try:
        yield {"mark": mark, "name": name, "other": other, "workspace": workspace,
               "experiment_id": experiment_id}
    finally:
        await pool.execute("DELETE FROM allocation_history WHERE allocation_id LIKE $1",
                           f"{mark}.%")


async def test_aggregated_slot_seconds_are_clipped_to_each_utc_day(
    api: httpx.AsyncClient, history_2001: dict[str, Any],
) -> None:
    name, other, workspace = history_2001["name"], history_2001["other"], history_2001["workspace"]
    answer = await api.get("/api/v1/resources/allocation/aggregated", params={
        "startDate": "2001-03-01", "endDate": "2001-03-03", "period": DAILY})
    assert answer.status_code == 200, answer.text
    days = {e["periodStart"]: e for e in answer.json()["resourceEntries"]}
    assert list(days) == ["2001-03-01", "2001-03-02", "2001-03-03"]
    hour = 3600.0
    # Day 1: two hours on 2 slots. Day 2: one hour on 2 slots, and the open one's 12 h on 4.
    assert days["2001-03-01"]["seconds"] == pytest.approx(2 * 2 * hour)
    assert days["2001-03-01"]["byUsername"] == {name: pytest.approx(4 * hour)}
    assert days["2001-03-01"]["byExperimentLabel"] == {
        "vision": pytest.approx(4 * hour), "relabelled": pytest.approx(4 * hour)}
    assert days["2001-03-01"]["byResourcePool"] == {"gpus": pytest.approx(4 * hour)}
    assert days["2001-03-01"]["byWorkspace"] == {workspace: pytest.approx(4 * hour)}
    assert days["2001-03-01"]["period"] == DAILY
    assert days["2001-03-02"]["byUsername"] == {name: pytest.approx(2 * hour),
                                                other: pytest.approx(12 * 4 * hour)}
    assert days["2001-03-02"]["byWorkspace"] == {workspace: pytest.approx(2 * hour),
                                                 "Uncategorized": pytest.approx(48 * hour)}
    assert days["2001-03-03"]["seconds"] == pytest.approx(24 * 4 * hour)

    # Months: March holds all but the half hour after midnight on April 1st.
    monthly = await api.get("/api/v1/resources/allocation/aggregated", params={
        "start_date": "2001-03", "end_date": "2001-04", "period": MONTHLY})
    assert monthly.status_code == 200, monthly.text
    march, april = monthly.json()["resourceEntries"]
    assert (march["periodStart"], april["periodStart"]) == ("2001-03", "2001-04")
    open_march = (29 * 24 + 12) * 4 * hour  # the open one, from the 2nd at noon
    assert march["seconds"] == pytest.approx(6 * hour + 0.5 * hour + open_march)
    assert april["seconds"] == pytest.approx(0.5 * hour + 30 * 24 * 4 * hour)


async def test_raw_lists_each_allocation_with_its_seconds_in_the_window(
    api: httpx.AsyncClient, history_2001: dict[str, Any],
) -> None:
    mark = history_2001["mark"]
    answer = await api.get("/api/v1/resources/allocation/raw", params={
        "timestamp_after": "2001-03-01T23:00:00Z", "timestamp_before": "2001-03-02T13:00:00Z"})
    assert answer.status_code == 200, answer.text
    mine = {e["allocationId"]: e for e in answer.json()["resourceEntries"]
            if e["allocationId"].startswith(mark)}
    assert set(mine) == {f"{mark}.1", f"{mark}.3"}
    first = mine[f"{mark}.1"]
    assert first["seconds"] == pytest.approx(2 * 3600)  # 23:00 to 01:00, not times its slots
    assert (first["kind"], first["slots"], first["experimentId"]) == (
        "trial", 2, history_2001["experiment_id"])
    assert first["startTime"].startswith("2001-03-01T22:00:00")
    assert mine[f"{mark}.3"]["endTime"] is None
    assert mine[f"{mark}.3"]["seconds"] == pytest.approx(3600)

    csv = await api.get("/resources/allocation/raw", params={
        "timestamp_after": "2001-03-01T23:00:00Z", "timestamp_before": "2001-03-02T13:00:00Z"})
    assert csv.status_code == 200 and csv.headers["content-type"].startswith("text/csv")
    lines = csv.text.splitlines()
    assert lines[0] == "experiment_id,kind,username,labels,slots,start_time,end_time,seconds"
    assert (f"{history_2001['experiment_id']},trial,{history_2001['name']},"
            '"vision,relabelled",2,2001-03-01T22:00:00Z,2001-03-02T01:00:00Z,7200.000000'
            in lines)
    aggregated = await api.get("/resources/allocation/aggregated", params={
        "start_date": "2001-03-01", "end_date": "2001-03-01", "period": DAILY})
    assert aggregated.text.splitlines()[0] == "aggregation_type,aggregation_key,date,seconds"
    assert "total,total,2001-03-01,14400.000000" in aggregated.text.splitlines()
    allocations = await api.get("/resources/allocation/allocations-csv", params={
        "timestamp_after": "2001-03-01T00:00:00Z", "timestamp_before": "2001-03-03T00:00:00Z"})
    assert allocations.text.splitlines()[0] == (
        "allocation_id,task_type,username,workspace_name,experiment_id,slots,start_time,"
        "end_time,imagepulling_time,slot_hours,resource_pool")
    assert any(line.startswith(f"{mark}.1,TRIAL,") and ",6.000000,gpus" in line
               for line in allocations.text.splitlines())


async def test_only_admins_read_usage_and_bad_input_is_named(
    api: httpx.AsyncClient, live_master: LiveMaster, pool: asyncpg.Pool,
) -> None:
    user_id, _ = await _user(pool)
    token = await open_session(pool, user_id, timedelta(minutes=10))
    async with httpx.AsyncClient(base_url=live_master.url, timeout=30,
                                 headers={"Authorization": f"Bearer {token}"}) as user:
        for path, params in (
            ("/api/v1/resources/allocation/raw",
             {"timestampAfter": "2001-01-01T00:00:00Z",
              "timestampBefore": "2001-01-02T00:00:00Z"}),
            ("/api/v1/resources/allocation/aggregated",
             {"startDate": "2001-01-01", "endDate": "2001-01-02", "period": DAILY}),
            ("/resources/allocation/raw",
             {"timestamp_after": "2001-01-01T00:00:00Z",
              "timestamp_before": "2001-01-02T00:00:00Z"}),
        ):
            refused = await user.get(path, params=params)
            assert refused.status_code == 403, refused.text
            assert "admins" in refused.json()["message"]

    bad = [
        ("raw", {"timestampAfter": "yesterday", "timestampBefore": "2001-01-02T00:00:00Z"},
         "timestampAfter"),
        ("raw", {"timestamp_after": "2001-01-01T00:00:00Z"}, "timestamp_before"),
        ("raw", {"timestampAfter": "2001-01-03T00:00:00Z",
                 "timestampBefore": "2001-01-02T00:00:00Z"}, "timestampBefore"),
        ("raw", {"timestampAfter": "2001-01-01T00:00:00Z",
                 "timestampBefore": "2003-01-01T00:00:00Z"}, "timestampBefore"),
        ("raw", {"timestampAfter": "0001-01-01T00:00:00+01:00",
                 "timestampBefore": "2001-01-01T00:00:00Z"}, "timestampAfter"),
        ("aggregated", {"startDate": "2001-02-30", "endDate": "2001-03-01", "period": DAILY},
         "startDate"),
        ("aggregated", {"start_date": "2001-01-01", "end_date": "2002-01-03", "period": DAILY},
         "end_date"),
        ("aggregated", {"startDate": "2001-01-01", "endDate": "2001-01-02", "period": "WEEKLY"},
         "period"),
        ("aggregated", {"startDate": "2001-01-01", "endDate": "2001-01-02"}, "period"),
        ("aggregated", {"startDate": "2001-01", "endDate": "2001-01-05", "period": MONTHLY},
         "endDate"),
        ("aggregated", {"startDate": "1990-01", "endDate": "2001-01", "period": MONTHLY},
         "endDate"),
    ]
    for kind, params, field in bad:
        for prefix in ("/api/v1", ""):
            answer = await api.get(f"{prefix}/resources/allocation/{kind}", params=params)
            assert answer.status_code == 400, (params, answer.text)
            assert answer.json()["details"][0].startswith(f"{field}: "), answer.json()
