"""Epochal's custom search attributes and memo: how a user finds experiments and trials in
Temporal's web UI and CLI, e.g.

    temporal workflow list --query "EpochalOwner = 'alice' AND EpochalState = 'ERROR'"

The master registers them in its namespace at boot (`register`, through the operator service: a
dev server or a self-hosted cluster); on Temporal Cloud they are added once with `tcld`
(deploy/README.md). Temporal refuses to start a workflow with an attribute its namespace does
not know, so workflows carry them only once they are registered.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from temporalio.client import Client
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError

from common.states import ExperimentState, TaskState, TrialState

log = logging.getLogger(__name__)

EXPERIMENT_ID = SearchAttributeKey.for_int("EpochalExperimentId")
TRIAL_ID = SearchAttributeKey.for_int("EpochalTrialId")
OWNER = SearchAttributeKey.for_keyword("EpochalOwner")
# The experiment's, trial's or task's state as the database has it (ACTIVE, PAUSED, ...,
# COMPLETED, ERROR).
STATE = SearchAttributeKey.for_keyword("EpochalState")
SEARCHER = SearchAttributeKey.for_keyword("EpochalSearcher")
NAME = SearchAttributeKey.for_keyword("EpochalName")
KEYS: tuple[SearchAttributeKey[Any], ...] = (EXPERIMENT_ID, TRIAL_ID, OWNER, STATE, SEARCHER,
                                             NAME)


def experiment_attributes(experiment_id: int, owner: str, config: Mapping[str, Any],
                          state: ExperimentState = ExperimentState.ACTIVE
                          ) -> TypedSearchAttributes:
    return TypedSearchAttributes([
        SearchAttributePair(EXPERIMENT_ID, experiment_id),
        SearchAttributePair(OWNER, owner),
        SearchAttributePair(STATE, state),
        SearchAttributePair(SEARCHER, str(config["searcher"]["name"])),
        SearchAttributePair(NAME, str(config.get("name") or "")),
    ])


def trial_attributes(experiment_id: int, trial_id: int, config: Mapping[str, Any],
                     owner: str | None = None, state: TrialState = TrialState.QUEUED
                     ) -> TypedSearchAttributes:
    """Since TEMPORAL_STATUS_REVISION a trial carries its experiment's owner and its own state
    too."""
    return TypedSearchAttributes([
        SearchAttributePair(EXPERIMENT_ID, experiment_id),
        SearchAttributePair(TRIAL_ID, trial_id),
        SearchAttributePair(SEARCHER, str(config["searcher"]["name"])),
        SearchAttributePair(NAME, str(config.get("name") or "")),
        *([SearchAttributePair(OWNER, owner), SearchAttributePair(STATE, state)]
          if owner is not None else []),
    ])


def task_attributes(owner: str, name: str,
                    state: TaskState = TaskState.QUEUED) -> TypedSearchAttributes:
    """An interactive task's: who runs it, its description and its state."""
    return TypedSearchAttributes([
        SearchAttributePair(OWNER, owner),
        SearchAttributePair(STATE, state),
        SearchAttributePair(NAME, name),
    ])


def experiment_memo(config: Mapping[str, Any], page: str | None = None) -> dict[str, Any]:
    """What Temporal's UI shows of an experiment beside its id: a summary of its config, and
    its `page` on the dashboard."""
    searcher = config["searcher"]
    return {**({"dashboard": page} if page else {}),
            "name": config.get("name") or "", "description": config.get("description") or "",
            "searcher": searcher["name"], "metric": searcher.get("metric"),
            "smallerIsBetter": searcher.get("smaller_is_better", True),
            "maxTrials": searcher.get("max_trials"), "maxLength": searcher.get("max_length"),
            "resourcePool": (config.get("resources") or {}).get("resource_pool")}


async def register(client: Client) -> bool:
    """Add the attributes the client's namespace lacks; False (and a warning saying what to do)
    where this client may not (Temporal Cloud: `tcld`)."""
    from temporalio.api.operatorservice.v1 import (
        AddSearchAttributesRequest,
        ListSearchAttributesRequest,
    )

    try:
        known = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace))
        missing = {key.name: int(key.indexed_value_type) for key in KEYS
                   if key.name not in known.custom_attributes}
        if missing:
            await client.operator_service.add_search_attributes(AddSearchAttributesRequest(
                namespace=client.namespace, search_attributes=missing))  # type: ignore[arg-type]
    except RPCError as err:
        log.warning("cannot register Epochal's search attributes in namespace %s (%s); "
                    "workflows start without them. Add them as deploy/README.md shows.",
                    client.namespace, err.message)
        return False
    return True
