"""Reading metrics over HTTP: one trial's reports and Determined's CompareTrials time series.

Trials are rows made directly in the session's database (no workflow needs to run for a read);
their metrics go in through the real write path, `POST /trials/{id}/metrics/batch`.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.master_fixtures import LiveMaster

pytestmark = pytest.mark.asyncio(loop_scope="session")

SEARCHER = {"name": "single", "metric": "loss", "smaller_is_better": True,
            "max_length": {"batches": 1000}}


async def make_trial(master: LiveMaster) -> int:
    config = {"name": "metrics-api", "searcher": SEARCHER,
              "resources": {"resource_pool": "default"}}
    async with master.pool.acquire() as conn:
        experiment_id = await conn.fetchval(
            "INSERT INTO experiments (name, config, original_config, seed, state)"
            " VALUES ('metrics-api', $1, '', 1, 'COMPLETED') RETURNING id",
            config,
        )
        trial_id: int = await conn.fetchval(
            "INSERT INTO trials (experiment_id, request_id, hparams, seed, state)"
            " VALUES ($1, 0, '{}', 1, 'COMPLETED') RETURNING id",
            experiment_id,
        )
    return trial_id


async def report(
    api: httpx.AsyncClient, trial_id: int, group: str, points: dict[int, dict[str, Any]]
) -> None:
    reports = [
        {"group": group,
         "metrics": {"trialId": trial_id, "trialRunId": 1, "stepsCompleted": step,
                     "metrics": {"avgMetrics": values}}}
        for step, values in points.items()
    ]
    answer = await api.post(f"/api/v1/trials/{trial_id}/metrics/batch",
                            json={"reports": reports})
    assert answer.status_code == 200, answer.text


def curve(step: int) -> dict[str, float]:
    return {"loss": 1.0 / step, "accuracy": 1.0 - 1.0 / step, "lr": 0.1}


async def test_trial_metrics_filters_by_group_metric_and_steps(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    trial_id = await make_trial(live_master)
    await report(api, trial_id, "training", {s: curve(s) for s in range(1, 101)})
    await report(api, trial_id, "validation", {s: {"loss": 0.5} for s in (50, 100)})

    everything = (await api.get(f"/api/v1/trials/{trial_id}/metrics")).json()["metrics"]
    assert len(everything) == 102
    assert [m["group"] for m in everything[:2]] == ["training", "training"]
    assert {"group", "stepsCompleted", "trialRunId", "reportTime", "metrics"} <= set(
        everything[0])

    ranged = (await api.get(
        f"/api/v1/trials/{trial_id}/metrics",
        params={"group": "training", "startBatches": 10, "endBatches": 20,
                "metricNames": ["loss"]},
    )).json()["metrics"]
    assert [m["stepsCompleted"] for m in ranged] == list(range(10, 21))
    assert all(set(m["metrics"]) == {"loss"} for m in ranged)

    validation = (await api.get(
        f"/api/v1/trials/{trial_id}/metrics", params={"group": "validation"}
    )).json()["metrics"]
    assert [m["stepsCompleted"] for m in validation] == [50, 100]

    # A metric no report holds: no points, not empty dicts.
    absent = (await api.get(
        f"/api/v1/trials/{trial_id}/metrics", params={"metricNames": "nope"}
    )).json()["metrics"]
    assert absent == []


async def test_downsampling_keeps_first_last_and_spikes(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    trial_id = await make_trial(live_master)
    points = {s: curve(s) for s in range(1, 1001)}
    points[537]["loss"] = 50.0  # a spike a plain stride would skip
    await report(api, trial_id, "training", points)

    one_metric = (await api.get(
        f"/api/v1/trials/{trial_id}/metrics",
        params={"group": "training", "metricNames": "loss", "maxDatapoints": 50},
    )).json()["metrics"]
    steps = [m["stepsCompleted"] for m in one_metric]
    assert len(steps) <= 50
    assert steps[0] == 1 and steps[-1] == 1000
    assert steps == sorted(steps)
    assert 537 in steps

    strided = (await api.get(
        f"/api/v1/trials/{trial_id}/metrics",
        params={"group": "training", "maxDatapoints": 10},
    )).json()["metrics"]
    steps = [m["stepsCompleted"] for m in strided]
    assert 2 <= len(steps) <= 10
    assert steps[0] == 1 and steps[-1] == 1000
    assert set(strided[0]["metrics"]) == {"loss", "accuracy", "lr"}

    for most in (2, 3, 4, 5, 7, 199, 999, 1000):
        for names in ({"metricNames": "loss"}, {}):
            points = (await api.get(
                f"/api/v1/trials/{trial_id}/metrics",
                params={"group": "training", "maxDatapoints": most, **names},
            )).json()["metrics"]
            steps = [m["stepsCompleted"] for m in points]
            assert len(steps) <= most, (most, names, len(steps))
            assert steps[0] == 1 and steps[-1] == 1000, (most, names)
            assert len(steps) == len(set(steps))

    # Downsampling applies after the step range: first and last of the range are kept.
    ranged = (await api.get(
        f"/api/v1/trials/{trial_id}/metrics",
        params={"startBatches": 100, "endBatches": 900, "maxDatapoints": 5},
    )).json()["metrics"]
    steps = [m["stepsCompleted"] for m in ranged]
    assert steps[0] == 100 and steps[-1] == 900 and len(steps) <= 5


async def test_time_series_compares_trials(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    first, second = await make_trial(live_master), await make_trial(live_master)
    await report(api, first, "training", {s: curve(s) for s in range(1, 501)})
    await report(api, first, "validation", {s: {"loss": 2.0 / s} for s in range(100, 501, 100)})
    await report(api, second, "training", {s: curve(s) for s in range(1, 11)})

    answer = await api.get(
        "/api/v1/trials/time-series",
        params={"trialIds": [second, first], "maxDatapoints": 20, "metricNames": ["loss"]},
    )
    assert answer.status_code == 200, answer.text
    trials = answer.json()["trials"]
    assert [t["trial"]["id"] for t in trials] == [second, first]
    assert trials[0]["trial"]["experimentId"] is not None
    series = {m["group"]: m for m in trials[1]["metrics"]}
    assert series["training"]["type"] == "METRIC_TYPE_TRAINING"
    assert series["validation"]["type"] == "METRIC_TYPE_VALIDATION"
    training = series["training"]["data"]
    assert len(training) <= 20
    assert training[0]["batches"] == 1 and training[-1]["batches"] == 500
    assert set(training[0]) == {"batches", "time", "epoch", "values"}
    assert training[0]["values"] == {"loss": 1.0}
    assert math.isclose(training[-1]["values"]["loss"], 1 / 500)
    assert [p["batches"] for p in series["validation"]["data"]] == [100, 200, 300, 400, 500]
    assert len(trials[0]["metrics"][0]["data"]) == 10  # short series: every point

    validation_only = (await api.get(
        "/api/v1/trials/time-series",
        params={"trialIds": first, "metricType": "METRIC_TYPE_VALIDATION"},
    )).json()["trials"][0]["metrics"]
    assert [m["group"] for m in validation_only] == ["validation"]

    ranged = (await api.get(
        "/api/v1/trials/time-series",
        params={"trialIds": first, "group": "training", "startBatches": 10,
                "endBatches": 30, "maxDatapoints": 1000},
    )).json()["trials"][0]["metrics"][0]["data"]
    assert [p["batches"] for p in ranged] == list(range(10, 31))


# Runs in Determined's own venv: its generated client calls CompareTrials and parses the answer.
DET_COMPARE_TRIALS = """
import json, sys
from determined.common import api
from determined.common.api import bindings
master, token, trial_id = sys.argv[1], sys.argv[2], int(sys.argv[3])
session = api.Session(master, "admin", token, None)
answer = bindings.get_CompareTrials(session, trialIds=[trial_id], maxDatapoints=10,
                                    metricNames=["loss"],
                                    metricType=bindings.v1MetricType.TRAINING)
series = answer.trials[0].metrics[0]
print(json.dumps({"trial": answer.trials[0].trial.id, "type": series.type.value,
                  "batches": [p.batches for p in series.data]}))
"""


async def test_determined_client_reads_time_series(
    api: httpx.AsyncClient, live_master: LiveMaster, det_venv: Path
) -> None:
    """The answer parses with Determined's own bindings (v1CompareTrialsResponse)."""
    trial_id = await make_trial(live_master)
    await report(api, trial_id, "training", {s: curve(s) for s in range(1, 101)})
    done = await asyncio.to_thread(
        subprocess.run,
        [str(det_venv / "python"), "-c", DET_COMPARE_TRIALS, live_master.url,
         live_master.admin_token, str(trial_id)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["trial"] == trial_id
    assert answer["type"] == "METRIC_TYPE_TRAINING"
    assert answer["batches"][0] == 1 and answer["batches"][-1] == 100
    assert len(answer["batches"]) <= 10


def stream_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


async def test_get_metrics_streams_every_report_in_pages(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    """Determined's GetMetrics: lines of at most 1000 reports, trial by trial, in step order,
    each a MetricsReport with the struct Determined's client reads (`avg_metrics`,
    `validation_metrics`)."""
    first, second = await make_trial(live_master), await make_trial(live_master)
    await report(api, first, "training", {s: curve(s) for s in range(1, 2501)})
    await report(api, first, "validation", {s: {"loss": 0.5} for s in (50, 100)})
    await report(api, second, "training", {s: curve(s) for s in (7, 3)})
    answer = await api.get("/api/v1/trials/metrics/trial_metrics",
                           params={"trialIds": [second, first], "group": "training"})
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/x-ndjson"
    pages = [line["result"]["metrics"] for line in stream_lines(answer.text)]
    assert [len(p) for p in pages] == [1000, 1000, 500, 2]
    reports = [r for page in pages for r in page]
    assert [r["totalBatches"] for r in reports] == [*range(1, 2501), 3, 7]
    assert [r["trialId"] for r in reports[2499:]] == [first, second, second]
    head = reports[0]
    assert set(head) == {"trialId", "endTime", "metrics", "totalBatches", "trialRunId",
                         "archived", "id", "group"}
    assert head["metrics"] == {"avg_metrics": curve(1)}
    assert (head["group"], head["trialRunId"], head["archived"]) == ("training", 1, False)
    validation = await api.get("/api/v1/trials/metrics/trial_metrics",
                               params={"trialIds": first, "group": "validation"})
    [[v50, v100]] = [line["result"]["metrics"] for line in stream_lines(validation.text)]
    assert v50["metrics"] == {"validation_metrics": {"loss": 0.5}}
    assert (v50["totalBatches"], v100["totalBatches"]) == (50, 100)
    none = await api.get("/api/v1/trials/metrics/trial_metrics",
                         params={"trialIds": second, "group": "validation"})
    assert none.status_code == 200 and none.text == ""

    unknown = await api.get("/api/v1/trials/metrics/trial_metrics",
                            params={"trialIds": [first, 99999997], "group": "training"})
    assert unknown.status_code == 404 and "99999997" in unknown.json()["message"]
    bad: list[tuple[dict[str, Any], str]] = [
        ({"group": "training"}, "trialIds"), ({"trialIds": first}, "group"),
        ({"trialIds": 2**40, "group": "training"}, "trialIds"),
        ({"trialIds": first, "group": ""}, "group")]
    for params, field in bad:
        refused = await api.get("/api/v1/trials/metrics/trial_metrics", params=params)
        assert refused.status_code == 400, (params, refused.text)
        assert any(d.startswith((f"{field}:", f"{field}.")) for d in refused.json()["details"])


# Runs in Determined's own venv: its SDK's Trial.iter_metrics reads GetMetrics' stream.
DET_ITER_METRICS = """
import json, sys
from determined.common import api
from determined.common.experimental import trial
master, token, trial_id = sys.argv[1], sys.argv[2], int(sys.argv[3])
session = api.Session(master, "admin", token, None)
found = {group: [(m.steps_completed, m.metrics, m.trial_run_id, m.end_time.isoformat())
                 for m in trial.Trial(trial_id, session).iter_metrics(group)]
         for group in ("training", "validation")}
print(json.dumps(found))
"""


async def test_determined_sdk_iterates_a_trials_metrics(
    api: httpx.AsyncClient, live_master: LiveMaster, det_venv: Path
) -> None:
    trial_id = await make_trial(live_master)
    await report(api, trial_id, "training", {s: curve(s) for s in range(1, 1201)})
    await report(api, trial_id, "validation", {1200: {"loss": 0.25}})
    done = await asyncio.to_thread(
        subprocess.run,
        [str(det_venv / "python"), "-c", DET_ITER_METRICS, live_master.url,
         live_master.admin_token, str(trial_id)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert [m[0] for m in found["training"]] == list(range(1, 1201))
    assert found["training"][9][1:3] == [curve(10), 1]
    assert [m[:3] for m in found["validation"]] == [[1200, {"loss": 0.25}, 1]]


async def test_unknown_trials_and_bad_parameters(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    trial_id = await make_trial(live_master)
    unknown = await api.get("/api/v1/trials/99999999/metrics")
    assert unknown.status_code == 404
    assert "trial 99999999 not found" in unknown.json()["message"]
    unknown = await api.get("/api/v1/trials/time-series",
                            params={"trialIds": [trial_id, 99999998]})
    assert unknown.status_code == 404
    assert "99999998" in unknown.json()["message"]

    cases: list[tuple[str, dict[str, Any], str]] = [
        (f"/api/v1/trials/{trial_id}/metrics", {"maxDatapoints": 1}, "maxDatapoints"),
        (f"/api/v1/trials/{trial_id}/metrics", {"startBatches": -1}, "startBatches"),
        (f"/api/v1/trials/{trial_id}/metrics", {"endBatches": "ten"}, "endBatches"),
        (f"/api/v1/trials/{trial_id}/metrics", {"startBatches": 9, "endBatches": 3},
         "startBatches"),
        (f"/api/v1/trials/{2**31}/metrics", {}, "trial_id"),
        ("/api/v1/trials/time-series", {"trialIds": 2**40}, "trialIds"),
        ("/api/v1/trials/time-series", {}, "trialIds"),
        ("/api/v1/trials/time-series", {"trialIds": "x"}, "trialIds"),
        ("/api/v1/trials/time-series", {"trialIds": trial_id, "maxDatapoints": 10**9},
         "maxDatapoints"),
        ("/api/v1/trials/time-series", {"trialIds": trial_id, "metricType": "LOSS"},
         "metricType"),
        ("/api/v1/trials/time-series",
         {"trialIds": trial_id, "metricType": "METRIC_TYPE_TRAINING", "group": "validation"},
         "metricType"),
    ]
    for path, params, field in cases:
        answer = await api.get(path, params=params)
        assert answer.status_code == 400, (path, params, answer.text)
        body = answer.json()
        named = any(d.startswith((f"{field}:", f"{field}.")) for d in body["details"])
        assert named, (params, body)


async def test_system_samples_are_kept_apart_from_the_trials_progress(
    api: httpx.AsyncClient, live_master: LiveMaster, tmp_path: Path
) -> None:
    """The agent keys its samples by time (ms since the epoch): they must not move the trial's
    batch count; `epochal trial describe --system` shows them."""
    trial_id = await make_trial(live_master)
    await report(api, trial_id, "training", {s: curve(s) for s in (10, 20)})
    now_ms = 1_795_000_000_000
    await report(api, trial_id, "system", {
        now_ms + i * 5000: {"cpu_util_percent": 50.0 + i, "memory_rss_bytes": 3 << 30,
                            "disk_read_bytes_per_s": 0.0, "disk_write_bytes_per_s": 1 << 20,
                            "host_net_recv_bytes_per_s": 2048.0,
                            "host_net_sent_bytes_per_s": 1024.0,
                            "gpu0_util_percent": 97.0, "gpu0_memory_used_bytes": 20 << 30}
        for i in range(3)})
    trial = (await api.get(f"/api/v1/trials/{trial_id}")).json()["trial"]
    assert trial["totalBatchesProcessed"] == 20
    samples = (await api.get(f"/api/v1/trials/{trial_id}/metrics",
                             params={"group": "system"})).json()["metrics"]
    assert [s["stepsCompleted"] for s in samples] == [now_ms, now_ms + 5000, now_ms + 10000]

    env = {"EPOCHAL_MASTER": live_master.url, "EPOCHAL_TOKEN": live_master.admin_token,
           "EPOCHAL_AUTH_FILE": str(tmp_path / "auth.json"), "PATH": "/usr/bin:/bin",
           "COLUMNS": "200"}
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "cli.main", "trial", "describe", str(trial_id),
                         "--system"],
        capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert "gpu0 %" in done.stdout and "3.0 GiB" in done.stdout and "52" in done.stdout
