// One model of the registry: what it is, its versions (each a checkpoint, linked to its trial
// and experiment), and a form to register a checkpoint as the next version.

import { api, every, startPage } from "/static/api.js";
import { el, fmtNumber, fmtTime, replace, stateBadge, table } from "/static/dom.js";

const modelId = Number(document.body.dataset.id);
const main = document.getElementById("main");
const header = el("div", { id: "model-header" });
const status = el("div", { class: "status" });
const versionBox = el("section", { id: "versions", class: "panel" });
const uuidInput = el("input", { id: "checkpoint-uuid", placeholder: "checkpoint UUID",
  "aria-label": "checkpoint UUID", required: true, size: 38 });
const commentInput = el("input", { id: "version-comment", placeholder: "comment",
  "aria-label": "comment" });
const formError = el("span", { class: "error", role: "alert" });
const form = el("form", { id: "register-version", class: "inline-form" },
  uuidInput, commentInput, el("button", { type: "submit" }, "Register version"), formError);

function renderHeader(model) {
  document.title = `Model ${model.name} · Epochal`;
  replace(header,
    el("h1", {}, `Model ${model.name}`, model.archived ? " (archived)" : ""),
    el("p", { class: "summary" }, model.description || "",
      ` · owner ${model.username} · workspace ${model.workspaceId}`,
      model.labels.length ? ` · labels ${model.labels.join(", ")}` : "",
      ` · updated ${fmtTime(model.lastUpdatedTime)}`));
}

function renderVersions(versions) {
  const columns = [
    { label: "Version", class: "num", cell: (v) => v.version },
    { label: "Checkpoint", cell: (v) => el("code", {}, v.checkpoint.uuid) },
    { label: "State", cell: (v) => stateBadge(v.checkpoint.state) },
    { label: "Trial", cell: (v) => el("a", { href: `/trials/${v.checkpoint.training.trialId}` },
      v.checkpoint.training.trialId) },
    { label: "Experiment", cell: (v) => el("a",
      { href: `/experiments/${v.checkpoint.training.experimentId}` },
      v.checkpoint.training.experimentId) },
    { label: "Batches", class: "num", cell: (v) => v.checkpoint.metadata.steps_completed ?? "" },
    { label: "Searcher metric", class: "num",
      cell: (v) => fmtNumber(v.checkpoint.training.searcherMetric) },
    { label: "Comment", cell: (v) => v.comment },
    { label: "Registered", cell: (v) => fmtTime(v.creationTime) },
  ];
  replace(versionBox, el("h2", {}, `Versions (${versions.length})`), versions.length
    ? table(columns, versions, (v) => ({ class: "version-row", "data-version": v.version }))
    : el("p", { class: "muted" }, "No versions yet: register a checkpoint below, or with"
      + " `epochal model register-version MODEL UUID`."));
}

async function refresh() {
  const data = await api(`/api/v1/models/${modelId}/versions?orderBy=ORDER_BY_DESC`);
  renderHeader(data.model);
  renderVersions(data.modelVersions);
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  replace(formError);
  try {
    await api(`/api/v1/models/${modelId}/versions`, { method: "POST",
      body: { checkpointUuid: uuidInput.value.trim(), comment: commentInput.value } });
    uuidInput.value = "";
    commentInput.value = "";
    await refresh();
  } catch (error) {
    replace(formError, error.message);
  }
});

replace(main, header, status, versionBox, el("h2", {}, "Register a checkpoint"), form);
startPage().then((user) => user && every(5, refresh, status));
