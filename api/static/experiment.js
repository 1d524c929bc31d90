// One experiment: its state and controls above tabs (as Determined's experiment page): Overview
// (learning curves), Trials (sort, filter, columns, compare), Hyperparameters (a hyperparameter
// against the searcher metric, parallel coordinates whose brushed ranges filter the trials, and
// importance), Checkpoints, Logs, Config & files and Notes. The tab, the table's sort, filter,
// columns and selection, the brushes, the scatter's hyperparameter and the curves' options are
// kept in the address (AddressState), so a copied link opens the same view. The table shows one page of trials
// (PAGE_SIZE, sorted and filtered in SQL), and the curves and scatter draw that page's trials;
// parallel coordinates draw the best HP_VIEW_TRIALS; so an experiment of 10,000 trials loads as
// fast as one of ten. Live through GET /api/v1/experiments/{id}/stream, which streams the same
// page (polling if the stream cannot be had).

import { AddressState } from "/static/address.js";
import { api, every, follow, lastErrorLines, query, reportValues, startPage } from "/static/api.js";
import { drawImportance, drawParallel, drawScatter, importanceNote, rankColor }
  from "/static/charts.js";
import { CurvePanel } from "/static/curves.js";
import { notebookButton, tensorBoardButton } from "/static/launch.js";
import { LogPanel } from "/static/logs.js";
import { STATES, contentKey, el, flatHparams, fmtBytes, fmtNumber, fmtTime, progressBar, replace,
  shortState, sortButton, stateBadge, table, unmanagedBadge, workflowLink } from "/static/dom.js";

const CURVE_REFRESH_SECONDS = 2;
const PAGE_SIZE = 100;
const HP_VIEW_TRIALS = 1000;
const HP_VIEW_SECONDS = 10;
const HIDDEN_COLUMNS_KEY = "epochal.hiddenTrialColumns";
const MAX_SELECTED = 100;  // trials a copied address selects (each is read on opening it)
const TABS = [["overview", "Overview"], ["trials", "Trials"], ["hyperparameters",
  "Hyperparameters"], ["checkpoints", "Checkpoints"], ["logs", "Logs"],
["config", "Config & files"], ["notes", "Notes"]];
// The view a copied address restores; `order` is "" (the sort's first direction), asc or desc.
const view = new AddressState({ tab: "overview", sort: "", order: "", offset: 0, state: "",
  filter: [], hide: [], selected: [], brush: [], hp: "", group: "validation", metric: [],
  logy: false, smoothing: 0 });
const BY_METRIC = "SORT_BY_BEST_VALIDATION_METRIC";
const TERMINAL = STATES.terminal;
const E = STATES.experiment;
const T = STATES.trial;
// Each action and when it applies: (state, archived, unmanaged) -> bool. The cluster cannot
// pause a script it does not run.
const ACTIONS = {
  pause: (state, archived, unmanaged) => state === E.ACTIVE && !unmanaged,
  activate: (state, archived, unmanaged) => state === E.PAUSED && !unmanaged,
  cancel: (state) => state === E.ACTIVE || state === E.PAUSED,
  kill: (state) => [E.ACTIVE, E.PAUSED, E.STOPPING_CANCELED].includes(state),
  archive: (state, archived) => TERMINAL.includes(state) && !archived,
  unarchive: (state, archived) => archived,
  delete: (state) => TERMINAL.includes(state),
};
const CONFIRM = {
  kill: "Kill experiment {id}? Its trials stop at once.",
  delete: "Delete experiment {id}, its trials, metrics, logs and checkpoints for good?",
};

const experimentId = Number(document.body.dataset.id);
const main = document.getElementById("main");
const header = el("div", { id: "experiment-header" });
const actionStatus = el("div", { class: "status", id: "action-status" });
const curveBox = el("section", { id: "curves", class: "panel" });
const trialBox = el("section", { id: "trials", class: "panel" });
const hpSelect = el("select", { id: "hp-select", "aria-label": "hyperparameter",
  onchange: () => {
    pickedHp = hpSelect.value;
    view.set({ hp: pickedHp });
    renderScatter();
  } });
let pickedHp = view.get("hp") || null;
let importanceOrder = [];  // hyperparameters, the most important first
const scatterBox = el("div", { class: "chart-box", id: "hp-scatter" });
const parallelBox = el("div", { class: "chart-box", id: "hp-parallel" });
const importanceBox = el("div", { class: "chart-box", id: "hp-importance" });
const importanceCaption = el("p", { class: "muted", id: "hp-importance-method" });
const compareBox = el("section", { id: "compare", class: "panel" });
const compareSlot = el("span", { class: "compare-slot" });
// Every trial's lines, each naming its trial (the last 5,000, then live).
const logs = new LogPanel({ name: `experiment-${experimentId}`, byTrial: true });
let summary = null;
let expConfig = {};  // the experiment's config, as the API shows it
let hpDefs = {};  // hyperparameter (dotted name) -> its definition in the config
let kinds = {};  // hyperparameter (dotted name) -> its type in the config
// Trials picked for comparison, by id (kept across pages).
const selected = new Map();
// Which trials the table shows; a larger experiment opens on its best trials.
const page = { offset: view.get("offset"), sortBy: view.get("sort") || null,
  desc: { asc: false, desc: true }[view.get("order")] ?? null, state: view.get("state") || null,
  filters: view.get("filter") };
let stopFollowing = () => {};
let curves = null;
let curveStamp = "";
let curveTimer = null;
let pendingTrials = null;

// Actions sent and not yet answered; their buttons stay disabled whatever the updates say.
const inFlight = new Set();

function action(name) {
  return el("button", { type: "button", class: `action action-${name}`, "data-action": name,
    onclick: async () => {
      if (CONFIRM[name] && !confirm(CONFIRM[name].replace("{id}", experimentId))) return;
      inFlight.add(name);
      actionButtons[name].disabled = true;
      replace(actionStatus, `${name}: sent`);
      try {
        if (name === "delete") {
          await api(`/api/v1/experiments/${experimentId}`, { method: "DELETE" });
          window.location.assign("/");
          return;
        }
        await api(`/api/v1/experiments/${experimentId}/${name}`, { method: "POST" });
        replace(actionStatus, `${name}: accepted`);
        inFlight.delete(name);
        await refreshOnce();
      } catch (error) {
        inFlight.delete(name);
        replace(actionStatus, el("span", { class: "error" }, `${name} failed: ${error.message}`));
      }
    } }, name);
}

// The buttons are made once and only enabled or disabled by live updates: a button redrawn
// between a press and its release would lose the click. Disabled until the state is known.
const actionButtons = Object.fromEntries(Object.keys(ACTIONS).map((name) => {
  const button = action(name);
  button.disabled = true;
  return [name, button];
}));
const progressSlot = el("span", { class: "progress-slot" });
const headline = el("div", {});
const labelBox = el("div", {});
replace(header, headline,
  el("div", { class: "actions" }, progressSlot, Object.values(actionButtons), actionStatus),
  labelBox);

// An experiment imported from another cluster's history (`epochal import determined`): where from,
// the source's page of it linked when its address is a web address.
function importedFrom(exp) {
  const source = exp.importedFrom;
  if (!source) return "";
  const kind = source.kind === "determined" ? "Determined" : source.kind;
  const web = /^https?:\/\//.test(source.url);
  const page = `${source.url.replace(/\/+$/, "")}/det/experiments/${encodeURIComponent(source.experimentId)}`;
  return el("p", { class: "imported" }, `Imported from ${kind} at `,
    web ? el("a", { href: source.url, target: "_blank", rel: "noopener" }, source.url) : source.url,
    ", experiment ",
    web ? el("a", { href: page, target: "_blank", rel: "noopener" }, source.experimentId)
      : source.experimentId);
}

function renderHeader(exp) {
  const state = shortState(exp.state);
  document.title = `Experiment ${exp.id} · Epochal`;
  replace(headline,
    el("h1", {}, `Experiment ${exp.id}: `, el("span", { class: "name" }, exp.name), " ",
      stateBadge(exp.state), " ", unmanagedBadge(exp)),
    el("p", { class: "summary" },
      `${exp.searcherType} search on ${exp.searcherMetric} `,
      `(${exp.smallerIsBetter ? "smaller" : "larger"} is better) · `,
      exp.bestTrialId ? el("span", {}, "best trial ",
        el("a", { href: `/trials/${exp.bestTrialId}` }, exp.bestTrialId),
        ` (${fmtNumber(exp.bestValidation)})`) : "no validation yet",
      ` · owner ${exp.username} · started ${fmtTime(exp.startTime)}`,
      exp.endTime ? ` · ended ${fmtTime(exp.endTime)}` : "",
      workflowLink(exp.workflowId, " · ")),
    importedFrom(exp));
  replace(progressSlot, progressBar(exp.progress));
  for (const [name, applies] of Object.entries(ACTIONS)) {
    actionButtons[name].disabled = inFlight.has(name) || !applies(state, exp.archived, exp.unmanaged);
  }
  replace(labelBox, exp.labels.length ? el("p", { class: "labels" },
    exp.labels.map((label) => el("span", { class: "label" }, label))) : "");
}

// Name, description, labels and notes, edited in place (the Notes tab); the config as submitted
// and the model definition's files (Config & files). Drawn once (and after a save), not on every
// live update, so typing is kept.
const detailsBox = el("section", { id: "details", class: "panel" });
const configBox = el("section", { id: "config-files", class: "panel" });
const errorBox = el("div", { id: "experiment-error" });

// An experiment in ERROR says why at the top: its own reason, or which trial failed and its last
// error lines.
async function renderError(exp) {
  if (exp.errorMessage) {  // the experiment's own reason: its searcher's sampler failed
    if (errorBox.dataset.reason) return;
    errorBox.dataset.reason = "experiment";
    replace(errorBox, el("div", { class: "error-summary" },
      el("strong", {}, "The experiment ended in ERROR"), `: ${exp.errorMessage}`));
    return;
  }
  if (!(exp.trialStates || {}).STATE_ERROR || errorBox.dataset.trial) return;
  const { trials } = await api(`/api/v1/experiments/${experimentId}/trials${query(
    { states: "STATE_ERROR", limit: 1, orderBy: "ORDER_BY_DESC" })}`);
  if (!trials.length) return;
  const failed = trials[0];
  errorBox.dataset.trial = String(failed.id);
  const shown = await lastErrorLines(failed.id);
  const count = exp.trialStates.STATE_ERROR;
  replace(errorBox, el("div", { class: "error-summary" },
    el("strong", {}, shortState(exp.state) === E.ERROR ? "The experiment ended in ERROR"
      : `${count} trial${count === 1 ? "" : "s"} ended in ERROR`),
    ": trial ", el("a", { href: `/trials/${failed.id}` }, failed.id),
    failed.earlyExitReason ? ` (${failed.earlyExitReason})` : "", " failed with",
    el("pre", {}, shown.join("\n") || "(no log lines)")));
}
const detailsStatus = el("span", { class: "status", id: "details-status" });

function renderDetails(exp) {
  const field = (id, label, value, tag = "input") => el("label", { class: "field" }, label,
    el(tag, { id, value: tag === "input" ? value : null }, tag === "textarea" ? value : null));
  const form = el("form", { id: "details-form", onsubmit: async (event) => {
    event.preventDefault();
    const value = (id) => document.getElementById(id).value;
    replace(detailsStatus, "saving");
    try {
      const { experiment } = await api(`/api/v1/experiments/${experimentId}`, {
        method: "PATCH",
        body: { name: value("exp-name"), description: value("exp-description"),
          notes: value("exp-notes"),
          labels: value("exp-labels").split(",").map((l) => l.trim()).filter(Boolean) },
      });
      renderDetails(experiment);
      replace(detailsStatus, "saved");
      await refreshOnce();
    } catch (error) {
      replace(detailsStatus, el("span", { class: "error" }, `not saved: ${error.message}`));
    }
  } },
  field("exp-name", "name", exp.name),
  field("exp-description", "description", exp.description),
  field("exp-labels", "labels (comma-separated)", exp.labels.join(", ")),
  field("exp-notes", "notes", exp.notes, "textarea"),
  el("div", { class: "actions" }, el("button", { type: "submit", id: "details-save" }, "save"),
    detailsStatus));
  const fileView = el("pre", { id: "model-file", class: "code" });
  replace(detailsBox, el("h2", {}, "Details"), form);
  if (configBox.childElementCount) return;  // the config and files do not change
  replace(configBox,
    el("details", { id: "config" }, el("summary", {}, "Config (as submitted)"),
      el("pre", { id: "config-yaml", class: "code" }, exp.originalConfig || "")),
    el("details", { id: "model-files" }, el("summary", {}, "Model definition"),
      el("ul", { class: "file-tree" }), fileView));
  const list = configBox.querySelector(".file-tree");
  api(`/api/v1/experiments/${experimentId}/file_tree`).then(({ files }) => {
    const add = (nodes, depth) => {
      for (const node of nodes) {
        list.append(el("li", { style: `padding-left:${depth}rem` }, node.isDir ? `${node.name}/`
          : el("a", { href: "#", class: "model-file", "data-path": node.path, onclick: async (e) => {
            e.preventDefault();
            const { file } = await api(`/api/v1/experiments/${experimentId}/file`,
              { method: "POST", body: { path: node.path } });
            const bytes = Uint8Array.from(atob(file), (c) => c.charCodeAt(0));
            replace(fileView, new TextDecoder().decode(bytes));
            fileView.dataset.path = node.path;
          } }, node.name), node.isDir ? "" : ` (${node.contentLength} bytes)`));
        add(node.files, depth + 1);
      }
    };
    add(files, 0);
  }).catch((error) => list.append(el("li", { class: "error" }, error.message)));
}

function flat(trial) {
  if (!trial.flatHparams) trial.flatHparams = flatHparams(trial.hparams);
  return trial.flatHparams;
}

// Each hyperparameter's definition in the config by dotted name ({type: log, double, int,
// categorical or const, ...}); a bare value is a const.
function hpDefinitions(hps, prefix = "", into = {}) {
  for (const [name, def] of Object.entries(hps || {})) {
    if (def && typeof def === "object" && typeof def.type === "string") into[prefix + name] = def;
    else if (def && typeof def === "object" && !Array.isArray(def)) {
      hpDefinitions(def, `${prefix}${name}.`, into);
    } else into[prefix + name] = { type: "const", val: def };
  }
  return into;
}

function hparamNames(trials) {
  const names = new Set();
  for (const t of trials) for (const name of Object.keys(flat(t))) names.add(name);
  return [...names].sort();
}

function hpValue(value) {
  return typeof value === "object" && value !== null ? JSON.stringify(value) : fmtNumber(value);
}

// A sort's first direction: the best metric first, everything else ascending.
function descendingFirst(exp, sortBy) {
  return sortBy === BY_METRIC && !exp.smallerIsBetter;
}

// The table's trials: the state and conditions asked for, within the brushed ranges.
function pageQuery(exp) {
  const descending = page.desc ?? descendingFirst(exp, page.sortBy);
  return query({ limit: PAGE_SIZE, offset: page.offset, sortBy: page.sortBy,
    orderBy: descending ? "ORDER_BY_DESC" : "ORDER_BY_ASC", states: page.state,
    filter: [...page.filters, ...brushConditions()] });
}

// The latest turnTo: only its outcome is acted on, however late an earlier one's comes.
let turns = 0;

function turnTo(offset, sortBy = page.sortBy, desc = sortBy === page.sortBy ? page.desc : null) {
  page.offset = Math.max(0, offset);
  page.sortBy = sortBy;
  page.desc = desc;
  view.set({ offset: page.offset, sort: page.sortBy || "",
    order: page.desc === null ? "" : page.desc ? "desc" : "asc", state: page.state || "",
    filter: page.filters });
  const turn = ++turns;
  stopFollowing();
  refreshOnce().then((drawn) => {
    if (turn !== turns) return;
    replace(actionStatus);
    if (drawn) followPage();  // a refused filter is not followed: there is nothing to show
  }).catch((error) => {
    if (turn !== turns) return;
    replace(actionStatus, el("span", { class: "error" }, String(error.message)));
  });
}

function pager(exp, shown, total) {
  const sort = el("select", { id: "trial-sort", "aria-label": "sort trials",
    onchange: () => turnTo(0, sort.value) },
  el("option", { value: "SORT_BY_ID", selected: page.sortBy !== BY_METRIC }, "by trial id"),
  el("option", { value: BY_METRIC, selected: page.sortBy === BY_METRIC },
    `best ${exp.searcherMetric} first`));
  const first = total ? page.offset + 1 : 0;
  return el("div", { class: "pager" },
    el("button", { type: "button", id: "trials-prev", disabled: page.offset === 0,
      onclick: () => turnTo(page.offset - PAGE_SIZE) }, "‹ previous"),
    el("span", { id: "trials-range" }, ` trials ${first}–${page.offset + shown} of ${total} `),
    el("button", { type: "button", id: "trials-next", disabled: page.offset + shown >= total,
      onclick: () => turnTo(page.offset + PAGE_SIZE) }, "next ›"),
    " ", sort);
}

// A column the master sorts by: its header is a button (again: the other direction).
function sortHeader(exp, label, sortBy) {
  const active = page.sortBy === sortBy;
  const desc = page.desc ?? descendingFirst(exp, sortBy);
  return sortButton(label, { key: sortBy, active, desc,
    onSort: () => turnTo(0, sortBy, active ? !desc : null) });
}

// Which columns the user hid: the address's, else those kept in the browser across visits.
const hiddenColumns = new Set(new URLSearchParams(location.search).has("hide") ? view.get("hide")
  : JSON.parse(localStorage.getItem(HIDDEN_COLUMNS_KEY) || "[]"));

// The table's controls are made once, so a live update (every second while trials run) keeps
// what the user is typing and the column chooser open.
const columnChooser = el("details", { id: "column-chooser", class: "chooser" });
let chooserNames = "";

// The chooser's checkboxes, remade only when the columns change.
function offerColumns(names) {
  if (names.join("\n") === chooserNames) return;
  chooserNames = names.join("\n");
  replace(columnChooser, el("summary", {}, "columns"),
    names.map((name) => el("label", { class: "choice" }, el("input", { type: "checkbox",
      "data-column": name, checked: !hiddenColumns.has(name), onchange: (event) => {
        if (event.target.checked) hiddenColumns.delete(name);
        else hiddenColumns.add(name);
        localStorage.setItem(HIDDEN_COLUMNS_KEY, JSON.stringify([...hiddenColumns]));
        view.set({ hide: [...hiddenColumns] });
        renderTrials(summary.experiment, summary.trials, summary.pagination.total);
      } }), name)));
}

const stateFilter = el("select", { id: "trial-state-filter", "aria-label": "trial state",
  onchange: () => {
    page.state = stateFilter.value || null;
    turnTo(0);
  } }, el("option", { value: "" }, "any state"),
[T.ACTIVE, T.RUNNING, T.COMPLETED, T.CANCELED, T.ERROR].map((s) =>
  el("option", { value: `STATE_${s}`, selected: page.state === `STATE_${s}` }, s)));

// Conditions the master filters the trials by (GET .../trials?filter=), comma-separated. What
// is wrong with them is said right under the box: the master's reason when it refuses them
// (the table then shows no trials, never the previous filter's), or a hyperparameter this
// experiment does not have. The example is made of this experiment's own names.
const conditionFilter = el("input", { id: "trial-filter", type: "search", size: 36,
  "aria-label": "filter trials", "aria-describedby": "trial-filter-note",
  placeholder: "searcherMetric<=0.5", value: page.filters.join(", "),
  onchange: () => {
    page.filters = conditionFilter.value.split(",").map((c) => c.trim()).filter(Boolean);
    turnTo(0);
  } });
const filterNote = el("div", { id: "trial-filter-note", class: "filter-note", role: "status" });
let filterRefused = null;  // the master's reason while it refuses the filter in the box
let exampleBound = 0.5;  // the example's bound on the searcher metric: the page's median

// An example condition for a hyperparameter: its range's middle, its first value, or its value.
function exampleCondition(name, def) {
  const middle = (def.minval + def.maxval) / 2;
  if (def.type === "double") return `hp.${name}<${fmtNumber(middle)}`;
  if (def.type === "int") return `hp.${name}<=${Math.round(middle)}`;
  if (def.type === "log") return `hp.${name}<${fmtNumber((def.base ?? 10) ** middle)}`;
  const value = def.type === "categorical" ? (def.vals || [])[0] : def.val;
  return ["string", "number"].includes(typeof value) ? `hp.${name}=${value}` : null;
}

// The box's example: a numeric hyperparameter, the searcher metric (bounded by the page's
// median) and a categorical (else constant) one, all of this experiment.
function filterExample(trials) {
  const conditions = Object.keys(hpDefs).sort().map((name) => [hpDefs[name].type,
    exampleCondition(name, hpDefs[name])]).filter(([, condition]) => condition);
  const numeric = conditions.find(([type]) => ["double", "log", "int"].includes(type));
  const other = conditions.find(([type]) => type === "categorical")
    || conditions.find(([type]) => type === "const");
  const metrics = trials.map((t) => t.searcherMetricValue).filter((v) => typeof v === "number")
    .sort((a, b) => a - b);
  if (metrics.length) exampleBound = metrics[Math.floor((metrics.length - 1) / 2)];
  const better = summary.experiment.smallerIsBetter ? "<=" : ">=";
  return [numeric && numeric[1], `searcherMetric${better}${fmtNumber(exampleBound)}`,
    other && other[1]].filter(Boolean).join(", ");
}

// The hyperparameters a condition names that this experiment does not have.
function unknownHparams(filters) {
  const names = Object.keys(hpDefs);
  return filters.map((f) => (/^hp\.([^<>=!\s]+)/.exec(f) || [])[1]).filter((name) => name
    && !names.some((known) => known === name || known.startsWith(`${name}.`)));
}

function renderFilterNote() {
  conditionFilter.placeholder = filterExample(summary.trials);
  conditionFilter.size = Math.max(36, Math.min(64, conditionFilter.placeholder.length + 2));
  conditionFilter.toggleAttribute("aria-invalid", filterRefused !== null);
  if (filterRefused !== null) {
    replace(filterNote, el("span", { class: "error" }, filterRefused));
    return;
  }
  const unknown = unknownHparams(page.filters);
  replace(filterNote, unknown.length ? el("span", { class: "warning" },
    `this experiment has no hyperparameter ${unknown.join(", ")}; it has `
    + `${Object.keys(hpDefs).sort().join(", ") || "none"}`) : null);
}

const trialCount = el("h2", {});
const trialPage = el("div", {});

function compareButton() {
  return el("button", { type: "button", id: "compare-button", disabled: selected.size < 2,
    onclick: () => renderCompare().catch((error) =>
      replace(compareBox, el("p", { class: "error" }, error.message))) },
  `compare ${selected.size} selected`);
}

// What the trial table last drew. The stream's first event, and each poll, repeat what a turn
// of page or sort has just drawn: the table is left as it is then, since a redraw replaces its
// pager and sort buttons and loses a click landing in between (a fresh-clone run lost one).
let trialsDrawn = "";

function renderTrials(exp, trials, total) {
  const drawing = contentKey([exp, trials, total, page, filterRefused, [...hiddenColumns],
    [...selected.keys()]]);
  if (drawing === trialsDrawn) return;
  trialsDrawn = drawing;
  renderFilterNote();
  if (filterRefused !== null) {
    replace(trialCount, "Trials (none shown)");
    replace(trialPage, el("p", { id: "trials-refused", class: "muted" },
      "No trials shown: the filter above was refused."));
    return;
  }
  const hps = hparamNames(trials);
  const metric = exp.searcherMetric;
  // The searcher's metric first, then the trial's standing, then its hyperparameters; every
  // column sorts (in SQL, over all the experiment's trials).
  const columns = [
    { name: "Trial", label: sortHeader(exp, "Trial", "SORT_BY_ID"),
      cell: (t) => el("span", {}, el("input", { type: "checkbox", class: "select-trial",
        "aria-label": `select trial ${t.id}`, checked: selected.has(t.id), onchange: (event) => {
          if (event.target.checked) selected.set(t.id, t);
          else selected.delete(t.id);
          view.set({ selected: [...selected.keys()] });
          replace(compareSlot, compareButton());
        } }), " ", el("a", { href: `/trials/${t.id}` }, t.id)) },
    { name: `Best ${metric}`, label: sortHeader(exp, `Best ${metric}`, BY_METRIC),
      class: "num best-metric", cell: (t) => fmtNumber(t.searcherMetricValue) },
    { name: `Latest ${metric}`, label: `Latest ${metric}`, class: "num",
      cell: (t) => fmtNumber(reportValues(t.latestValidation)[metric]) },
    { name: "State", label: sortHeader(exp, "State", "SORT_BY_STATE"),
      cell: (t) => stateBadge(t.state) },
    { name: "Batches", label: sortHeader(exp, "Batches", "SORT_BY_BATCHES_PROCESSED"),
      class: "num batches", cell: (t) => t.totalBatchesProcessed },
    { name: "Restarts", label: sortHeader(exp, "Restarts", "SORT_BY_RESTARTS"), class: "num",
      cell: (t) => t.restarts },
    { name: "Status", label: "Status", cell: (t) => t.searcherStatus || "" },
    ...hps.map((name) => ({ name, label: sortHeader(exp, name, `hp.${name}`), class: "num hp",
      cell: (t) => hpValue(flat(t)[name]) })),
  ];
  const shown = columns.filter((c) => c.name === "Trial" || !hiddenColumns.has(c.name));
  offerColumns(columns.slice(1).map((c) => c.name));
  replace(trialCount, `Trials (${total})`);
  replace(trialPage, total > PAGE_SIZE || page.offset ? pager(exp, trials.length, total) : "",
    el("div", { class: "table-scroll" }, table(shown, trials, (t) => ({
      class: `trial-row${t.id === exp.bestTrialId ? " best" : ""}`, "data-trial-id": t.id,
      "data-state": shortState(t.state),
    }))));
  replace(compareSlot, compareButton());
  if (trials.length && !trialBox.dataset.firstDrawn) {
    trialBox.dataset.firstDrawn = String(Math.round(performance.now()));
  }
}

// The page's trials by the searcher metric, best first (those without one last).
function ranked(trials) {
  const sign = summary.experiment.smallerIsBetter ? 1 : -1;
  const score = (t) => (typeof t.searcherMetricValue === "number" ? sign * t.searcherMetricValue
    : Infinity);
  return [...trials].sort((a, b) => score(a) - score(b) || a.id - b.id);
}

function varies(trials, name) {
  return new Set(trials.map((t) => JSON.stringify(flat(t)[name]))).size > 1;
}

function allNumbers(trials, name) {
  return trials.every((t) => typeof flat(t)[name] === "number");
}

// How a hyperparameter's axis is drawn: as its config's type says (log, int, double), or as
// categories when a value is not a number.
function axisKind(trials, name) {
  return allNumbers(trials, name) ? kinds[name] || "double" : "categorical";
}

function renderScatter() {
  if (!summary) return;
  const { experiment: exp, trials } = summary;
  const names = hparamNames(trials);
  // Until the user picks one: the most important hyperparameter, else the first whose value
  // differs between trials.
  const chosen = names.includes(pickedHp) ? pickedHp
    : importanceOrder.find((name) => names.includes(name))
      || names.find((name) => varies(trials, name)) || names[0];
  replace(hpSelect, names.map((n) => el("option", { value: n, selected: n === chosen }, n)));
  const order = ranked(trials).map((t) => t.id);
  const scored = trials.filter((t) => typeof t.searcherMetricValue === "number" && chosen
    && flat(t)[chosen] !== undefined);
  const numeric = allNumbers(scored, chosen);
  const kind = axisKind(scored, chosen);
  drawScatter(scatterBox, scored.map((t) => ({
    x: numeric ? flat(t)[chosen] : String(hpValue(flat(t)[chosen])),
    y: t.searcherMetricValue,
    text: `trial ${t.id}: ${chosen}=${hpValue(flat(t)[chosen])}, `
      + `${exp.searcherMetric}=${fmtNumber(t.searcherMetricValue)}`,
    color: rankColor(order.indexOf(t.id)),
  })), { xLabel: chosen || "", yLabel: `best ${exp.searcherMetric}`, kind });
}

// Parallel coordinates over the trials the table's state and conditions select (up to
// HP_VIEW_TRIALS, the best), drawn once the chart is in view (a thousand lines take a GPU-less
// browser seconds). Brushing an axis filters the table (so the scatter and the curves, which
// draw its trials) to the brushed ranges; the lines outside them stay, greyed, as context.
let parallelSeen = false;
let parallelDrawn = "";  // the query the chart's lines answer

// The brushed ranges by axis: the hyperparameter's dotted name (or METRIC_AXIS) -> {lo, hi} in
// its own values (a log one's, not its exponent's), or {values} of a categorical one. In the
// address as name:lo:hi or name:=a|b.
const METRIC_AXIS = "searcherMetric";
const brush = new Map(view.get("brush").map((item) => {
  const [name, ...rest] = item.split(":");
  const [lo, hi] = rest.map(Number);
  return rest[0]?.startsWith("=") ? [name, { values: rest.join(":").slice(1).split("|") }]
    : [name, { lo, hi }];
}).filter(([name, range]) => /^[A-Za-z0-9_.-]+$/.test(name) && (range.values
  || (Number.isFinite(range.lo) && Number.isFinite(range.hi)))));

function brushItems() {
  return [...brush].map(([name, r]) => (r.values ? `${name}:=${r.values.join("|")}`
    : `${name}:${r.lo}:${r.hi}`));
}

// The brushes as the master's trial conditions: a range as two bounds; categories as the
// values left out (a categorical axis is drawn from the values its trials have).
function brushConditions() {
  return [...brush].flatMap(([name, r]) => {
    const field = name === METRIC_AXIS ? METRIC_AXIS : `hp.${name}`;
    if (!r.values) return [`${field}>=${r.lo}`, `${field}<=${r.hi}`];
    return ((hpDefs[name] || {}).vals || []).map(String).filter((v) => !r.values.includes(v))
      .map((v) => `${field}!=${v}`);
  });
}

const brushNotes = [el("div", { class: "brush-note", id: "hp-brush-note", role: "status" }),
  el("div", { class: "brush-note", id: "trials-brush-note", role: "status" })];

function renderBrushNotes() {
  for (const note of brushNotes) {
    replace(note, ...brush.size ? [
      "brushed on parallel coordinates: ",
      ...[...brush].map(([name, r]) => el("span", { class: "brush-range", "data-axis": name },
        r.values ? `${name} ∈ {${r.values.join(", ")}}`
          : `${fmtNumber(r.lo)} ≤ ${name} ≤ ${fmtNumber(r.hi)}`)),
      el("button", { type: "button", class: "brush-clear", onclick: () => {
        brush.clear();
        brushed();
        renderParallel().catch((error) => console.error(error));
      } }, "clear"),
    ] : []);
  }
}

// The brushes changed: kept in the address, shown, and the table (so the scatter and curves)
// redrawn within them.
function brushed() {
  view.set({ brush: brushItems() });
  renderBrushNotes();
  turnTo(0);
}

function parallelQuery(exp) {
  return query({ limit: HP_VIEW_TRIALS, sortBy: BY_METRIC,
    orderBy: exp.smallerIsBetter ? "ORDER_BY_ASC" : "ORDER_BY_DESC", states: page.state,
    filter: page.filters });
}

async function renderParallel() {
  const exp = summary.experiment;
  const asked = parallelQuery(exp);
  parallelDrawn = asked;
  let trials = [];
  try {
    ({ trials } = await api(`/api/v1/experiments/${experimentId}/trials${asked}`));
  } catch (error) {
    if (error.status !== 400) throw error;  // a refused filter: said under the box
  }
  if (asked !== parallelDrawn) return;  // a later filter's is on its way
  const scored = trials.filter((t) => typeof t.searcherMetricValue === "number");
  const names = hparamNames(scored).filter((n) => kinds[n] !== "const" && varies(scored, n));
  const axes = [...names, METRIC_AXIS];
  drawParallel(parallelBox, names.map((name) => ({
    label: name, kind: axisKind(scored, name), values: scored.map((t) => flat(t)[name]),
    brush: brush.get(name),
  })), { label: exp.searcherMetric, values: scored.map((t) => t.searcherMetricValue),
    brush: brush.get(METRIC_AXIS) },
  { smallerIsBetter: exp.smallerIsBetter, onBrush: (ranges) => {
    brush.clear();
    ranges.forEach((range, i) => {
      if (range) brush.set(axes[i], range);
    });
    brushed();
  } });
  parallelBox.dataset.trials = String(scored.length);
}

async function renderImportance() {
  const importance = await api(`/api/v1/experiments/${experimentId}/hyperparameter-importance`);
  drawImportance(importanceBox, importance);
  importanceBox.dataset.trials = String(importance.trials);
  importanceCaption.textContent = importanceNote(importance);
  const order = Object.keys(importance.importance);
  if (order.join() !== importanceOrder.join()) {
    importanceOrder = order;
    renderScatter();  // it opens on the most important one
  }
}

function drawParallelWhenSeen() {
  new IntersectionObserver((entries, observer) => {
    if (!entries.some((entry) => entry.isIntersecting)) return;
    observer.disconnect();
    parallelSeen = true;
    renderParallel().catch((error) => console.error(error));
  }).observe(parallelBox);
}

// Both are re-read at most every HP_VIEW_SECONDS while the experiment's trials change.
let hpViewStamp = "";
let hpViewTimer = null;
function refreshHpViews() {
  const stamp = JSON.stringify(summary.experiment.trialStates || {})
    + summary.experiment.bestValidation;
  if (stamp === hpViewStamp || hpViewTimer) return;
  hpViewStamp = stamp;
  renderImportance().catch((error) => console.error(error));
  if (parallelSeen) renderParallel().catch((error) => console.error(error));
  hpViewTimer = setTimeout(() => {
    hpViewTimer = null;
    refreshHpViews();
  }, HP_VIEW_SECONDS * 1000);
}

// The selected trials side by side: their curves overlaid and their hyperparameters in
// columns, the rows where they differ highlighted.
async function renderCompare() {
  const trials = [...selected.values()];
  const exp = summary.experiment;
  const names = hparamNames(trials);
  const rows = [
    { name: `best ${exp.searcherMetric}`, values: trials.map((t) => fmtNumber(t.searcherMetricValue)) },
    { name: "state", values: trials.map((t) => shortState(t.state)) },
    { name: "batches", values: trials.map((t) => String(t.totalBatchesProcessed)) },
    ...names.map((name) => ({ name, values: trials.map((t) => hpValue(flat(t)[name])) })),
  ];
  const curveHolder = el("div", { id: "compare-curves" });
  replace(compareBox, el("h2", {}, `Comparing trials ${trials.map((t) => t.id).join(", ")}`),
    el("button", { type: "button", id: "compare-close", onclick: () => replace(compareBox) },
      "close"),
    curveHolder,
    el("table", { id: "compare-table" },
      el("thead", {}, el("tr", {}, el("th", {}, ""),
        trials.map((t) => el("th", {}, el("a", { href: `/trials/${t.id}` }, `trial ${t.id}`))))),
      el("tbody", {}, rows.map((row) => el("tr", {
        class: new Set(row.values).size > 1 ? "differs" : "same", "data-name": row.name },
      el("th", {}, row.name), row.values.map((v) => el("td", { class: "num" }, v)))))));
  compareBox.scrollIntoView();
  const panel = new CurvePanel(curveHolder, { group: "validation",
    preferred: { validation: exp.searcherMetric } });
  await panel.load(ranked(trials).map((t) => t.id));
}

// Curves are re-read when a trial reported something new, at most every couple of seconds; a
// change that arrives in between is loaded when the interval ends.
function refreshCurves(trials) {
  const stamp = trials.map((t) => `${t.id}:${t.totalBatchesProcessed}:`
    + `${t.latestValidation ? t.latestValidation.stepsCompleted : ""}`).join(",");
  if (stamp === curveStamp) return;
  pendingTrials = trials;
  if (curveTimer) return;
  curveStamp = stamp;
  pendingTrials = null;
  curves.load(ranked(trials).map((t) => t.id)).catch((error) => console.error(error));
  curveTimer = setTimeout(() => {
    curveTimer = null;
    if (pendingTrials) refreshCurves(pendingTrials);
  }, CURVE_REFRESH_SECONDS * 1000);
}

function show(next) {
  summary = next;
  renderHeader(next.experiment);
  renderError(next.experiment).catch((error) => console.error(error));
  renderTrials(next.experiment, next.trials, next.pagination.total);
  renderScatter();
  if (curves) {
    refreshCurves(next.trials);
    refreshHpViews();
  }
  if (view.get("tab") === "checkpoints") refreshCheckpoints();
  // The parallel coordinates follow the table's state and conditions (not its brushes).
  if (parallelSeen && parallelQuery(next.experiment) !== parallelDrawn) {
    renderParallel().catch((error) => console.error(error));
  }
  main.dataset.state = shortState(next.experiment.state);
}

// Draws the page's trials; false when it did not (the user has since turned to another page, or
// the master refused the filter: then the table shows no trials, and why, under the box).
async function refreshOnce() {
  const { experiment, config } = await api(`/api/v1/experiments/${experimentId}`);
  expConfig = config;
  hpDefs = hpDefinitions(config.hyperparameters);
  kinds = Object.fromEntries(Object.entries(hpDefs).map(([name, def]) => [name, def.type]));
  if (page.sortBy === null) {
    page.sortBy = experiment.numTrials > PAGE_SIZE ? BY_METRIC : "SORT_BY_ID";
  }
  const asked = pageQuery(experiment);
  let answer = null;
  try {
    answer = await api(`/api/v1/experiments/${experimentId}/trials${asked}`);
  } catch (error) {
    const refused = error.status === 400 && page.filters.length;
    if (!refused || asked !== pageQuery(experiment)) throw error;
    filterRefused = error.message;
    show({ experiment, trials: [], pagination: { total: 0 } });
    return false;
  }
  if (asked !== pageQuery(experiment)) return false;  // a poll in flight when the user moved on
  filterRefused = null;
  show({ experiment, trials: answer.trials, pagination: answer.pagination });
  return true;
}

function followPage() {
  let stopPolling = () => {};
  const stopStream = follow(
    `/api/v1/experiments/${experimentId}/stream${pageQuery(summary.experiment)}`,
    { experiment: show }, () => { stopPolling = every(2, refreshOnce, actionStatus); });
  stopFollowing = () => {
    stopStream();
    stopPolling();
  };
}

// The tabs: a tablist of buttons (arrow keys, Home and End move between them) over one panel
// each. The tab is in the address; a chart drawn while its tab was hidden (plotly measures its
// box, which a hidden one has not) is fitted when the tab is shown.
const tabButtons = {};
const tabPanels = {};
const tabList = el("div", { role: "tablist", class: "tabs", id: "experiment-tabs",
  "aria-label": "experiment views", onkeydown: (event) => {
    const names = TABS.map(([name]) => name);
    const at = names.indexOf(view.get("tab"));
    const next = { ArrowRight: at + 1, ArrowLeft: at - 1, Home: 0, End: names.length - 1 }[event.key];
    if (next === undefined) return;
    event.preventDefault();
    showTab(names[(next + names.length) % names.length]);
    tabButtons[view.get("tab")].focus();
  } });
for (const [name, label] of TABS) {
  tabButtons[name] = el("button", { type: "button", role: "tab", id: `tab-${name}`,
    class: "tab", "data-tab": name, "aria-controls": `panel-${name}`,
    onclick: () => showTab(name) }, label);
  tabPanels[name] = el("div", { role: "tabpanel", id: `panel-${name}`, class: "tab-panel",
    "aria-labelledby": `tab-${name}`, tabindex: 0 });
  tabList.append(tabButtons[name]);
}

function showTab(name) {
  const shown = tabPanels[name] ? name : "overview";
  for (const [key] of TABS) {
    tabButtons[key].setAttribute("aria-selected", String(key === shown));
    tabButtons[key].tabIndex = key === shown ? 0 : -1;
    tabPanels[key].hidden = key !== shown;
  }
  view.set({ tab: shown });
  main.dataset.tab = shown;
  for (const box of tabPanels[shown].querySelectorAll(".js-plotly-plot")) {
    window.Plotly?.Plots.resize(box);
  }
  if (shown === "checkpoints") refreshCheckpoints(0);
}

// The experiment's checkpoints, the latest first: read when the tab is shown, and while it is,
// at most every CHECKPOINT_SECONDS as live updates come.
const CHECKPOINT_SECONDS = 5;
const checkpointBox = el("section", { id: "experiment-checkpoints", class: "panel" });
let checkpointsRead = -Infinity;

function refreshCheckpoints(within = CHECKPOINT_SECONDS) {
  if (!summary || performance.now() - checkpointsRead < within * 1000) return;
  checkpointsRead = performance.now();
  renderCheckpoints().catch((error) =>
    replace(checkpointBox, el("p", { class: "error" }, error.message)));
}

async function renderCheckpoints() {
  const { checkpoints } = await api(`/api/v1/experiments/${experimentId}/checkpoints${query({
    sortByAttr: "SORT_BY_END_TIME", orderBy: "ORDER_BY_DESC", limit: 1000 })}`);
  const metric = summary.experiment.searcherMetric;
  const size = (c) => Object.values(c.resources || {}).reduce((a, b) => a + Number(b), 0);
  replace(checkpointBox, el("h2", {}, `Checkpoints (${checkpoints.length})`),
    checkpoints.length ? el("div", { class: "table-scroll" }, table([
      { label: "UUID", cell: (c) => el("code", {}, c.uuid) },
      { label: "Trial", cell: (c) => el("a", { href: `/trials/${c.training.trialId}` },
        c.training.trialId) },
      { label: "Batches", class: "num", cell: (c) => c.metadata.steps_completed },
      { label: "State", cell: (c) => shortState(c.state) },
      { label: metric, class: "num", cell: (c) => fmtNumber(c.training.searcherMetric) },
      { label: "Reported", cell: (c) => fmtTime(c.reportTime) },
      { label: "Size", class: "num", cell: (c) => fmtBytes(size(c)) },
    ], checkpoints, (c) => ({ class: "checkpoint-row", "data-uuid": c.uuid })))
      : el("p", { class: "muted" }, "No checkpoints yet."));
}

// The trials a copied address selected, read one by one (they may be on other pages).
async function restoreSelection() {
  const ids = view.get("selected").map(Number).filter(Number.isInteger).slice(0, MAX_SELECTED);
  const found = await Promise.all(ids.map((id) => api(`/api/v1/trials/${id}`)
    .then(({ trial }) => trial, () => null)));
  for (const trial of found) {
    if (trial && trial.experimentId === experimentId) selected.set(trial.id, trial);
  }
  view.set({ selected: [...selected.keys()] });
  renderTrials(summary.experiment, summary.trials, summary.pagination.total);
}

// The curves' metric, group, log axis and smoothing: from the address, and kept in it.
function followCurveOptions() {
  curves.group = view.get("group");
  if (view.get("metric").length) curves.chosen[curves.group] = view.get("metric");
  curves.logY.checked = view.get("logy");
  curves.smoothing.value = String(view.get("smoothing"));
  const keep = () => view.set({ group: curves.group, metric: curves.chosen[curves.group] || [],
    logy: curves.logY.checked, smoothing: Number(curves.smoothing.value) });
  curves.select.addEventListener("change", keep);
  curves.logY.addEventListener("change", keep);
  curves.smoothing.addEventListener("change", keep);
  for (const button of curves.groupButtons) button.addEventListener("click", keep);
}

async function start() {
  const user = await startPage();
  if (!user) return;
  replace(trialBox, trialCount,
    el("div", { class: "controls trial-controls" }, stateFilter,
      el("div", { class: "filter-field" }, conditionFilter, filterNote), columnChooser,
      compareSlot),
    brushNotes[1], trialPage);
  const launchSlot = el("div", { class: "actions launch-actions" });
  replace(tabPanels.overview, el("h2", {}, "Learning curves"), curveBox);
  replace(tabPanels.trials, trialBox, compareBox);
  replace(tabPanels.hyperparameters, brushNotes[0],
    el("section", { class: "panel" }, el("h2", {}, "Hyperparameter vs searcher metric"),
      el("label", {}, "hyperparameter ", hpSelect), scatterBox),
    el("section", { class: "panel" }, el("h2", {}, "Parallel coordinates"),
      el("p", { class: "muted" }, "Drag along an axis to filter the trials to a range."),
      parallelBox),
    el("section", { class: "panel" }, el("h2", {}, "Hyperparameter importance"),
      importanceCaption, importanceBox));
  replace(tabPanels.checkpoints, checkpointBox);
  replace(tabPanels.logs, el("section", { class: "panel", id: "experiment-logs" },
    el("h2", {}, "Logs"), logs.element));
  replace(tabPanels.config, configBox);
  replace(tabPanels.notes, detailsBox);
  replace(main, header, launchSlot, errorBox, tabList, Object.values(tabPanels));
  renderBrushNotes();
  view.set({ hide: [...hiddenColumns] });  // those kept in the browser go into a copied link
  showTab(view.get("tab"));
  await refreshOnce();
  replace(launchSlot, tensorBoardButton(user, { experimentIds: [experimentId] }),
    notebookButton(summary.experiment, expConfig));
  renderDetails(summary.experiment);
  curves = new CurvePanel(curveBox, {
    group: "validation",
    preferred: { validation: summary.experiment.searcherMetric },
  });
  followCurveOptions();
  curveStamp = "";
  refreshCurves(summary.trials);
  refreshHpViews();
  drawParallelWhenSeen();
  followPage();
  restoreSelection().catch((error) => console.error(error));
  logs.follow(`/api/v1/experiments/${experimentId}/logs/stream`,
    `/api/v1/experiments/${experimentId}/logs`);
  main.dataset.loaded = String(Math.round(performance.now()));
}

start().catch((error) => replace(main, el("p", { class: "error" }, String(error.message))));
