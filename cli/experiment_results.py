"""An experiment's results as the CLI shows them: its fields, its trials (all, or the best
TRIALS_SHOWN of a large one), its best trial and that trial's best checkpoint."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cli import render
from cli.client import (
    ApiError,
    Client,
)
from common.states import CheckpointState

# An experiment with more trials than this shows its best ones (describe --all: every one), so
# that one of 10,000 trials answers in a screenful.
TRIALS_SHOWN = 20


class Results:
    """An experiment, its trials (all, or the best TRIALS_SHOWN), its best trial (the master's
    pick) and that trial's checkpoints, fetched together."""

    def __init__(
        self,
        experiment: dict[str, Any],
        config: Any,
        trials: list[dict[str, Any]],
        best: dict[str, Any] | None,
        checkpoints: list[dict[str, Any]] | None,
        *,
        every_trial: bool = True,
    ):
        self.experiment = experiment
        self.config = config
        self.trials = trials
        self.best = best
        self.checkpoints = checkpoints
        self.every_trial = every_trial
        self.metric: str | None = experiment.get("searcherMetric")
        self.smaller_is_better = bool(experiment.get("smallerIsBetter", True))

    def best_checkpoint(self) -> str | None:
        if self.best is None:
            return None
        trial_id = self.best.get("id")
        own = [
            c
            for c in self.checkpoints or []
            if render.checkpoint_training(c).get("trialId") == trial_id
            and render.state(c.get("state")) == CheckpointState.COMPLETED
        ]
        scored = [
            c
            for c in own
            if isinstance(render.checkpoint_training(c).get("searcherMetric"), int | float)
        ]
        if scored:
            pick = min if self.smaller_is_better else max
            return str(pick(scored, key=lambda c: c["training"]["searcherMetric"]).get("uuid"))
        if own:
            return str(max(own, key=lambda c: render.checkpoint_steps(c) or 0).get("uuid"))
        uuid = self.best.get("latestCheckpointUuid")
        return str(uuid) if uuid else None

    def as_json(self) -> dict[str, Any]:
        answer: dict[str, Any] = {"experiment": self.experiment}
        if self.config is not None:
            answer["config"] = self.config
        answer["trials"] = self.trials
        return answer


def gather(client: Client, experiment_id: int, experiment: dict[str, Any] | None = None,
           every_trial: bool = False) -> Results:
    answer = client.get(f"/experiments/{experiment_id}")
    experiment = answer.get("experiment") or experiment or {}
    path = f"/experiments/{experiment_id}/trials"
    total = experiment.get("numTrials")
    every_trial = every_trial or not isinstance(total, int) or total <= TRIALS_SHOWN
    if every_trial:
        trials = client.get_all(path, "trials")["trials"]
    else:  # the best first (nulls last either way)
        order = "ORDER_BY_ASC" if experiment.get("smallerIsBetter", True) else "ORDER_BY_DESC"
        trials = client.get(path, {"limit": TRIALS_SHOWN, "orderBy": order,
                                   "sortBy": "SORT_BY_BEST_VALIDATION_METRIC"}).get("trials") or []
    best_id = experiment.get("bestTrialId")
    best = next((t for t in trials if t.get("id") == best_id), None)
    if best is None and best_id is not None:
        best = client.get(f"/trials/{best_id}").get("trial")
    checkpoints: list[dict[str, Any]] | None = None
    if best is not None:
        try:
            checkpoints = client.get_all(f"/trials/{best_id}/checkpoints", "checkpoints")[
                "checkpoints"]
        except ApiError:
            checkpoints = None  # the best trial's latest checkpoint stands in
    return Results(experiment, answer.get("config"), trials, best, checkpoints,
                   every_trial=every_trial)


def best_line(results: Results) -> str:
    metric = results.metric or "the searcher metric"
    if results.best is None:
        return f"Best trial: none yet (no validation of {metric})"
    best = results.best
    value = render.trial_metric(best, results.metric, "best")
    direction = "smaller" if results.smaller_is_better else "larger"
    text = f"Best trial: {best.get('id')} ({metric}={render.number(value)}, {direction} is better)"
    uuid = results.best_checkpoint()
    text += f", checkpoint {uuid}" if uuid else ", no checkpoint"
    return text


def show_results(results: Results, summary: bool) -> None:
    e = results.experiment
    if summary:
        render.say(
            f"Experiment {e.get('id')} {render.state(e.get('state'))} after "
            f"{render.duration(e.get('startTime'), e.get('endTime'))}"
        )
    best_id = results.best.get("id") if results.best else None
    # The best TRIALS_SHOWN were ranked by their best value: that is the value shown.
    table = render.trials_table(results.trials, results.metric, best_id,
                                by_id=results.every_trial,
                                which="latest" if results.every_trial else "best")
    render.show(table)
    if not results.every_trial:
        render.say(f"The {len(results.trials)} best of {e.get('numTrials')} trials by "
                   f"{results.metric}; `--all` lists every trial.")
    render.say(best_line(results))


def _labels(value: Any) -> str:
    if isinstance(value, list) and value:
        return ", ".join(str(v) for v in value)
    return "-"


def _trial_count(e: Mapping[str, Any]) -> str:
    """`10000 (9990 COMPLETED, 10 ERROR)`: the count, then how many are in each state."""
    total = render.number(e.get("numTrials"))
    states = e.get("trialStates")
    if not isinstance(states, Mapping) or not states:
        return total
    return total + " (" + ", ".join(
        f"{n} {render.state(state)}" for state, n in sorted(
            states.items(), key=lambda item: (-item[1], item[0]))) + ")"


def experiment_fields(e: Mapping[str, Any]) -> list[tuple[str, Any]]:
    metric = e.get("searcherMetric")
    direction = "smaller" if e.get("smallerIsBetter", True) else "larger"
    rows: list[tuple[str, Any]] = [
        ("ID", e.get("id")),
        ("Name", e.get("name") or "-"),
        ("State", render.state(e.get("state"))),
    ]
    if e.get("errorMessage"):
        rows.append(("Error", e.get("errorMessage")))
    if e.get("description"):
        rows.append(("Description", e.get("description")))
    rows += [
        ("Labels", _labels(e.get("labels"))),
        ("Searcher", e.get("searcherType") or "-"),
        ("Metric", f"{metric} ({direction} is better)" if metric else "-"),
        ("Progress", render.percent(e.get("progress"))),
        ("Trials", _trial_count(e)),
        ("Started", render.when(e.get("startTime"))),
        ("Ended", render.when(e.get("endTime"))),
        ("Duration", render.duration(e.get("startTime"), e.get("endTime"))),
        ("Resource pool", e.get("resourcePool") or "-"),
        ("User", e.get("username") or "-"),
    ]
    if e.get("archived"):
        rows.append(("Archived", "yes"))
    return rows


