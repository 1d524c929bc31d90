"""Reading a Determined cluster (the SOURCE of `epochal import determined`) through its REST API.

Only Determined 0.38.1's own routes (which Epochal also serves), read the way its client reads
them: lists in `offset`/`limit` pages until `pagination.total`, metrics and logs as NDJSON streams
of `{"result": ...}` lines. Everything is a generator of pages or lines, so no caller ever holds
a whole list or a trial's whole series. Errors are `CliError`s that name the source's URL.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from cli.client import JSON, Client, CliError, naming

SOURCE = "the Determined master"
# Items per page of a list (Determined caps most lists at 1000 or less; 200 keeps an answer of
# experiments with their configs small).
PAGE = 200
# Determined's client-side salt (determined.common.api.authentication.PASSWORD_SALT): its login
# sends sha512(salt + password) with isHashed, never the password itself.
PASSWORD_SALT = "GubPEmmotfiK9TMD6Zdw"
# The experiment states that end an experiment (what can be imported) and those that do not.
TERMINAL = frozenset({"STATE_COMPLETED", "STATE_CANCELED", "STATE_ERROR"})
# A trial's summaryMetrics keys for the two built-in groups; any other key is its group's name.
SUMMARY_GROUPS = {"avg_metrics": "training", "validation_metrics": "validation"}


def salted(password: str) -> str:
    """What Determined's client sends as the password (`api.salt_and_hash`)."""
    return hashlib.sha512((PASSWORD_SALT + password).encode()).hexdigest() if password else ""


class DeterminedSource:
    """A logged-in reader of one Determined master (its URL, without /api/v1)."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self._client = Client(url, token=token)

    @classmethod
    def login(cls, url: str, username: str, password: str) -> DeterminedSource:
        """Log in as Determined's client does (POST /auth/login, hashed password)."""
        with naming(url, SOURCE), Client(url, anonymous=True) as client:
            answer = client.post("/auth/login", {"username": username,
                                                 "password": salted(password), "isHashed": True})
        token = answer.get("token") if isinstance(answer, dict) else None
        if not isinstance(token, str) or not token:
            raise CliError(f"the Determined master at {url} answered the login without a token")
        return cls(url, token)

    def close(self) -> None:
        self._client.close()

    def get(self, path: str, params: dict[str, Any] | None = None) -> JSON:
        with naming(self.url, SOURCE):
            answer = self._client.get(path, params)
        if not isinstance(answer, dict):
            raise CliError(f"the Determined master at {self.url} answered GET /api/v1{path} "
                           "with something that is not a JSON object")
        return answer

    def total(self, path: str, key: str, params: dict[str, Any] | None = None) -> int:
        """How many items a list holds (its pagination's total, one item read)."""
        answer = self.get(path, {**(params or {}), "offset": 0, "limit": 1})
        total = (answer.get("pagination") or {}).get("total")
        return int(total) if isinstance(total, int) else len(answer.get(key) or [])

    def pages(self, path: str, key: str, params: dict[str, Any] | None = None,
              page: int = PAGE) -> Iterator[list[JSON]]:
        """A list's items, a page at a time, until the pagination's total (or an empty page)."""
        offset = 0
        while True:
            answer = self.get(path, {**(params or {}), "offset": offset, "limit": page})
            items = [i for i in answer.get(key) or [] if isinstance(i, dict)]
            if items:
                yield items
            offset += len(items)
            total = (answer.get("pagination") or {}).get("total")
            if not items or (isinstance(total, int) and offset >= total):
                return

    def items(self, path: str, key: str, params: dict[str, Any] | None = None) -> Iterator[JSON]:
        for items in self.pages(path, key, params):
            yield from items

    def stream(self, path: str, params: dict[str, Any]) -> Iterator[JSON]:
        """The `result` of each line of a streamed answer (grpc-gateway's `{"result": ...}`;
        a line `{"error": ...}` is the stream's failure)."""
        with naming(self.url, SOURCE):
            for line in self._client.stream_ndjson(path, params):
                if not isinstance(line, dict):
                    continue
                if "error" in line:
                    error = line["error"] or {}
                    said = error.get("message") if isinstance(error, dict) else error
                    raise CliError(f"the Determined master at {self.url} failed streaming "
                                   f"{path}: {said}")
                if isinstance(line.get("result"), dict):
                    yield line["result"]

    # What the import reads, in Determined's routes.

    def master(self) -> JSON:
        return self.get("/master")

    def users(self) -> Iterator[list[JSON]]:
        return self.pages("/users", "users")

    def workspaces(self) -> Iterator[list[JSON]]:
        return self.pages("/workspaces", "workspaces")

    def projects(self, workspace_id: int) -> Iterator[list[JSON]]:
        return self.pages(f"/workspaces/{workspace_id}/projects", "projects")

    def templates(self) -> Iterator[list[JSON]]:
        return self.pages("/templates", "templates")

    EXPERIMENT_ORDER = {"sortBy": "SORT_BY_ID", "orderBy": "ORDER_BY_ASC"}

    def experiments(self) -> Iterator[list[JSON]]:
        """Every experiment (all projects, archived or not), oldest first: a fork comes after
        the experiment it forked."""
        return self.pages("/experiments", "experiments", self.EXPERIMENT_ORDER)

    def experiment(self, experiment_id: int) -> JSON:
        return self.get(f"/experiments/{experiment_id}")

    def model_definition(self, experiment_id: int) -> str | None:
        b64 = self.get(f"/experiments/{experiment_id}/model_def").get("b64Tgz")
        return b64 if isinstance(b64, str) and b64 else None

    def trials(self, experiment_id: int) -> Iterator[list[JSON]]:
        return self.pages(f"/experiments/{experiment_id}/trials", "trials",
                          {"sortBy": "SORT_BY_ID", "orderBy": "ORDER_BY_ASC"})

    def checkpoints(self, trial_id: int) -> Iterator[list[JSON]]:
        return self.pages(f"/trials/{trial_id}/checkpoints", "checkpoints")

    def metric_groups(self, trial: JSON) -> list[str]:
        """The trial's metric groups: training and validation, and every other group its
        summaryMetrics name (from the listed trial, else `GET /trials/{id}`)."""
        summary = trial.get("summaryMetrics")
        if not isinstance(summary, dict):
            summary = self.get(f"/trials/{trial['id']}").get("trial", {}).get("summaryMetrics")
        names = [SUMMARY_GROUPS.get(k, k) for k in (summary or {}) if isinstance(k, str)]
        return list(dict.fromkeys(["training", "validation", *names]))

    def metrics(self, trial_id: int, group: str) -> Iterator[JSON]:
        """The trial's reports of `group`, as GetMetrics streams them."""
        for result in self.stream("/trials/metrics/trial_metrics",
                                  {"trialIds": trial_id, "group": group}):
            for report in result.get("metrics") or []:
                if isinstance(report, dict):
                    yield report

    def logs(self, trial_id: int) -> Iterator[JSON]:
        return self.stream(f"/trials/{trial_id}/logs", {"follow": "false"})

    def models(self) -> Iterator[list[JSON]]:
        return self.pages("/models", "models", {"sortBy": "SORT_BY_CREATION_TIME",
                                                "orderBy": "ORDER_BY_ASC"})

    def model_versions(self, model_name: str) -> Iterator[list[JSON]]:
        return self.pages(f"/models/{quote(model_name, safe='')}/versions", "modelVersions")


def dumps_size(item: Any) -> int:
    """An item's size as it goes in a request body (to keep batches under the target's cap)."""
    return len(json.dumps(item, separators=(",", ":")))
