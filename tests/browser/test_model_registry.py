"""The model registry in the dashboard (headless Chromium, issue 37 item 10): a finished
three-trial experiment with a checkpoint per trial, written to the database with its files on
the master's disk, registered from the model page (best first) and the trial page; tags, notes,
metadata, aliases moving between versions, two versions compared, the version page's metrics,
hyperparameters, edits and download; archive, a second user refused, delete."""

from __future__ import annotations

import re
import tarfile
import uuid
from collections.abc import Iterator
from typing import Any

import asyncpg
import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.browser.conftest import (
    USER_PASSWORD,
    api_get,
    new_user,
    on_database,
    opened,
    screenshot,
    signed_in,
)
from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow

# Each trial's learning rate, validation loss and accuracy: the second is the best.
TRIALS = [(0.1, 0.42, 0.81), (0.01, 0.17, 0.93), (0.001, 0.65, 0.70)]
STEPS = 10


def seed_experiment(cluster: Cluster) -> tuple[int, list[int], list[str]]:
    """A COMPLETED experiment of TRIALS, each with one validation and one COMPLETED checkpoint
    at STEPS batches whose file lies in the cluster's checkpoint directory; its id, trial ids
    and checkpoint uuids in TRIALS' order."""
    uuids = [str(uuid.uuid4()) for _ in TRIALS]
    directory = cluster.state_dir / "checkpoints"

    async def seed(conn: asyncpg.Connection) -> tuple[int, list[int]]:
        config = {"name": "registry", "entrypoint": "python3 train.py",
                  "searcher": {"name": "grid", "metric": "validation_loss",
                               "smaller_is_better": True, "max_length": {"batches": STEPS}},
                  "resources": {"resource_pool": "default"},
                  # What submission fills in: the cluster's default storage.
                  "checkpoint_storage": {"type": "shared_fs", "host_path": str(directory)},
                  "hyperparameters": {"lr": {"type": "categorical",
                                             "vals": [t[0] for t in TRIALS]}, "layers": 2}}
        experiment_id = await conn.fetchval(
            "INSERT INTO experiments (name, config, original_config, seed, state, owner,"
            " end_time) VALUES ('registry', $1, '', 1, 'COMPLETED', 'admin', now())"
            " RETURNING id", config)
        trial_ids = []
        for request_id, ((lr, loss, accuracy), checkpoint) in enumerate(
                zip(TRIALS, uuids, strict=True)):
            trial_id = await conn.fetchval(
                "INSERT INTO trials (experiment_id, request_id, hparams, seed, state,"
                " steps_completed, progress, end_time)"
                " VALUES ($1, $2::int, $3, $2::int, 'COMPLETED', $4, 1, now()) RETURNING id",
                experiment_id, request_id, {"lr": lr, "layers": 2}, STEPS)
            await conn.execute(
                "INSERT INTO metrics (trial_id, metric_group, steps_completed, metrics)"
                " VALUES ($1, 'validation', $2, $3)", trial_id, STEPS,
                {"validation_loss": loss, "accuracy": accuracy})
            await conn.execute(
                "INSERT INTO checkpoints (uuid, trial_id, task_id, allocation_id,"
                " steps_completed, resources, storage_path) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                uuid.UUID(checkpoint), trial_id, f"{experiment_id}.{trial_id}",
                f"{experiment_id}.{trial_id}.1", STEPS, {"weights.bin": 4},
                str(directory / checkpoint))
            trial_ids.append(trial_id)
        await conn.execute("SELECT refresh_best_validation($1::int[])", trial_ids)
        return experiment_id, trial_ids

    experiment_id, trial_ids = on_database(cluster.env["EPOCHAL_DB_URL"], seed)
    for i, checkpoint in enumerate(uuids):
        (directory / checkpoint).mkdir(parents=True)
        (directory / checkpoint / "weights.bin").write_bytes(f"w{i}!".encode())
    return experiment_id, trial_ids, uuids


@pytest.fixture(scope="module")
def someone_else(chromium: Browser, cluster: Cluster) -> Iterator[BrowserContext]:
    """A second, ordinary user's browser."""
    name = new_user(cluster, "viewer")
    ctx = signed_in(chromium, cluster, username=name, password=USER_PASSWORD, width=1400)
    yield ctx
    ctx.close()


def version_row(page: Page, number: int) -> Any:
    return page.locator(f"tr.version-row[data-version='{number}']")


def test_the_model_registry_from_registering_to_deleting(
    admin: BrowserContext, someone_else: BrowserContext, cluster: Cluster
) -> None:
    experiment_id, trial_ids, uuids = seed_experiment(cluster)
    name = f"digits-{uuid.uuid4().hex[:6]}"

    # Created with a form, tagged; the model page names its workspace.
    page, errors = opened(admin, "/models")
    page.fill("#model-name", name)
    page.fill("#model-description", "a digit classifier")
    page.fill("#model-labels", "cv, draft")
    page.click("#create-model button[type=submit]")
    expect(page).to_have_url(re.compile(r"/models/\d+$"))
    model_id = int(page.url.rsplit("/", 1)[1])
    expect(page.locator("#model-workspace-name")).to_have_text("Uncategorized")
    expect(page.locator("#model-tags .chip")).to_have_count(2)

    # Registered from the experiment's checkpoints, the best validation_loss first.
    page.select_option("#register-experiment", str(experiment_id))
    rows = page.locator("tr.register-row")
    expect(rows).to_have_count(3)
    assert [rows.nth(i).get_attribute("data-uuid") for i in range(3)] == [
        uuids[1], uuids[0], uuids[2]]
    page.fill("#register-comment", "the best")
    rows.nth(0).locator("button.register-this").click()
    expect(version_row(page, 1)).to_contain_text("the best")
    expect(version_row(page, 1).locator("td.searcher")).to_have_text("0.17")
    expect(version_row(page, 1).locator(f"a[href='/trials/{trial_ids[1]}']")).to_be_visible()
    expect(version_row(page, 1).locator(f"a[href='/experiments/{experiment_id}']")).to_be_visible()
    rows.nth(1).locator("button.register-this").click()
    expect(version_row(page, 2)).to_be_visible()

    # From the trial page: a form in the checkpoint's row, choosing this model.
    trial_page, trial_errors = opened(admin, f"/trials/{trial_ids[2]}")
    row = trial_page.locator("tr.checkpoint-row", has_text=uuids[2])
    row.locator("button.register-checkpoint").click()
    row.locator("select.register-model").select_option(name)
    row.locator("button.register-submit").click()
    expect(row.locator("a.registered")).to_have_text(f"{name} v3")
    assert not trial_errors
    trial_page.close()
    page.reload()
    expect(page.locator("tr.version-row")).to_have_count(3)

    # Notes over several lines, tags added and removed, metadata as key/value rows.
    page.fill("#model-edit-notes", "trained on MNIST\nsee experiment 1")
    page.click("#model-save")
    expect(page.locator("#model-save-said")).to_have_text("saved")
    page.fill("#model-tags .chip-input", "prod")
    page.click("#model-tags .chip-add button")
    expect(page.locator("#model-tags .chip[data-value='prod']")).to_be_visible()
    page.click("#model-tags .chip[data-value='draft'] .chip-remove")
    expect(page.locator("#model-tags .chip[data-value='draft']")).to_have_count(0)
    page.click("#model-metadata .kv-add")
    page.locator("#model-metadata .kv-key").last.fill("dataset")
    page.locator("#model-metadata .kv-value").last.fill("mnist")
    page.click("#model-metadata .kv-add")
    page.locator("#model-metadata .kv-key").last.fill("epochs")
    page.locator("#model-metadata .kv-value").last.fill("12")
    page.click("#model-metadata .kv-save")
    expect(page.locator("#model-metadata-saved")).to_have_text("saved")
    model = api_get(cluster, f"/api/v1/models/{model_id}")["model"]
    assert model["notes"] == "trained on MNIST\nsee experiment 1"
    assert model["labels"] == ["cv", "prod"]
    assert model["metadata"] == {"dataset": "mnist", "epochs": 12}

    # Moved to another workspace, named in the header.
    workspace = f"vision-{uuid.uuid4().hex[:6]}"
    made = httpx.post(f"{cluster.url}/api/v1/workspaces", headers=cluster.headers, timeout=30,
                      json={"name": workspace})
    assert made.status_code == 200, made.text
    page.reload()
    page.select_option("#model-move-workspace", label=workspace)
    page.click("#model-move button[type=submit]")
    expect(page.locator("#model-workspace-name")).to_have_text(workspace)

        # An alias points at one version: set on another, it moves; a bad one is named.
    page.fill("#alias-name", "production")
    page.select_option("#alias-version", "1")
    page.click("#alias-form button[type=submit]")
    expect(version_row(page, 1).locator("td.aliases")).to_have_text("@production")
    page.fill("#alias-name", "production")
    page.select_option("#alias-version", "2")
    page.click("#alias-form button[type=submit]")
    expect(version_row(page, 2).locator("td.aliases")).to_have_text("@production")
    expect(version_row(page, 1).locator("td.aliases")).to_have_text("")
    page.fill("#alias-name", "latest")
    page.click("#alias-form button[type=submit]")
    expect(page.locator("#alias-form .error")).to_contain_text("alias: 'latest'")
    by_alias = api_get(cluster, f"/api/v1/models/{model_id}/aliases/production")
    assert by_alias["modelVersion"]["version"] == 2

    # Two versions side by side: what differs highlighted, the better metric in bold; the
    # choice is in the address, so the link opens the same comparison.
    version_row(page, 1).locator("input.compare-pick").check()
    version_row(page, 3).locator("input.compare-pick").check()
    compare = page.locator("#compare")
    expect(compare).to_be_visible()
    expect(compare.locator("tr.compare-row[data-name='lr']")).to_have_class(re.compile("differs"))
    expect(compare.locator("tr.compare-row[data-name='layers']")).not_to_have_class(
        re.compile("differs"))
    loss = compare.locator("tr.compare-row[data-name='validation_loss']")
    expect(loss).to_have_class(re.compile("differs"))
    expect(loss.locator("td.better")).to_have_text("0.17")
    assert "compare=1%2C3" in page.url or "compare=1,3" in page.url, page.url
    screenshot(page, "model-registry")
    page.reload()
    expect(page.locator("#compare tr.compare-row[data-name='lr'] td.num").first).to_have_text(
        "0.01")

    # The version page: metrics, hyperparameters, edits, an alias added there, the download.
    page.goto(f"/models/{model_id}/versions/2")
    expect(page.locator("#version-metrics tr.metric-row.searcher")).to_contain_text("0.42")
    expect(page.locator("#version-hparams tr.hparam-row[data-name='lr']")).to_contain_text("0.1")
    page.fill("#version-edit-name", "baseline")
    page.fill("#version-edit-comment", "second best")
    page.fill("#version-edit-notes", "kept for\nreference")
    page.click("#version-save")
    expect(page.locator("#version-save-said")).to_have_text("saved")
    expect(page.locator("#version-header h1")).to_contain_text("baseline")
    page.fill("#version-alias-editor .chip-input", "champion")
    page.click("#version-alias-editor .chip-add button")
    expect(page.locator("#version-header .chip.alias")).to_have_count(2)
    version = api_get(cluster, f"/api/v1/models/{model_id}/versions/2")["modelVersion"]
    assert (version["name"], version["comment"], version["notes"]) == (
        "baseline", "second best", "kept for\nreference")
    aliases = api_get(cluster, f"/api/v1/models/{model_id}/aliases")["aliases"]
    assert {(a["alias"], a["version"]) for a in aliases} == {("champion", 2), ("production", 2)}
    expect(page.locator("#download-command code")).to_have_text(
        f"epochal checkpoint download {uuids[0]} ./{uuids[0]}")
    screenshot(page, "model-version")
    fetched = httpx.get(f"{cluster.url}/api/v1/checkpoints/{uuids[0]}/download",
                        headers=cluster.headers, timeout=30)
    assert fetched.status_code == 200, fetched.text
    with page.expect_download() as download:
        page.click("#version-download")
    with open(download.value.path(), "rb") as stream, tarfile.open(fileobj=stream) as tar:
        member = tar.extractfile("weights.bin")
        assert member is not None and member.read() == b"w0!"
    assert not errors

    # Deleting a version, after a confirmation in place.
    page.goto(f"/models/{model_id}/versions/3")
    page.click("#version-delete button.danger")
    page.click("#version-delete .confirm-yes")
    expect(page).to_have_url(re.compile(rf"/models/{model_id}$"))
    expect(page.locator("tr.version-row")).to_have_count(2)

    # Someone else reads the model but is offered no change, and the download is theirs to ask.
    other, other_errors = opened(someone_else, f"/models/{model_id}")
    expect(other.locator("#model-read-only")).to_contain_text("Only admin")
    expect(other.locator("#model-delete")).to_have_count(0)
    expect(other.locator("#alias-form")).to_be_hidden()
    expect(other.locator("#register")).to_be_hidden()
    expect(other.locator("#model-notes")).to_have_text("trained on MNIST\nsee experiment 1")
    other.goto(f"/models/{model_id}/versions/1")
    expect(other.locator("#version-files-owner")).to_contain_text("admin")
    expect(other.locator("#version-download")).to_have_count(0)
    expect(other.locator("#det-download-command code")).to_have_text(
        f"det checkpoint download {uuids[1]}")
    # On a trial's page they are offered only models of their own (here: a new one).
    other.goto(f"/trials/{trial_ids[0]}")
    row = other.locator("tr.checkpoint-row", has_text=uuids[0])
    row.locator("button.register-checkpoint").click()
    expect(row.locator("select.register-model option")).to_have_text(["New model…"])
    expect(row.locator("input.register-new-name")).to_be_visible()
    assert not other_errors
    other.close()

    # Archived: hidden from the list unless asked for; then deleted.
    page.click("#model-archive")
    expect(page.locator("#model-archived")).to_be_visible()
    page.goto("/models")
    page.fill("#model-search", name)
    expect(page.locator("#model-count")).to_have_text("0 models")
    page.check("#model-show-archived")
    listed = page.locator("tr.model-row", has_text=name)
    expect(listed).to_have_class(re.compile("archived"))
    expect(listed.locator("td.workspace")).to_have_text(workspace)
    expect(listed.locator("td.latest")).to_have_text("v2")
    assert "archived=true" in page.url and f"q={name}" in page.url
    listed.locator("a").first.click()
    page.click("#model-delete button.danger")
    page.click("#model-delete .confirm-yes")
    expect(page).to_have_url(re.compile(r"/models(\?.*)?$"))
    assert httpx.get(f"{cluster.url}/api/v1/models/{model_id}", headers=cluster.headers,
                     timeout=30).status_code == 404
    page.close()


def test_models_page_sorts_and_filters_by_tag(admin: BrowserContext, cluster: Cluster) -> None:
    tag = uuid.uuid4().hex[:6]
    for name, labels in ((f"alpha-{tag}", ["nlp"]), (f"beta-{tag}", ["cv"]),
                         (f"gamma-{tag}", ["cv"])):
        made = httpx.post(f"{cluster.url}/api/v1/models", headers=cluster.headers, timeout=30,
                          json={"name": name, "labels": labels})
        assert made.status_code == 200, made.text
    page, errors = opened(admin, f"/models?q={tag}")
    rows = page.locator("tr.model-row")
    expect(rows).to_have_count(3)
    page.click("th button[data-sort='SORT_BY_NAME']")
    expect(rows.first).to_have_attribute("data-name", f"alpha-{tag}")
    page.click("th button[data-sort='SORT_BY_NAME']")
    expect(rows.first).to_have_attribute("data-name", f"gamma-{tag}")
    expect(page.locator("th button[data-sort='SORT_BY_NAME']")).to_have_attribute(
        "aria-sort", "descending")
    # A tag clicked in the table filters by it.
    rows.first.locator("button.chip", has_text="cv").click()
    expect(rows).to_have_count(2)
    expect(page.locator("#model-label-filter")).to_have_value("cv")
    page.select_option("#model-label-filter", "nlp")
    expect(rows).to_have_count(1)
    page.select_option("#model-label-filter", "cv")
    expect(rows).to_have_count(2)
    # The address keeps the view: opened again, the same rows in the same order.
    page.goto(page.url)
    expect(rows).to_have_count(2)
    expect(rows.first).to_have_attribute("data-name", f"gamma-{tag}")
    expect(page.locator("#model-label-filter")).to_have_value("cv")
    assert not errors
    page.close()
