// One version of a model: its name, comment and notes edited in place, tags, aliases and
// metadata; the checkpoint it holds (source, validation metrics, the trial's hyperparameters);
// the checkpoint's files downloaded as a tar, or the command that downloads them; deletion.

import { api, startPage } from "/static/api.js";
import { el, flatHparams, fmtBytes, fmtNumber, fmtTime, replace, stateBadge, table } from "/static/dom.js";
import {
  aliasChips, chipEditor, confirmButton, copyCommand, labelsAndMetadata, mayChange,
} from "/static/registry.js";

const modelId = Number(document.body.dataset.id);
const number = Number(location.pathname.split("/").pop());
const base = `/api/v1/models/${modelId}`;
const path = `${base}/versions/${number}`;

const main = document.getElementById("main");
const header = el("div", { id: "version-header" });
const status = el("div", { class: "status" });
const detailsBox = el("section", { id: "version-details", class: "panel" });
const aliasBox = el("section", { id: "version-aliases", class: "panel" });
const checkpointBox = el("section", { id: "version-checkpoint", class: "panel" });
const metricsBox = el("section", { id: "version-metrics", class: "panel" });
const hparamsBox = el("section", { id: "version-hparams", class: "panel" });
const filesBox = el("section", { id: "version-files", class: "panel" });

let user = null;
let version = null;
let aliases = [];

function renderHeader() {
  const model = version.model;
  document.title = `${model.name} v${version.version} · Epochal`;
  replace(header, el("p", { class: "crumbs" }, el("a", { href: "/models" }, "Models"), " / ",
    el("a", { href: `/models/${modelId}`, id: "version-model" }, model.name)),
  el("h1", {}, `${model.name} version ${version.version}`,
    version.name ? ` · ${version.name}` : "", " ",
    aliasChips(aliases.filter((a) => a.version === version.version).map((a) => a.alias))),
  el("p", { class: "summary" }, `registered by ${version.username}`,
    ` · ${fmtTime(version.creationTime)} · updated ${fmtTime(version.lastUpdatedTime)}`));
}

async function patch(body) {
  ({ modelVersion: version } = await api(path, { method: "PATCH", body }));
  renderHeader();
}

const details = labelsAndMetadata("version", () => version, patch);
const { tagsBox, metadataBox } = details;

function renderDetails() {
  const editable = mayChange(user, version.model.username);
  details.render(editable);
  if (!editable) {
    replace(detailsBox, el("h2", {}, "Details"),
      el("p", { class: "muted", id: "version-read-only" },
        `Only ${version.model.username} (the model's owner) or an admin can change it.`),
      el("p", {}, "comment: ", el("span", { id: "version-comment" }, version.comment || "—")),
      el("h3", {}, "Notes"), el("pre", { class: "notes", id: "version-notes" },
        version.notes || "—"),
      el("h3", {}, "Tags"), tagsBox, el("h3", {}, "Metadata"), metadataBox);
    return;
  }
  const said = el("span", { role: "alert", id: "version-save-said" });
  const name = el("input", { id: "version-edit-name", value: version.name, maxlength: 255 });
  const comment = el("input", { id: "version-edit-comment", value: version.comment });
  const notes = el("textarea", { id: "version-edit-notes", rows: 6 });
  notes.value = version.notes;
  replace(detailsBox, el("h2", {}, "Details"),
    el("form", { id: "version-edit", class: "details-grid", onsubmit: async (event) => {
      event.preventDefault();
      replace(said);
      try {
        await patch({ name: name.value, comment: comment.value, notes: notes.value });
        replace(said, el("span", { class: "muted saved" }, "saved"));
      } catch (error) {
        replace(said, el("span", { class: "error" }, error.message));
      }
    } }, el("label", { class: "field" }, "name", name),
    el("label", { class: "field" }, "comment", comment),
    el("label", { class: "field" }, "notes", notes),
    el("span", {}, el("button", { type: "submit", id: "version-save" }, "Save"), " ", said)),
    el("h3", {}, "Tags"), tagsBox, el("h3", {}, "Metadata"), metadataBox,
    el("p", { class: "actions" }, confirmButton({ id: "version-delete", label: "Delete version",
      question: `Delete version ${version.version} of ${version.model.name}? Its checkpoint`
        + " stays.",
      action: async () => {
        await api(path, { method: "DELETE" });
        location.assign(`/models/${modelId}`);
      } })));
}

function renderAliases() {
  const editable = mayChange(user, version.model.username);
  const mine = aliases.filter((a) => a.version === version.version).map((a) => a.alias);
  const set = async (next) => {
    for (const alias of next.filter((a) => !mine.includes(a))) {
      ({ aliases } = await api(`${base}/aliases/${encodeURIComponent(alias)}`,
        { method: "PUT", body: { version: version.version } }));
    }
    for (const alias of mine.filter((a) => !next.includes(a))) {
      ({ aliases } = await api(`${base}/aliases/${encodeURIComponent(alias)}`,
        { method: "DELETE" }));
    }
    renderHeader();
    renderAliases();
  };
  replace(aliasBox, el("h2", {}, "Aliases"),
    chipEditor({ id: "version-alias-editor", values: mine, kind: "alias",
      placeholder: "add an alias", onChange: editable ? set : null }),
    el("p", { class: "muted" }, "An alias names one version of the model: adding an alias that"
      + " another version has moves it here."));
}

function renderCheckpoint(experiment) {
  const c = version.checkpoint;
  const size = Object.values(c.resources || {}).reduce((a, b) => a + b, 0);
  const rows = [
    ["UUID", el("code", { id: "version-uuid" }, c.uuid)],
    ["State", stateBadge(c.state)],
    ["Source", [el("a", { href: `/experiments/${c.training.experimentId}` },
      `experiment ${c.training.experimentId}`), experiment ? ` (${experiment.name})` : "", " · ",
    el("a", { href: `/trials/${c.training.trialId}` }, `trial ${c.training.trialId}`)]],
    ["Batches", c.metadata.steps_completed ?? ""],
    ["Reported", fmtTime(c.reportTime)],
    ["Size", `${fmtBytes(size)} in ${Object.keys(c.resources || {}).length} files`],
    ["Stored at", el("code", {}, c.storagePath || "")],
  ];
  replace(checkpointBox, el("h2", {}, "Checkpoint"), el("table", { class: "kv" },
    el("tbody", {}, rows.map(([name, value]) => el("tr", {}, el("th", {}, name),
      el("td", {}, value))))));
}

function renderMetrics(experiment) {
  const values = c().training.validationMetrics?.avgMetrics || {};
  const metric = experiment?.searcherMetric;
  replace(metricsBox, el("h2", {}, "Validation metrics"), Object.keys(values).length
    ? table([{ label: "Metric", cell: ([name]) => name },
      { label: "Value", class: "num", cell: ([, value]) => fmtNumber(value) }],
    Object.entries(values), ([name]) => ({ class: `metric-row${name === metric
      ? " searcher" : ""}`, "data-name": name }))
    : el("p", { class: "muted" }, "No validation at this checkpoint's step."));
  const hparams = flatHparams(c().training.hparams);
  replace(hparamsBox, el("h2", {}, "Hyperparameters"), Object.keys(hparams).length
    ? table([{ label: "Hyperparameter", cell: ([name]) => name },
      { label: "Value", class: "num", cell: ([, value]) => (typeof value === "number"
        ? fmtNumber(value) : JSON.stringify(value)) }],
    Object.entries(hparams), ([name]) => ({ class: "hparam-row", "data-name": name }))
    : el("p", { class: "muted" }, "none"));
}

function c() {
  return version.checkpoint;
}

// The master streams a checkpoint's files (shared_fs on its host, or S3) to the checkpoint's
// owner and admins; to anyone else, and where the master cannot reach the files, the command.
function renderFiles(experiment) {
  const uuid = c().uuid;
  const completed = c().state === "STATE_COMPLETED";
  const owner = experiment?.username;
  const mayRead = mayChange(user, owner);
  replace(filesBox, el("h2", {}, "Files"),
    !completed ? el("p", { class: "muted" }, "The checkpoint is not COMPLETED: no files.")
      : mayRead ? el("p", {}, el("a", { id: "version-download", class: "download",
        href: `/api/v1/checkpoints/${uuid}/download`, download: `${uuid}.tar` },
      "Download the checkpoint (tar)"), el("span", { class: "muted" },
        " streamed by the master from the checkpoint's storage"))
        : el("p", { class: "muted", id: "version-files-owner" }, `A checkpoint's files are its`
          + ` owner's (${owner}) and admins': ask them, or run the command below as them.`),
    completed ? [el("p", { class: "muted" }, "From a terminal (also where the master cannot"
      + " read the storage, with the storage's own access):"),
    copyCommand(`epochal checkpoint download ${uuid} ./${uuid}`, "download-command"),
    copyCommand(`det checkpoint download ${uuid}`, "det-download-command")] : "");
}

async function load() {
  const [{ modelVersion }, { aliases: named }] = await Promise.all([api(path),
    api(`${base}/aliases`)]);
  version = modelVersion;
  aliases = named;
  const experiment = await api(`/api/v1/experiments/${c().training.experimentId}`)
    .then((answer) => answer.experiment).catch(() => null);
  renderHeader();
  renderDetails();
  renderAliases();
  renderCheckpoint(experiment);
  renderMetrics(experiment);
  renderFiles(experiment);
}

replace(main, header, status, detailsBox, aliasBox, checkpointBox, metricsBox, hparamsBox,
  filesBox);
startPage().then((found) => {
  user = found;
  if (user) {
    load().catch((error) => replace(status, el("p", { class: "error" }, error.message)));
  }
});
