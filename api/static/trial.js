// One trial: what it is (its hyperparameters, a table by dotted name, and a summary of its
// metrics: each one's latest value, the searcher metric's best validation and its step), its
// learning curves, its system metrics on a time axis, its checkpoints (the kept ones first, the
// deleted ones folded away) and its logs as they arrive (GET /api/v1/trials/{id}/logs/stream;
// without the stream, the lines so far).

import { api, every, lastErrorLines, reportValues, startPage } from "/static/api.js";
import { drawLines, rankColor } from "/static/charts.js";
import { CurvePanel } from "/static/curves.js";
import { tensorBoardButton } from "/static/launch.js";
import { LogPanel } from "/static/logs.js";
import { registerForm, registrableModels } from "/static/registry.js";
import { STATES, el, flatHparams, fmtBytes, fmtNumber, fmtTime, replace, shortState, stateBadge,
  table, workflowLink } from "/static/dom.js";

const TERMINAL = STATES.terminal;
const DELETED = STATES.checkpoint.DELETED;
// The system chart's axis spans at least this long, so a short run's samples (or its one
// sample) sit on a readable stretch of clock time.
const SYSTEM_MIN_SPAN_MS = 10_000;
// summaryMetrics' names for the groups, and how the page names them (validation first).
const METRIC_GROUPS = [["validation_metrics", "validation"], ["avg_metrics", "training"]];

const trialId = Number(document.body.dataset.id);
const main = document.getElementById("main");
const header = el("div", { id: "trial-header" });
const status = el("div", { class: "status" });
const curveBox = el("section", { id: "curves", class: "panel" });
const checkpointBox = el("section", { id: "checkpoints", class: "panel" });
const hparamBox = el("div", { id: "trial-hparams" });
const metricBox = el("div", { id: "trial-metrics" });
// The agent's samples (`profiling: {enabled: true}`): metric group "system", keyed by time.
const systemBox = el("section", { id: "system", class: "panel", hidden: true });
const systemSelect = el("select", { class: "metric-select", "aria-label": "system metric",
  onchange: () => drawSystem() });
const systemChart = el("div", { class: "chart-box" });
const systemLatest = el("p", { class: "summary" });
let systemReports = [];
const logs = new LogPanel({ name: `trial-${trialId}` });
const errorBox = el("div", { id: "trial-error" });
let curves = null;
let lastStamp = "";

function renderHeader(trial, exp) {
  document.title = `Trial ${trial.id} · Epochal`;
  replace(header,
    el("h1", {}, `Trial ${trial.id} `, stateBadge(trial.state)),
    el("p", { class: "summary" }, "experiment ",
      el("a", { href: `/experiments/${trial.experimentId}` }, `${trial.experimentId}`),
      exp ? ` (${exp.name})` : "",
      ` · ${trial.totalBatchesProcessed} batches · restarts ${trial.restarts}`,
      trial.agentId ? ` · agent ${trial.agentId}` : "",
      ` · started ${fmtTime(trial.startTime)}`, trial.endTime ? ` · ended ${fmtTime(trial.endTime)}` : "",
      exp ? ` · best ${exp.searcherMetric} ${fmtNumber(trial.searcherMetricValue)}` : "",
      workflowLink(trial.workflowId, " · ")));
}

// A hyperparameter's value in full (a number as the config gave it, never rounded).
function hparamValue(value) {
  return typeof value === "string" ? value : JSON.stringify(value);
}

// Drawn once (they never change), so a value being selected to copy stays selected.
function renderHparams(trial) {
  if (hparamBox.childElementCount) return;
  const hparams = Object.entries(flatHparams(trial.hparams)).sort(([a], [b]) => a.localeCompare(b));
  replace(hparamBox, el("h2", {}, "Hyperparameters"), hparams.length
    ? table([
      { label: "Name", cell: ([name]) => name },
      { label: "Value", class: "hp-value", cell: ([, value]) => hparamValue(value) },
    ], hparams, ([name, value]) => ({ class: "hparam-row", "data-name": name,
      "data-type": typeof value }))
    : el("p", { class: "muted" }, "none"));
}

// Each training and validation metric's latest value (and its range), and the best validation
// of the searcher's metric with the step it was reported at.
function renderMetrics(trial, exp) {
  const summary = trial.summaryMetrics || {};
  const rows = METRIC_GROUPS.flatMap(([key, group]) => Object.entries(summary[key] || {})
    .map(([name, stats]) => ({ group, name, ...stats })));
  const best = trial.bestValidation;
  const metric = exp.searcherMetric;
  const bestValue = best ? reportValues(best)[metric] : undefined;
  replace(metricBox, el("h2", {}, "Metrics"),
    el("p", { id: "trial-best", class: "summary" }, typeof bestValue === "number"
      ? [`best ${metric} `, el("strong", {}, fmtNumber(bestValue)),
        ` at batch ${best.stepsCompleted}`]
      : `no validation of ${metric} yet`),
    rows.length ? table([
      { label: "Metric", cell: (r) => r.name },
      { label: "Group", cell: (r) => r.group },
      { label: "Latest", class: "num latest", cell: (r) => fmtNumber(r.last) },
      { label: "Min", class: "num", cell: (r) => fmtNumber(r.min) },
      { label: "Max", class: "num", cell: (r) => fmtNumber(r.max) },
      { label: "Reports", class: "num", cell: (r) => r.count },
    ], rows, (r) => ({ class: `metric-row${r.group === "validation" && r.name === metric
      ? " searcher" : ""}`, "data-group": r.group, "data-name": r.name }))
      : el("p", { class: "muted" }, "no metrics yet"));
}

let viewer = null; // who is logged in: the models offered to register to are theirs to change

// "Register": a form in the row, to make this checkpoint the next version of a model chosen
// from the registry's, or of a new one named there.
function registerButton(checkpoint) {
  const box = el("span", { class: "register-box" });
  const open = async () => {
    try {
      const models = await registrableModels(viewer);
      replace(box, registerForm(checkpoint.uuid, { models, onDone: (modelVersion) => replace(box,
        el("a", { class: "registered", href: `/models/${modelVersion.model.id}/versions/`
          + `${modelVersion.version}` }, `${modelVersion.model.name} v${modelVersion.version}`)) }),
      el("button", { type: "button", class: "register-cancel", onclick: start }, "Cancel"));
      box.querySelector("select, input").focus();
    } catch (error) {
      replace(box, el("span", { class: "error" }, error.message));
    }
  };
  const start = () => replace(box, el("button", { type: "button", class: "register-checkpoint",
    onclick: open }, "Register"));
  start();
  return box;
}

function renderCheckpoints(checkpoints) {
  const columns = [
    { label: "UUID", cell: (c) => el("code", {}, c.uuid) },
    { label: "Batches", class: "num", cell: (c) => (c.metadata || {}).steps_completed ?? "" },
    { label: "State", cell: (c) => stateBadge(c.state) },
    { label: "Reported", cell: (c) => fmtTime(c.reportTime) },
    { label: "Searcher metric", class: "num", cell: (c) => fmtNumber(c.training.searcherMetric) },
    { label: "Size", class: "num",
      cell: (c) => fmtBytes(Object.values(c.resources || {}).reduce((a, b) => a + b, 0)) },
    // The master streams the files as a tar, from shared_fs or S3 alike.
    { label: "Files", cell: (c) => c.state === "STATE_COMPLETED"
      ? el("a", { href: `/api/v1/checkpoints/${c.uuid}/download`, download: `${c.uuid}.tar`,
        class: "download" }, "download") : "" },
    { label: "Model", cell: (c) => c.state === "STATE_COMPLETED" ? registerButton(c) : "" },
  ];
  const rows = (list) => table(columns, list, (c) => ({ class: "checkpoint-row",
    "data-state": shortState(c.state), "data-uuid": c.uuid }));
  // The kept checkpoints (newest first) are what a user came for; the deleted ones (their files
  // gone, by checkpoint GC) are folded away, counted, and stay open once opened.
  const kept = checkpoints.filter((c) => shortState(c.state) !== DELETED);
  const deleted = checkpoints.filter((c) => shortState(c.state) === DELETED);
  const wasOpen = checkpointBox.querySelector("#deleted-checkpoints")?.open;
  replace(checkpointBox,
    el("h2", {}, `Checkpoints (${kept.length} kept`,
      deleted.length ? `, ${deleted.length} deleted)` : ")"),
    kept.length ? rows(kept)
      : el("p", { class: "muted" }, deleted.length ? "none kept" : "none yet"),
    deleted.length ? el("details", { id: "deleted-checkpoints", open: wasOpen },
      el("summary", {}, `${deleted.length} deleted checkpoint${deleted.length === 1 ? "" : "s"}`),
      rows(deleted)) : "");
}

function systemValue(name, value) {
  if (name.endsWith("_bytes")) return fmtBytes(value);
  if (name.endsWith("_bytes_per_s")) return `${fmtBytes(value)}/s`;
  if (name.endsWith("_percent")) return `${fmtNumber(value)}%`;
  return fmtNumber(value);
}

// A moment as plotly's date axis reads it: the browser's own clock time (as fmtTime shows it).
function clockTime(ms) {
  const d = new Date(ms);
  const pad = (n, width = 2) => String(n).padStart(width, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:`
    + `${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

// The samples' stretch of time, padded, and never shorter than SYSTEM_MIN_SPAN_MS (centred on
// the samples): plotly's own range for one sample is -1..1 of nothing.
function timeRange(times) {
  const first = Math.min(...times);
  const last = Math.max(...times);
  const pad = Math.max((last - first) * 0.03, (SYSTEM_MIN_SPAN_MS - (last - first)) / 2);
  return [clockTime(first - pad), clockTime(last + pad)];
}

// Samples are keyed by their time (ms since the epoch), drawn at that time of day.
function drawSystem() {
  const names = [...new Set(systemReports.flatMap((r) => Object.keys(r.metrics)))].sort();
  const metric = names.includes(systemSelect.value) ? systemSelect.value : "cpu_util_percent";
  replace(systemSelect, names.map((n) => el("option", { value: n, selected: n === metric }, n)));
  const samples = systemReports.filter((r) => typeof r.metrics[metric] === "number");
  const points = samples.map((r) => [clockTime(r.stepsCompleted), r.metrics[metric]]);
  systemBox.dataset.metric = metric;
  drawLines(systemChart, [{ name: metric, color: rankColor(0), points }],
    { xLabel: "time", yLabel: metric, height: 260, xAxis: samples.length
      ? { type: "date", range: timeRange(samples.map((r) => r.stepsCompleted)) } : {} });
  const last = systemReports[systemReports.length - 1];
  replace(systemLatest, last ? `latest (${fmtTime(new Date(last.stepsCompleted))}): `
    + Object.entries(last.metrics).map(([k, v]) => `${k} ${systemValue(k, v)}`).join(" · ") : "");
}

async function renderSystem() {
  const { metrics } = await api(
    `/api/v1/trials/${trialId}/metrics?group=system&maxDatapoints=500`);
  systemReports = metrics;
  systemBox.hidden = !metrics.length;
  if (metrics.length) drawSystem();
}

// A trial in ERROR says why at the top: its last error lines (else its last lines).
async function renderError(trial) {
  if (shortState(trial.state) !== STATES.trial.ERROR || errorBox.dataset.trial) return;
  errorBox.dataset.trial = String(trial.id);
  const shown = await lastErrorLines(trialId);
  replace(errorBox, el("div", { class: "error-summary" },
    el("strong", {}, `Trial ${trial.id} ended in ERROR`),
    trial.earlyExitReason ? ` (${trial.earlyExitReason})` : "", ". Its last error lines:",
    el("pre", {}, shown.join("\n") || "(no log lines)")));
}

async function refresh(expHolder) {
  const { trial } = await api(`/api/v1/trials/${trialId}`);
  if (!expHolder.exp) {
    expHolder.exp = (await api(`/api/v1/experiments/${trial.experimentId}`)).experiment;
    curves = new CurvePanel(curveBox, {
      group: "training",
      preferred: { validation: expHolder.exp.searcherMetric },
    });
  }
  renderHeader(trial, expHolder.exp);
  renderHparams(trial);
  renderMetrics(trial, expHolder.exp);
  main.dataset.state = shortState(trial.state);
  const stamp = `${trial.totalBatchesProcessed}:${trial.latestCheckpointUuid}:${trial.state}`;
  const changed = stamp !== lastStamp;
  lastStamp = stamp;
  // At once, not one after another: the curves need not wait for the error lines and the
  // system metrics (each their own request and box).
  await Promise.all([
    renderError(trial), renderSystem(),
    changed && api(`/api/v1/trials/${trialId}/checkpoints?orderBy=ORDER_BY_DESC`)
      .then(({ checkpoints }) => renderCheckpoints(checkpoints)),
    changed && curves.load([trialId]),
  ]);
  return TERMINAL.includes(shortState(trial.state));
}

async function start() {
  viewer = await startPage();
  if (!viewer) return;
  replace(systemBox, el("h2", {}, "System metrics"),
    el("div", { class: "controls" }, el("label", {}, "metric ", systemSelect)), systemChart,
    systemLatest);
  replace(main, header,
    el("div", { class: "actions" }, tensorBoardButton(viewer, { trialIds: [trialId] })),
    errorBox, status,
    el("section", { id: "trial-overview", class: "panel" }, hparamBox, metricBox),
    el("h2", {}, "Learning curves"), curveBox, systemBox,
    checkpointBox,
    el("section", { class: "panel" }, el("h2", {}, "Logs"), logs.element));
  const holder = { exp: null };
  let stop = null;
  stop = every(2, async () => {
    if ((await refresh(holder)) && stop) stop();
  }, status);
  logs.follow(`/api/v1/trials/${trialId}/logs/stream`, `/api/v1/trials/${trialId}/logs`);
}

start().catch((error) => replace(main, el("p", { class: "error" }, String(error.message))));
