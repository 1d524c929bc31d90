"""Determined's experiment queries over real HTTP: list filters and paging, archive, delete,
trial workloads and log tails (what `det` asks; tests/determined/test_det_cli.py runs `det`)."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.test_api import create, wait_for_trials
from tests.master_fixtures import LiveMaster

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def _ended(api: httpx.AsyncClient, experiment_id: int) -> None:
    assert (await api.post(f"/api/v1/experiments/{experiment_id}/kill")).status_code == 200
    for _ in range(300):
        state = (await api.get(f"/api/v1/experiments/{experiment_id}")).json()["experiment"][
            "state"]
        if state == "STATE_CANCELED":
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"experiment {experiment_id} never ended: {state}")


async def _listed(api: httpx.AsyncClient, **params: Any) -> dict[str, Any]:
    answer = await api.get("/api/v1/experiments", params=params)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def test_list_filters_sorts_and_pages(api: httpx.AsyncClient) -> None:
    tag = uuid.uuid4().hex[:8]
    first = (await create(api, name=f"q-{tag}-alpha", labels=["red", "big"]))["experiment"]
    second = (await create(api, name=f"Q-{tag}-beta", labels=["red"]))["experiment"]

    named = await _listed(api, name=f"q-{tag}")  # a case-insensitive substring
    assert [e["id"] for e in named["experiments"]] == [first["id"], second["id"]]  # ascending
    assert [e["id"] for e in (await _listed(api, name=tag, labels=["red", "big"]))[
        "experiments"]] == [first["id"]]
    assert (await _listed(api, name=tag, users=["nobody"]))["experiments"] == []
    assert len((await _listed(api, name=tag, users=["admin"]))["experiments"]) == 2
    by_name = await _listed(api, name=tag, sortBy="SORT_BY_NAME", orderBy="ORDER_BY_DESC")
    assert [e["name"] for e in by_name["experiments"]] == [f"q-{tag}-alpha", f"Q-{tag}-beta"]

    page = await _listed(api, name=tag, limit=1, offset=1)
    assert [e["id"] for e in page["experiments"]] == [second["id"]]
    assert page["pagination"] == {"offset": 1, "limit": 1, "startIndex": 1, "endIndex": 2,
                                  "total": 2}
    experiment = page["experiments"][0]  # Determined's required v1Experiment fields
    assert experiment["jobId"] == f"experiment-{second['id']}"
    assert experiment["projectId"] == 1 and "name: " in experiment["originalConfig"]
    assert experiment["config"]["searcher"]["metric"] == "loss"

    bad = await api.get("/api/v1/experiments", params={"sortBy": "SORT_BY_SHOE_SIZE"})
    assert bad.status_code == 400 and bad.json()["details"][0].startswith("sortBy:")
    for experiment_id in (first["id"], second["id"]):
        await api.post(f"/api/v1/experiments/{experiment_id}/kill")


async def test_search_words_match_id_name_description_and_owner(api: httpx.AsyncClient) -> None:
    """`search` (the dashboard's box) narrows the total too, so a pager over it is true."""
    tag = uuid.uuid4().hex[:8]
    first = (await create(api, name=f"s-{tag}-alpha"))["experiment"]
    second = (await create(api, name=f"s-{tag}-beta"))["experiment"]
    both = await _listed(api, search=f"  {tag.upper()} ", sortBy="SORT_BY_DURATION")
    assert {e["id"] for e in both["experiments"]} == {first["id"], second["id"]}
    one = await _listed(api, search=f"{tag} beta admin", limit=1)
    assert [e["id"] for e in one["experiments"]] == [second["id"]]
    assert one["pagination"]["total"] == 1
    assert (await _listed(api, search=f"{tag} gamma"))["pagination"]["total"] == 0
    by_id = await _listed(api, search=f"{first['id']} alpha", name=tag)
    assert [e["id"] for e in by_id["experiments"]] == [first["id"]]
    assert (await _listed(api, search=f"{first['id']}0000 alpha", name=tag))["experiments"] == []
    for sort in ("SORT_BY_PROJECT", "SORT_BY_LABELS", "SORT_BY_SEARCHER_METRIC_VAL"):
        assert (await _listed(api, search=tag, sortBy=sort))["pagination"]["total"] == 2, sort

    too_long = await api.get("/api/v1/experiments", params={"search": "x" * 201})
    assert too_long.status_code == 400 and "search" in too_long.text, too_long.text
    for experiment_id in (first["id"], second["id"]):
        await api.post(f"/api/v1/experiments/{experiment_id}/kill")


async def test_archive_only_ended_experiments(api: httpx.AsyncClient) -> None:
    tag = uuid.uuid4().hex[:8]
    experiment_id = (await create(api, name=f"archive-{tag}"))["experiment"]["id"]
    refused = await api.post(f"/api/v1/experiments/{experiment_id}/archive")
    assert refused.status_code == 409 and "ACTIVE" in refused.json()["message"]

    await _ended(api, experiment_id)
    assert (await api.post(f"/api/v1/experiments/{experiment_id}/archive")).status_code == 200
    assert (await _listed(api, name=tag, archived="false"))["experiments"] == []
    assert [e["archived"] for e in (await _listed(api, name=tag, archived="true"))[
        "experiments"]] == [True]
    assert len((await _listed(api, name=tag))["experiments"]) == 1  # no filter: both
    assert (await api.post(f"/api/v1/experiments/{experiment_id}/unarchive")).status_code == 200
    assert len((await _listed(api, name=tag, archived="false"))["experiments"]) == 1


async def test_delete_removes_rows_and_checkpoint_files(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    created = await create(api)
    experiment_id = created["experiment"]["id"]
    trial = (await wait_for_trials(api, experiment_id, 2))[0]
    checkpoint = str(uuid.uuid4())
    reported = await api.post(
        "/api/v1/checkpoints",
        headers=live_master.agent_headers,
        json={"uuid": checkpoint, "taskId": trial["taskId"], "resources": {"w.bin": 3},
              "metadata": {"steps_completed": 5}},
    )
    assert reported.status_code == 200, reported.text
    stored = Path((await api.get(f"/api/v1/checkpoints/{checkpoint}")).json()["checkpoint"][
        "storagePath"])
    stored.mkdir(parents=True)
    (stored / "w.bin").write_bytes(b"abc")
    outside = Path(created["config"]["checkpoint_storage"]["host_path"]).parent / "keep.txt"
    outside.write_text("not the experiment's")

    refused = await api.delete(f"/api/v1/experiments/{experiment_id}")
    assert refused.status_code == 409
    assert stored.exists()

    await _ended(api, experiment_id)
    assert (await api.delete(f"/api/v1/experiments/{experiment_id}")).status_code == 200
    assert not stored.exists() and outside.exists()
    assert (await api.get(f"/api/v1/experiments/{experiment_id}")).status_code == 404
    assert (await api.get(f"/api/v1/checkpoints/{checkpoint}")).status_code == 404
    assert (await api.delete(f"/api/v1/experiments/{experiment_id}")).status_code == 404


async def test_workloads_and_log_tail(api: httpx.AsyncClient, live_master: LiveMaster) -> None:
    experiment_id = (await create(api))["experiment"]["id"]
    trial = (await wait_for_trials(api, experiment_id, 2))[0]
    tid = trial["id"]
    for group, steps, value in (("training", 5, 1.0), ("validation", 5, 0.5),
                                ("training", 10, 0.8)):
        body = {"group": group, "metrics": {"trialId": tid, "trialRunId": 1,
                                            "stepsCompleted": steps,
                                            "metrics": {"avgMetrics": {"loss": value}}}}
        answer = await api.post(f"/api/v1/trials/{tid}/metrics", json=body,
                                headers=live_master.agent_headers)
        assert answer.status_code == 200, answer.text
    workloads = (await api.get(f"/api/v1/trials/{tid}/workloads")).json()
    assert [(next(iter(w)), next(iter(w.values()))["totalBatches"])
            for w in workloads["workloads"]] == [("training", 5), ("validation", 5),
                                                  ("training", 10)]
    assert workloads["workloads"][1]["validation"]["metrics"] == {"avgMetrics": {"loss": 0.5}}
    only = (await api.get(f"/api/v1/trials/{tid}/workloads",
                          params={"filter": "FILTER_OPTION_VALIDATION"})).json()["workloads"]
    assert len(only) == 1
    bad = await api.get(f"/api/v1/trials/{tid}/workloads", params={"filter": "nope"})
    assert bad.status_code == 400 and bad.json()["details"][0].startswith("filter:")

    described = (await api.get(f"/api/v1/trials/{tid}")).json()["trial"]
    assert described["summaryMetrics"]["avg_metrics"]["loss"] == {
        "count": 2, "sum": 1.8, "min": 0.8, "max": 1.0, "last": 0.8, "type": "number"}
    assert described["latestValidation"]["metrics"] == {"avgMetrics": {"loss": 0.5}}
    assert described["latestValidation"]["totalBatches"] == 5

    lines = [{"taskId": trial["taskId"], "allocationId": f"{trial['taskId']}.1",
              "timestamp": f"2026-01-01T00:00:0{i}Z", "stdtype": "stdout", "log": f"line {i}\n"}
             for i in range(5)]
    answer = await api.post("/api/v1/task/logs", json={"logs": lines},
                            headers=live_master.agent_headers)
    assert answer.status_code == 200, answer.text
    tail = await api.get(f"/api/v1/trials/{tid}/logs",
                         params={"limit": 2, "orderBy": "ORDER_BY_DESC"})
    results = [line for line in tail.text.splitlines() if line]
    assert [r.split('"log": "')[1][:6] for r in results] == ["line 4", "line 3"]
    assert '"level": "LOG_LEVEL_INFO"' in results[0] and '"message": "[' in results[0]
    await api.post(f"/api/v1/experiments/{experiment_id}/kill")


async def test_trials_are_sorted_and_paged_by_their_best_validation_in_sql(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    """Each trial's best validation is kept as reports arrive (a re-sent report replaces its
    value); the trials list, the stream and the experiment's best trial read it."""
    config = {"name": "paged", "searcher": {"name": "random", "metric": "loss", "max_trials": 5,
                                            "max_length": {"batches": 10}},
              "resources": {"resource_pool": "default"}}
    async with live_master.pool.acquire() as conn:
        experiment_id = await conn.fetchval(
            "INSERT INTO experiments (name, config, original_config, seed, state, owner)"
            " VALUES ('paged', $1, '', 1, 'ACTIVE', 'admin') RETURNING id", config)
        ids = [await conn.fetchval(
            "INSERT INTO trials (experiment_id, request_id, hparams, seed, state)"
            " VALUES ($1, $2, '{}', 1, $3) RETURNING id", experiment_id, i,
            "COMPLETED" if i < 4 else "RUNNING") for i in range(5)]
    a, b, c, d, e = ids
    for tid, steps, loss in ((a, 5, 0.5), (a, 10, 0.3), (b, 5, 0.2), (c, 5, 0.9),
                             (e, 5, 0.4), (e, 5, 0.6)):  # e's report is sent again, changed
        body = {"group": "validation", "metrics": {
            "trialId": tid, "trialRunId": 1, "stepsCompleted": steps,
            "metrics": {"avgMetrics": {"loss": loss}}}}
        answer = await api.post(f"/api/v1/trials/{tid}/metrics", json=body,
                                headers=live_master.agent_headers)
        assert answer.status_code == 200, answer.text

    async def page(**params: Any) -> dict[str, Any]:
        answer = await api.get(f"/api/v1/experiments/{experiment_id}/trials", params=params)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    best = "SORT_BY_BEST_VALIDATION_METRIC"
    first = await page(sortBy=best, limit=2)
    assert [t["id"] for t in first["trials"]] == [b, a]
    assert [t["searcherMetricValue"] for t in first["trials"]] == [0.2, 0.3]
    assert first["pagination"] == {"offset": 0, "limit": 2, "startIndex": 0, "endIndex": 2,
                                   "total": 5}
    assert first["trials"][1]["bestValidation"]["totalBatches"] == 10
    assert [t["id"] for t in (await page(sortBy=best, limit=2, offset=3))["trials"]] == [c, d]
    assert [t["id"] for t in (await page(sortBy=best, orderBy="ORDER_BY_DESC"))["trials"]] == [
        c, e, a, b, d]  # nulls last either way
    running = await page(states=["STATE_RUNNING"])
    assert [t["id"] for t in running["trials"]] == [e] and running["pagination"]["total"] == 1
    everything = await page()
    assert [t["id"] for t in everything["trials"]] == ids
    assert everything["pagination"]["limit"] == 5

    experiment = (await api.get(f"/api/v1/experiments/{experiment_id}")).json()["experiment"]
    assert (experiment["bestTrialId"], experiment["bestValidation"]) == (b, 0.2)
    assert experiment["numTrials"] == 5

    async with api.stream("GET", f"/api/v1/experiments/{experiment_id}/stream",
                          params={"limit": 2, "sortBy": best}) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                streamed = json.loads(line.removeprefix("data:"))
                break
    assert [t["id"] for t in streamed["trials"]] == [b, a]
    assert streamed["pagination"]["total"] == 5
    too_many = await api.get(f"/api/v1/experiments/{experiment_id}/stream",
                             params={"limit": 100_000})
    assert too_many.status_code == 400
    await live_master.pool.execute("DELETE FROM experiments WHERE id = $1", experiment_id)


async def test_trials_sort_by_a_hyperparameter_and_importance_ranks_them(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    """Any hyperparameter (nested: dotted) sorts the trials in SQL; importance names the one
    that decides the searcher metric."""
    config = {"name": "by-hparam", "entrypoint": "python3 train.py",
              "searcher": {"name": "random", "metric": "loss", "max_trials": 30,
                           "max_length": {"batches": 10}},
              "resources": {"resource_pool": "default"},
              "hyperparameters": {"lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1},
                                  "opt": {"m": {"type": "double", "minval": 0, "maxval": 1}},
                                  "fixed": 3}}
    rows = [(10 ** (-4 + 3 * ((i * 0.618) % 1)), (i * 0.414) % 1) for i in range(30)]
    async with live_master.pool.acquire() as conn:
        experiment_id = await conn.fetchval(
            "INSERT INTO experiments (name, config, original_config, seed, state, owner)"
            " VALUES ('by-hparam', $1, '', 1, 'COMPLETED', 'admin') RETURNING id", config)
        ids = [await conn.fetchval(
            "INSERT INTO trials (experiment_id, request_id, hparams, seed, state,"
            " searcher_metric_value) VALUES ($1, $2, $3, 1, 'COMPLETED', $4) RETURNING id",
            experiment_id, i, {"lr": lr, "opt": {"m": m}, "fixed": 3},
            abs(math.log10(lr) + 2.5) + 0.1 * m) for i, (lr, m) in enumerate(rows)]

    async def order(**params: Any) -> list[int]:
        answer = await api.get(f"/api/v1/experiments/{experiment_id}/trials", params=params)
        assert answer.status_code == 200, answer.text
        return [t["id"] for t in answer.json()["trials"]]

    by_m = [ids[i] for i in sorted(range(30), key=lambda i: rows[i][1])]
    assert await order(sortBy="hp.opt.m") == by_m
    assert await order(sortBy="hp.opt.m", orderBy="ORDER_BY_DESC") == by_m[::-1]
    assert await order(sortBy="hp.opt.m", limit=3, offset=2) == by_m[2:5]
    bad = await api.get(f"/api/v1/experiments/{experiment_id}/trials",
                        params={"sortBy": "hp.opt m; DROP TABLE trials"})
    assert bad.status_code == 400 and "sortBy" in bad.text

    # Filters: every condition holds; numbers compare as numbers, text as text.
    low_m = [ids[i] for i in range(30) if rows[i][1] < 0.5]
    assert await order(filter=["hp.opt.m<0.5"]) == low_m
    good = [ids[i] for i in range(30)
            if abs(math.log10(rows[i][0]) + 2.5) + 0.1 * rows[i][1] <= 0.5 and rows[i][0] > 1e-3]
    assert await order(filter=["searcherMetric<=0.5", "hp.lr > 0.001"]) == good
    assert await order(filter=["hp.fixed=3"]) == ids and await order(filter=["hp.fixed!=3"]) == []
    assert await order(filter=["id<=" + str(ids[2] + 0.5)]) == ids[:3]
    # A hyperparameter that is text in some trials and a number in others compares with each.
    await live_master.pool.execute(
        "UPDATE trials SET hparams = jsonb_set(hparams, '{opt,m}', '\"adam\"')"
        " WHERE id = $1", ids[0])
    assert ids[0] not in await order(filter=["hp.opt.m<0.5"])
    assert await order(filter=["hp.opt.m=adam"]) == [ids[0]]
    for condition, named in (("hp.lr<tiny", "not a number"), ("color=red", "not a field"),
                             ("hp.lr", "expected <field><op><value>"),
                             ("batches=many", "not a number"), ("hp.lr<nan", "finite"),
                             ("id>1.5e999", "finite")):
        bad = await api.get(f"/api/v1/experiments/{experiment_id}/trials",
                            params={"filter": condition})
        assert bad.status_code == 400 and named in bad.text, bad.text
    too_many = await api.get(f"/api/v1/experiments/{experiment_id}/trials",
                             params={"filter": ["hp.lr>0"] * 21})
    assert too_many.status_code == 400

    answer = await api.get(f"/api/v1/experiments/{experiment_id}/hyperparameter-importance")
    assert answer.status_code == 200, answer.text
    found = answer.json()
    assert (found["metric"], found["trials"]) == ("loss", 30)
    assert list(found["importance"])[0] == "lr" and set(found["importance"]) == {"lr", "opt.m"}
    assert (found["method"], found["resamples"]) == ("fANOVA", 10)
    assert set(found["spread"]) == {"lr", "opt.m"}
    missing = await api.get("/api/v1/experiments/987654321/hyperparameter-importance")
    assert missing.status_code == 404
    await live_master.pool.execute("DELETE FROM experiments WHERE id = $1", experiment_id)


async def test_notes_and_the_model_definitions_files(api: httpx.AsyncClient) -> None:
    """Determined's notes (PatchExperiment), GetModelDefTree and GetModelDefFile."""
    experiment_id = (await create(api))["experiment"]["id"]
    patched = await api.patch(f"/api/v1/experiments/{experiment_id}",
                              json={"notes": "lr 0.2 looks best"})
    assert patched.status_code == 200, patched.text
    assert patched.json()["experiment"]["notes"] == "lr 0.2 looks best"
    shown = (await api.get(f"/api/v1/experiments/{experiment_id}")).json()["experiment"]
    assert shown["notes"] == "lr 0.2 looks best"
    too_long = await api.patch(f"/api/v1/experiments/{experiment_id}",
                               json={"notes": "x" * 100_001})
    assert too_long.status_code == 400 and "notes" in too_long.text

    tree = (await api.get(f"/api/v1/experiments/{experiment_id}/file_tree")).json()["files"]
    assert [(n["path"], n["isDir"], n["contentLength"]) for n in tree] == [
        ("train.py", False, len(b"print('hi')\n"))]
    answer = await api.post(f"/api/v1/experiments/{experiment_id}/file",
                            json={"path": "train.py"})
    assert answer.status_code == 200, answer.text
    assert base64.b64decode(answer.json()["file"]) == b"print('hi')\n"
    missing = await api.post(f"/api/v1/experiments/{experiment_id}/file",
                             json={"path": "../etc/passwd"})
    assert missing.status_code == 404 and "no file" in missing.json()["message"]
    await api.post(f"/api/v1/experiments/{experiment_id}/kill")


async def test_progress_counts_trials_against_the_plan_and_survives_a_cancel(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    """Progress is the trials' against the searcher's planned total (a COMPLETED trial counts
    whole), so it never falls back when ASHA starts new trials or the experiment is canceled."""
    config = {"name": "progress", "searcher": {"name": "random", "metric": "loss",
                                               "max_trials": 4, "max_length": {"batches": 10}},
              "resources": {"resource_pool": "default"}}
    async with live_master.pool.acquire() as conn:
        experiment_id = await conn.fetchval(
            "INSERT INTO experiments (name, config, original_config, seed, state, owner,"
            " planned_trials) VALUES ('progress', $1, '', 1, 'ACTIVE', 'admin', 4) RETURNING id",
            config)
        for i, (state, progress) in enumerate((("COMPLETED", 0.3), ("RUNNING", 0.5))):
            await conn.execute(
                "INSERT INTO trials (experiment_id, request_id, hparams, seed, state, progress)"
                " VALUES ($1, $2, '{}', 1, $3, $4)", experiment_id, i, state, progress)

    async def progress() -> float:
        answer = await api.get(f"/api/v1/experiments/{experiment_id}")
        return float(answer.json()["experiment"]["progress"])

    assert await progress() == pytest.approx((1 + 0.5) / 4)
    await live_master.pool.execute(
        "UPDATE trials SET state = 'CANCELED' WHERE experiment_id = $1 AND state = 'RUNNING'",
        experiment_id)
    await live_master.pool.execute(
        "UPDATE experiments SET state = 'CANCELED', end_time = now() WHERE id = $1",
        experiment_id)
    assert await progress() == pytest.approx((1 + 0.5) / 4)
    listed = (await api.get("/api/v1/experiments", params={
        "name": "progress", "sortBy": "SORT_BY_PROGRESS", "limit": 1000})).json()
    assert any(e["id"] == experiment_id and e["progress"] == pytest.approx(0.375)
               for e in listed["experiments"])
    await live_master.pool.execute(
        "UPDATE experiments SET state = 'COMPLETED' WHERE id = $1", experiment_id)
    assert await progress() == 1.0
    await live_master.pool.execute("DELETE FROM experiments WHERE id = $1", experiment_id)
