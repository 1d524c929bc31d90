"""Experiments, trials and checkpoints of a source, as rows here: finished, and run by no
workflow (the API treats them as any finished experiment: services/submission.py's rows, with
`import_source_id` naming where they came from).

An experiment's config is checked as a submission's (services/submission.normalized_config):
one Epochal's model refuses is skipped with the reason; its checkpoint storage the master
cannot reach (outside the cluster's roots, absent, an S3 bucket that does not answer) is a
warning, and the checkpoint routes refuse those files as they refuse any such storage."""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import json
import os
import tarfile
from typing import Any

import asyncpg
import yaml

from common.checkpoint_storage import (
    CheckpointFiles,
    StorageError,
    shared_fs_directory,
    storage_path,
    under_any_root,
)
from common.expconf import planned_trials
from common.states import TERMINAL_STATES, CheckpointState, ExperimentState, TrialState
from services.errors import Invalid
from services.history_import import models as m
from services.history_import.mapping import (
    Result,
    local_int,
    mapped_container,
    remember,
    user_exists,
)
from services.settings import StorageSettings
from services.submission import normalized_config

IMPORTED_EXPERIMENT_STATES = (ExperimentState.COMPLETED, ExperimentState.CANCELED,
                              ExperimentState.ERROR)


def _state(value: str) -> str:
    return value.removeprefix("STATE_")


def model_definition(b64: str | None, where: str) -> tuple[bytes, int] | None:
    """The experiment's model definition (a .tar.gz) and its files' size, both within a
    submission's 96 MiB; a 400 naming `where` for anything else."""
    if not b64:
        return None
    try:
        tgz = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise Invalid("invalid model definition", [f"{where}: not base64"]) from None
    if len(tgz) > m.MAX_MODEL_DEFINITION:
        raise Invalid("model definition too large", [
            f"{where}: {len(tgz):,} bytes, more than {m.MAX_MODEL_DEFINITION:,}"])
    size = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as archive:
            for member in archive:
                size += member.size
                if size > m.MAX_MODEL_DEFINITION:
                    raise Invalid("model definition too large", [
                        f"{where}: its files hold more than {m.MAX_MODEL_DEFINITION:,} bytes"])
    except (tarfile.TarError, OSError, EOFError):
        raise Invalid("invalid model definition", [f"{where}: not a .tar.gz"]) from None
    return tgz, size


def storage_warnings(config: dict[str, Any], settings: StorageSettings) -> list[str]:
    """What keeps the master from the experiment's checkpoints (blocks: run in a thread)."""
    storage = config.get("checkpoint_storage") or {}
    directory = shared_fs_directory(storage)
    if directory is not None:
        roots = settings.allowed_storage_roots()
        if not under_any_root(directory, roots):
            return [f"checkpoint_storage: shared_fs at {directory} is outside the directories "
                    f"this master reads checkpoints in ({', '.join(roots)}): its checkpoints' "
                    "files cannot be read here (an admin can allow more with "
                    "EPOCHAL_STORAGE_ROOTS)"]
        if not os.path.isdir(directory):
            return [f"checkpoint_storage: shared_fs at {directory} does not exist on the "
                    "master's host: its checkpoints' files cannot be read here"]
        return []
    try:
        files = CheckpointFiles.of(config, settings.checkpoint_storage)
        if files.s3 is not None:
            files.s3.check_bucket()
    except StorageError as err:
        return [f"checkpoint_storage: {err}: its checkpoints' files cannot be read here"]
    return []


async def _storage_warnings(config: dict[str, Any], settings: StorageSettings,
                           checked: dict[str, list[str]]) -> list[str]:
    """`storage_warnings`, once per storage (and credentials) in a page of experiments."""
    key = json.dumps([config.get("checkpoint_storage"),
                      (config.get("environment") or {}).get("environment_variables")],
                     sort_keys=True)
    if key not in checked:
        checked[key] = await asyncio.to_thread(storage_warnings, config, settings)
    return checked[key]


async def import_experiment(conn: asyncpg.Connection, source_id: int, item: m.ExperimentItem,
                            where: str, settings: StorageSettings,
                            storages: dict[str, list[str]]) -> Result:
    exp = item.experiment
    result = Result(str(exp.id))
    found = await local_int(conn, source_id, "experiment", exp.id)
    if found is not None:
        result.local_id = str(found)
        return result
    state = _state(exp.state)
    if state not in IMPORTED_EXPERIMENT_STATES:
        result.skipped = (f"experiment {exp.id} is {exp.state}: only ended experiments "
                          "(COMPLETED, CANCELED, ERROR) are imported")
        return result
    project_id = await mapped_container(conn, source_id, "project", exp.projectId,
                                        f"{where}.experiment.projectId")
    if not await user_exists(conn, exp.username):
        result.skipped = f"its owner {exp.username!r} was not imported (no such user here)"
        return result
    definition = await asyncio.to_thread(model_definition, item.modelDefinition,
                                         f"{where}.modelDefinition")
    text = yaml.safe_dump(item.config, sort_keys=False)
    try:
        checked = await asyncio.to_thread(
            normalized_config, text, settings.default_storage(), None,
            settings.checkpoint_storage, exp.unmanaged, check_storage=False)
    except Invalid as err:
        result.skipped = "; ".join([err.message, *err.details])
        return result
    config = checked.data
    result.warnings.extend(await _storage_warnings(config, settings, storages))
    forked_from = exp.forkedFrom or exp.parentId
    parent = (None if forked_from is None else
              await local_int(conn, source_id, "experiment", forked_from))
    seed = (config.get("reproducibility") or {}).get("experiment_seed") or 0
    new_id = await conn.fetchval(
        "INSERT INTO experiments (name, description, labels, config, original_config, state,"
        " owner, seed, archived, start_time, end_time, project_id, parent_id, notes,"
        " planned_trials, unmanaged, import_source_id, import_external_id)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::timestamptz,"
        " coalesce($11::timestamptz, $10::timestamptz), $12, $13, $14,"
        " $15, $16, $17, $18) RETURNING id",
        exp.name, exp.description or None, sorted(set(exp.labels)), config,
        exp.originalConfig or text, state, exp.username, seed, exp.archived, exp.startTime,
        exp.endTime, project_id, parent, exp.notes or "", planned_trials(checked.model),
        exp.unmanaged, source_id, str(exp.id))
    if definition is not None:
        await conn.execute(
            "INSERT INTO model_definitions (experiment_id, tgz, size_bytes) VALUES ($1, $2, $3)",
            new_id, *definition)
    await remember(conn, source_id, "experiment", exp.id, new_id)
    result.local_id, result.created = str(new_id), True
    return result


async def _experiment_of(conn: asyncpg.Connection, source_id: int, external_id: int,
                         where: str) -> int:
    found = await local_int(conn, source_id, "experiment", external_id)
    if found is None:
        raise Invalid(f"the source's experiment {external_id} was not imported", [
            f"{where}: experiment {external_id} of the source was not imported"])
    return found


async def _progress(conn: asyncpg.Connection, experiment_id: int, batches: int) -> float:
    """How far a trial that did not complete got towards its searcher's length in batches (its
    experiment's progress counts it; Determined's trial answers carry none): 0 when unknown."""
    length = await conn.fetchval(
        "SELECT config -> 'searcher' -> 'max_length' ->> 'batches' FROM experiments"
        " WHERE id = $1", experiment_id)
    return min(1.0, batches / int(length)) if length and length.isdigit() and int(length) else 0.0


async def import_trial(conn: asyncpg.Connection, source_id: int, trial: m.Trial,
                       where: str) -> Result:
    """Its searcher metric value is the source's until its validations are imported, which
    recompute it (and its best validation) as the API does for its own reports."""
    result = Result(str(trial.id))
    found = await local_int(conn, source_id, "trial", trial.id)
    if found is not None:
        result.local_id = str(found)
        return result
    experiment_id = await _experiment_of(conn, source_id, trial.experimentId,
                                         f"{where}.experimentId")
    state = _state(trial.state)
    progress = 1.0 if state == TrialState.COMPLETED else await _progress(
        conn, experiment_id, trial.totalBatchesProcessed)
    if state not in TERMINAL_STATES:
        result.warnings.append(f"trial {trial.id} is {trial.state} in an ended experiment: "
                               "imported as CANCELED")
        state = TrialState.CANCELED
    new_id = await conn.fetchval(
        "INSERT INTO trials (experiment_id, request_id, hparams, seed, state, restarts, run_id,"
        " steps_completed, progress, start_time, end_time, searcher_metric_value,"
        " log_retention_days) VALUES ($1, $2, $3, 0, $4, $5, $6, $7, $8, $9::timestamptz,"
        " coalesce($10::timestamptz, $9::timestamptz), $11, $12)"
        " ON CONFLICT (experiment_id, request_id) DO NOTHING RETURNING id",
        experiment_id, trial.id, trial.hparams, state, trial.restarts, trial.restarts + 1,
        trial.totalBatchesProcessed, progress,
        trial.startTime, trial.endTime, trial.searcherMetricValue, trial.logRetentionDays)
    if new_id is None:  # mapped before and its mapping lost: the row is still here
        new_id = await conn.fetchval(
            "SELECT id FROM trials WHERE experiment_id = $1 AND request_id = $2",
            experiment_id, trial.id)
    else:
        result.created = True
    await remember(conn, source_id, "trial", trial.id, new_id)
    result.local_id = str(new_id)
    return result


async def import_checkpoint(conn: asyncpg.Connection, source_id: int,
                            checkpoint: m.Checkpoint, where: str) -> Result:
    """Keyed by uuid, which is kept: the files stay where the source's storage has them, and
    their path here is the experiment's storage's (never one the source sent)."""
    uuid = str(checkpoint.uuid)
    result = Result(uuid)
    found = await conn.fetchval(
        "SELECT local_id FROM import_objects WHERE source_id = $1 AND kind = 'checkpoint'"
        " AND external_id = $2", source_id, uuid)
    if found is not None and await conn.fetchval(
            "SELECT EXISTS (SELECT 1 FROM checkpoints WHERE uuid = $1)", checkpoint.uuid):
        result.local_id = uuid
        return result
    if checkpoint.training.trialId is None:
        raise Invalid("a checkpoint names no trial", [f"{where}.training.trialId: required"])
    trial_id = await local_int(conn, source_id, "trial", checkpoint.training.trialId)
    if trial_id is None:
        raise Invalid(f"the source's trial {checkpoint.training.trialId} was not imported", [
            f"{where}.training.trialId: trial {checkpoint.training.trialId} of the source was "
            "not imported"])
    row = await conn.fetchrow(
        "SELECT t.experiment_id, t.run_id, e.config FROM trials t"
        " JOIN experiments e ON e.id = t.experiment_id WHERE t.id = $1", trial_id)
    state = _state(checkpoint.state)
    if state not in (CheckpointState.COMPLETED, CheckpointState.DELETED):
        result.warnings.append(f"checkpoint {uuid} is {checkpoint.state}: imported as DELETED")
        state = CheckpointState.DELETED
    steps = checkpoint.metadata.get("steps_completed")
    task_id = f"{row['experiment_id']}.{trial_id}"
    inserted = await conn.fetchval(
        "INSERT INTO checkpoints (uuid, trial_id, task_id, allocation_id, steps_completed,"
        " metadata, resources, storage_path, state, report_time)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, coalesce($10::timestamptz, now()))"
        " ON CONFLICT (uuid) DO NOTHING RETURNING uuid",
        checkpoint.uuid, trial_id, task_id, f"{task_id}.{row['run_id']}",
        steps if isinstance(steps, int) and steps >= 0 else 0, checkpoint.metadata,
        checkpoint.resources, storage_path(row["config"].get("checkpoint_storage") or {}, uuid),
        state, checkpoint.reportTime)
    if inserted is None:
        owner = await conn.fetchval("SELECT trial_id FROM checkpoints WHERE uuid = $1",
                                    checkpoint.uuid)
        if owner != trial_id:
            result.skipped = f"checkpoint {uuid} is already here, another trial's"
            return result
    else:
        result.created = True
    await remember(conn, source_id, "checkpoint", uuid, uuid)
    result.local_id = uuid
    return result
