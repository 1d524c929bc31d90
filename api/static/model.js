// One model of the registry: its details (name, description, notes, tags, metadata) edited in
// place by its owner or an admin, archived or deleted; its versions (tags, aliases, source,
// validation metrics); its aliases; two versions compared side by side; and a checkpoint
// registered as the next version, chosen from an experiment's checkpoints, best first.

import { AddressState } from "/static/address.js";
import { api, every, query, startPage } from "/static/api.js";
import { el, flatHparams, fmtNumber, fmtTime, replace, stateBadge, table } from "/static/dom.js";
import { aliasChips, confirmButton, labelsAndMetadata, mayChange } from "/static/registry.js";

const modelId = Number(document.body.dataset.id);
const base = `/api/v1/models/${modelId}`;
const view = new AddressState({ compare: [] });

const main = document.getElementById("main");
const header = el("div", { id: "model-header" });
const status = el("div", { class: "status" });
const detailsBox = el("section", { id: "model-details", class: "panel" });
const versionBox = el("section", { id: "versions", class: "panel" });
const aliasBox = el("section", { id: "aliases", class: "panel" });
const compareBox = el("section", { id: "compare", class: "panel", hidden: true });
const registerBox = el("section", { id: "register", class: "panel" });

let user = null;
let model = null;
let versions = [];
let aliases = [];
let workspaceName = "";

// -- header and details ------------------------------------------------------------------------

function renderHeader() {
  document.title = `Model ${model.name} · Epochal`;
  replace(header,
    el("h1", {}, `Model ${model.name}`, model.archived
      ? el("span", { class: "chip archived", id: "model-archived" }, "archived") : ""),
    el("p", { class: "summary" }, model.description || "",
      model.description ? " · " : "", "owner ", el("b", { id: "model-owner" }, model.username),
      " · workspace ", el("b", { id: "model-workspace-name" }, workspaceName),
      ` · ${model.numVersions} version${model.numVersions === 1 ? "" : "s"}`,
      ` · created ${fmtTime(model.creationTime)} · updated ${fmtTime(model.lastUpdatedTime)}`));
}

async function patchModel(body) {
  ({ model } = await api(base, { method: "PATCH", body }));
  renderHeader();
}

const details = labelsAndMetadata("model", () => model, patchModel);
const { tagsBox, metadataBox } = details;

function renderDetails() {
  const editable = mayChange(user, model.username);
  details.render(editable);
  if (!editable) {
    replace(detailsBox, el("h2", {}, "Details"),
      el("p", { class: "muted", id: "model-read-only" },
        `Only ${model.username} (its owner) or an admin can change this model.`),
      el("h3", {}, "Notes"), el("pre", { id: "model-notes", class: "notes" }, model.notes || "—"),
      el("h3", {}, "Tags"), tagsBox, el("h3", {}, "Metadata"), metadataBox);
    return;
  }
  const said = el("span", { role: "alert", id: "model-save-said" });
  const name = el("input", { id: "model-edit-name", value: model.name, maxlength: 255,
    required: true });
  const description = el("input", { id: "model-edit-description", value: model.description });
  const notes = el("textarea", { id: "model-edit-notes", rows: 6 });
  notes.value = model.notes;
  const form = el("form", { id: "model-edit", class: "details-grid", onsubmit: async (event) => {
    event.preventDefault();
    replace(said);
    try {
      await patchModel({ name: name.value, description: description.value, notes: notes.value });
      replace(said, el("span", { class: "muted saved" }, "saved"));
    } catch (error) {
      replace(said, el("span", { class: "error" }, error.message));
    }
  } },
  el("label", { class: "field" }, "name", name),
  el("label", { class: "field" }, "description", description),
  el("label", { class: "field" }, "notes", notes),
  el("span", {}, el("button", { type: "submit", id: "model-save" }, "Save"), " ", said));
  const archive = el("button", { type: "button", id: "model-archive", onclick: async () => {
    await api(`${base}/${model.archived ? "unarchive" : "archive"}`, { method: "POST" });
    await refresh();
    archive.textContent = model.archived ? "Unarchive" : "Archive";
  } }, model.archived ? "Unarchive" : "Archive");
  // Determined's "move": the model to another workspace (named, not numbered).
  const destination = el("select", { id: "model-move-workspace", "aria-label": "workspace" });
  const moveSaid = el("span", { role: "alert" });
  api("/api/v1/workspaces?archived=false").then(({ workspaces }) => replace(destination,
    workspaces.map((w) => el("option", { value: w.id, selected: w.id === model.workspaceId },
      w.name)))).catch((error) => replace(moveSaid, el("span", { class: "error" },
    error.message)));
  const move = el("form", { id: "model-move", class: "inline-form", onsubmit: async (event) => {
    event.preventDefault();
    replace(moveSaid);
    try {
      await api(`${base}/move`, { method: "POST",
        body: { destinationWorkspaceId: Number(destination.value) } });
      await refresh();
      replace(moveSaid, el("span", { class: "muted saved" }, "moved"));
    } catch (error) {
      replace(moveSaid, el("span", { class: "error" }, error.message));
    }
  } }, "workspace ", destination, el("button", { type: "submit" }, "Move"), moveSaid);
  replace(detailsBox, el("h2", {}, "Details"), form,
    el("h3", {}, "Tags"), tagsBox, el("h3", {}, "Metadata"), metadataBox,
    el("h3", {}, "Workspace"), move,
    el("p", { class: "actions" }, archive, " ", confirmButton({ id: "model-delete",
      label: "Delete model", question: `Delete ${model.name} and all its versions?`
        + " Their checkpoints stay.",
      action: async () => {
        await api(base, { method: "DELETE" });
        location.assign("/models");
      } })));
}

// -- versions ----------------------------------------------------------------------------------

// The searcher's metric of the experiment a version's checkpoint came from.
function searcherOf(version) {
  const searcher = version.checkpoint.training.experimentConfig?.searcher || {};
  return { metric: searcher.metric || "", smallerIsBetter: searcher.smaller_is_better !== false };
}

function validation(version) {
  return version.checkpoint.training.validationMetrics?.avgMetrics || {};
}

function aliasesOf(version) {
  return aliases.filter((a) => a.version === version.version).map((a) => a.alias);
}

function versionLink(v, text = `v${v.version}`) {
  return el("a", { href: `/models/${modelId}/versions/${v.version}` }, text);
}

function renderVersions() {
  const picked = view.get("compare").map(Number);
  const metricName = [...new Set(versions.map((v) => searcherOf(v).metric).filter(Boolean))];
  const columns = [
    { label: "Compare", cell: (v) => el("input", { type: "checkbox", class: "compare-pick",
      "aria-label": `compare version ${v.version}`, checked: picked.includes(v.version),
      onchange: (event) => pick(v.version, event.target.checked) }) },
    { label: "Version", class: "num", cell: (v) => versionLink(v) },
    { label: "Name", cell: (v) => v.name },
    { label: "Tags", cell: (v) => v.labels.map((l) => el("span", { class: "chip label" }, l)) },
    { label: "Aliases", class: "aliases", cell: (v) => aliasChips(aliasesOf(v)) },
    { label: "Source", cell: (v) => [
      el("a", { href: `/experiments/${v.checkpoint.training.experimentId}` },
        `experiment ${v.checkpoint.training.experimentId}`), " · ",
      el("a", { href: `/trials/${v.checkpoint.training.trialId}` },
        `trial ${v.checkpoint.training.trialId}`)] },
    { label: "Batches", class: "num", cell: (v) => v.checkpoint.metadata.steps_completed ?? "" },
    { label: metricName.length === 1 ? metricName[0] : "Searcher metric", class: "num searcher",
      cell: (v) => fmtNumber(v.checkpoint.training.searcherMetric) },
    { label: "Validation metrics", class: "metrics", cell: (v) => Object.entries(validation(v))
      .filter(([name]) => name !== searcherOf(v).metric)
      .map(([name, value]) => `${name} ${fmtNumber(value)}`).join(" · ") },
    { label: "Checkpoint", cell: (v) => [el("code", { class: "uuid" }, v.checkpoint.uuid), " ",
      stateBadge(v.checkpoint.state)] },
    { label: "Comment", cell: (v) => v.comment },
    { label: "Created", cell: (v) => fmtTime(v.creationTime) },
    { label: "Owner", cell: (v) => v.username },
  ];
  replace(versionBox, el("h2", {}, `Versions (${versions.length})`), versions.length
    ? table(columns, versions, (v) => ({ class: "version-row", "data-version": v.version }))
    : el("p", { class: "muted" }, "No versions yet: register a checkpoint below, from a trial's"
      + " page, or with `epochal model register-version MODEL UUID`."),
  versions.length > 1 ? el("p", { class: "muted" }, "Tick two versions to compare them.") : "");
}

function pick(version, on) {
  let picked = view.get("compare").map(Number).filter((v) => v !== version);
  if (on) picked = [...picked, version].slice(-2);
  view.set({ compare: picked.map(String) });
  renderVersions();
  renderCompare();
}

// -- aliases -----------------------------------------------------------------------------------

const aliasList = el("div", { id: "alias-list" });
const aliasName = el("input", { id: "alias-name", placeholder: "alias, e.g. production",
  "aria-label": "alias", maxlength: 64, required: true });
const aliasVersion = el("select", { id: "alias-version", "aria-label": "version" });
const aliasError = el("span", { class: "error", role: "alert" });
const aliasForm = el("form", { id: "alias-form", class: "inline-form" }, aliasName, " → ",
  aliasVersion, el("button", { type: "submit" }, "Set alias"), aliasError);
aliasForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  replace(aliasError);
  try {
    ({ aliases } = await api(`${base}/aliases/${encodeURIComponent(aliasName.value.trim())}`,
      { method: "PUT", body: { version: Number(aliasVersion.value) } }));
    aliasName.value = "";
    renderAliases();
    renderVersions();
  } catch (error) {
    replace(aliasError, error.message);
  }
});

function renderAliases() {
  const editable = mayChange(user, model.username);
  const chosen = aliasVersion.value;
  replace(aliasVersion, versions.map((v) => el("option", { value: v.version }, `v${v.version}`)));
  if (versions.some((v) => String(v.version) === chosen)) aliasVersion.value = chosen;
  replace(aliasList, aliases.length ? el("ul", { class: "alias-list" }, aliases.map((a) =>
    el("li", { class: "alias-item", "data-alias": a.alias },
      el("span", { class: "chip alias" }, `@${a.alias}`), " → ",
      el("a", { href: `/models/${modelId}/versions/${a.version}` }, `v${a.version}`),
      el("span", { class: "muted" }, ` set by ${a.username}, ${fmtTime(a.lastUpdatedTime)}`),
      editable ? el("button", { type: "button", class: "alias-delete",
        "aria-label": `delete alias ${a.alias}`, onclick: async () => {
          ({ aliases } = await api(`${base}/aliases/${encodeURIComponent(a.alias)}`,
            { method: "DELETE" }));
          renderAliases();
          renderVersions();
        } }, "×") : ""))) : el("p", { class: "muted" }, "No aliases yet."));
  if (!aliasBox.childNodes.length) {
    replace(aliasBox, el("h2", {}, "Aliases"), el("p", { class: "muted" },
      "A name (production, champion) that points at one version: setting it on another version"
      + " moves it. Deployments read `/api/v1/models/NAME/aliases/production`."),
    aliasList, aliasForm);
  }
  aliasForm.hidden = !editable || !versions.length;
}

// -- comparing two versions --------------------------------------------------------------------

function same(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

function renderCompare() {
  const picked = view.get("compare").map(Number);
  const pair = picked.map((n) => versions.find((v) => v.version === n)).filter(Boolean);
  compareBox.hidden = pair.length !== 2;
  if (pair.length !== 2) return;
  const [a, b] = pair;
  const { metric, smallerIsBetter } = searcherOf(a);
  const rows = [];
  const add = (section, name, left, right, better = null) => rows.push(
    { section, name, left, right, better });
  add("version", "checkpoint", a.checkpoint.uuid, b.checkpoint.uuid);
  add("version", "source", `experiment ${a.checkpoint.training.experimentId} · trial `
    + `${a.checkpoint.training.trialId}`, `experiment ${b.checkpoint.training.experimentId}`
    + ` · trial ${b.checkpoint.training.trialId}`);
  add("version", "batches", a.checkpoint.metadata.steps_completed,
    b.checkpoint.metadata.steps_completed);
  add("version", "aliases", aliasesOf(a).join(", "), aliasesOf(b).join(", "));
  add("version", "tags", a.labels.join(", "), b.labels.join(", "));
  const va = validation(a);
  const vb = validation(b);
  for (const name of [...new Set([...Object.keys(va), ...Object.keys(vb)])].sort()) {
    let better = null;
    if (name === metric && typeof va[name] === "number" && typeof vb[name] === "number"
      && va[name] !== vb[name]) {
      better = (va[name] < vb[name]) === smallerIsBetter ? "left" : "right";
    }
    add("metric", name, va[name], vb[name], better);
  }
  const ha = flatHparams(a.checkpoint.training.hparams);
  const hb = flatHparams(b.checkpoint.training.hparams);
  for (const name of [...new Set([...Object.keys(ha), ...Object.keys(hb)])].sort()) {
    add("hyperparameter", name, ha[name], hb[name]);
  }
  const differing = rows.filter((r) => !same(r.left, r.right)).length;
  const cell = (r, side) => el("td", { class: `num${r.better === side ? " better" : ""}` },
    typeof r[side] === "number" ? fmtNumber(r[side]) : (r[side] ?? "—"));
  replace(compareBox, el("h2", {}, `Version ${a.version} and version ${b.version}`),
    el("p", { class: "muted", id: "compare-summary" },
      `${differing} of ${rows.length} rows differ (highlighted)`,
      metric ? `; the better ${metric} is in bold` : ""),
    el("table", { class: "compare" },
      el("thead", {}, el("tr", {}, el("th", {}, ""), el("th", {}, ""),
        el("th", {}, versionLink(a, `version ${a.version}`)),
        el("th", {}, versionLink(b, `version ${b.version}`)))),
      el("tbody", {}, rows.map((r) => el("tr", {
        class: `compare-row ${r.section}${same(r.left, r.right) ? "" : " differs"}`,
        "data-name": r.name, "data-section": r.section },
      el("td", { class: "muted" }, r.section), el("th", {}, r.name),
      cell(r, "left"), cell(r, "right"))))));
}

// -- registering a checkpoint ------------------------------------------------------------------

const experimentFilter = el("input", { id: "register-experiment-filter", type: "search",
  placeholder: "filter experiments by name", "aria-label": "filter experiments", maxlength: 255 });
const experimentSelect = el("select", { id: "register-experiment",
  "aria-label": "experiment" });
const checkpointBox = el("div", { id: "register-checkpoints" });
const registerComment = el("input", { id: "register-comment", placeholder: "comment (optional)",
  "aria-label": "version comment" });
const uuidInput = el("input", { id: "checkpoint-uuid", placeholder: "checkpoint UUID",
  "aria-label": "checkpoint UUID", required: true, size: 38 });
const commentInput = el("input", { id: "version-comment", placeholder: "comment",
  "aria-label": "comment" });
const formError = el("span", { class: "error", role: "alert" });
const uuidForm = el("form", { id: "register-version", class: "inline-form" },
  uuidInput, commentInput, el("button", { type: "submit" }, "Register version"), formError);

async function register(uuid, comment) {
  await api(`${base}/versions`, { method: "POST", body: { checkpointUuid: uuid, comment } });
  await refresh();
}

uuidForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  replace(formError);
  try {
    await register(uuidInput.value.trim(), commentInput.value);
    uuidInput.value = "";
    commentInput.value = "";
  } catch (error) {
    replace(formError, error.message);
  }
});

async function loadExperiments() {
  const { experiments } = await api(`/api/v1/experiments${query({ sortBy: "SORT_BY_ID",
    orderBy: "ORDER_BY_DESC", limit: 100, name: experimentFilter.value.trim() })}`);
  replace(experimentSelect, el("option", { value: "" }, "choose an experiment…"),
    experiments.map((e) => el("option", { value: e.id }, `${e.id} · ${e.name}`
      + ` (${e.state.replace(/^STATE_/, "")})`)));
}

async function loadCheckpoints() {
  const id = experimentSelect.value;
  if (!id) {
    replace(checkpointBox);
    return;
  }
  const [{ experiment }, { checkpoints }] = await Promise.all([
    api(`/api/v1/experiments/${id}`),
    api(`/api/v1/experiments/${id}/checkpoints${query({ sortByAttr: "SORT_BY_SEARCHER_METRIC",
      states: "STATE_COMPLETED" })}`)]);
  const registered = new Set(versions.map((v) => v.checkpoint.uuid));
  const said = el("span", { class: "error", role: "alert" });
  replace(checkpointBox, checkpoints.length ? [el("p", { class: "muted" },
    `Its ${checkpoints.length} checkpoints, the best ${experiment.searcherMetric} first.`),
  table([
    { label: "Trial", cell: (c) => el("a", { href: `/trials/${c.training.trialId}` },
      c.training.trialId) },
    { label: "Batches", class: "num", cell: (c) => c.metadata.steps_completed },
    { label: experiment.searcherMetric, class: "num", cell: (c) => fmtNumber(
      c.training.searcherMetric) },
    { label: "Reported", cell: (c) => fmtTime(c.reportTime) },
    { label: "UUID", cell: (c) => el("code", {}, c.uuid) },
    { label: "", cell: (c) => el("button", { type: "button", class: "register-this",
      onclick: async () => {
        replace(said);
        try {
          await register(c.uuid, registerComment.value);
          registerComment.value = "";
        } catch (error) {
          replace(said, error.message);
        }
      } }, registered.has(c.uuid) ? "Register again" : "Register") },
  ], checkpoints, (c) => ({ class: "register-row", "data-uuid": c.uuid })), said]
    : el("p", { class: "muted" }, "This experiment has no completed checkpoint."));
}

experimentFilter.addEventListener("input", () => loadExperiments().catch(() => {}));
experimentSelect.addEventListener("change", () => loadCheckpoints().catch((error) =>
  replace(checkpointBox, el("p", { class: "error" }, error.message))));

function renderRegister() {
  const editable = mayChange(user, model.username);
  registerBox.hidden = !editable;
  if (!editable || registerBox.childNodes.length) return;
  replace(registerBox, el("h2", {}, "Register a checkpoint"),
    el("div", { class: "inline-form" }, experimentFilter, experimentSelect, registerComment),
    checkpointBox, el("p", { class: "muted" }, "or paste a checkpoint's UUID:"), uuidForm);
  loadExperiments().catch((error) => replace(checkpointBox, el("p", { class: "error" },
    error.message)));
}

// -- loading -----------------------------------------------------------------------------------

let detailsShown = false;
async function refresh() {
  const [{ model: found }, { modelVersions }, { aliases: named }] = await Promise.all([
    api(base), api(`${base}/versions?orderBy=ORDER_BY_DESC`), api(`${base}/aliases`)]);
  if (!workspaceName || found.workspaceId !== model?.workspaceId) {
    workspaceName = (await api(`/api/v1/workspaces/${found.workspaceId}`)).workspace.name;
  }
  model = found;
  versions = modelVersions;
  aliases = named;
  renderHeader();
  if (!detailsShown) {
    renderDetails();
    detailsShown = true;
  }
  renderVersions();
  renderAliases();
  renderCompare();
  renderRegister();
  if (model.archived) registerBox.hidden = true;
}

replace(main, header, status, detailsBox, versionBox, compareBox, aliasBox, registerBox);
startPage().then((found) => {
  user = found;
  if (user) every(10, refresh, status);
});
