// One trial: what it is, its learning curves, its checkpoints and its logs as they arrive
// (GET /api/v1/trials/{id}/logs/stream; without the stream, the lines so far).

import { api, every, lastErrorLines, startPage } from "/static/api.js";
import { drawLines, rankColor } from "/static/charts.js";
import { CurvePanel } from "/static/curves.js";
import { LogPanel } from "/static/logs.js";
import { STATES, el, fmtBytes, fmtNumber, fmtTime, replace, shortState, stateBadge, table,
  workflowLink } from "/static/dom.js";

const TERMINAL = STATES.terminal;

const trialId = Number(document.body.dataset.id);
const main = document.getElementById("main");
const header = el("div", { id: "trial-header" });
const status = el("div", { class: "status" });
const curveBox = el("section", { id: "curves", class: "panel" });
const checkpointBox = el("section", { id: "checkpoints", class: "panel" });
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
  const hparams = Object.entries(trial.hparams || {}).map(([k, v]) =>
    el("span", { class: "hp" }, `${k}=${typeof v === "number" ? fmtNumber(v) : JSON.stringify(v)}`));
  replace(header,
    el("h1", {}, `Trial ${trial.id} `, stateBadge(trial.state)),
    el("p", { class: "summary" }, "experiment ",
      el("a", { href: `/experiments/${trial.experimentId}` }, `${trial.experimentId}`),
      exp ? ` (${exp.name})` : "",
      ` · ${trial.totalBatchesProcessed} batches · restarts ${trial.restarts}`,
      trial.agentId ? ` · agent ${trial.agentId}` : "",
      ` · started ${fmtTime(trial.startTime)}`, trial.endTime ? ` · ended ${fmtTime(trial.endTime)}` : "",
      exp ? ` · best ${exp.searcherMetric} ${fmtNumber(trial.searcherMetricValue)}` : "",
      workflowLink(trial.workflowId, " · ")),
    el("p", { class: "hparams" }, hparams));
}

// "Register as model": a new version of the model named (which must exist: the Models page
// creates one), holding this checkpoint.
function registerButton(checkpoint) {
  const said = el("span", { class: "status" });
  return el("span", {}, el("button", { type: "button", class: "register-checkpoint",
    onclick: async () => {
      const model = prompt("Register this checkpoint as a new version of model:");
      if (!model) return;
      try {
        const { modelVersion } = await api(
          `/api/v1/models/${encodeURIComponent(model.trim())}/versions`,
          { method: "POST", body: { checkpointUuid: checkpoint.uuid } });
        replace(said, " ", el("a", { href: `/models/${modelVersion.model.id}` },
          `${modelVersion.model.name} v${modelVersion.version}`));
      } catch (error) {
        replace(said, " ", el("span", { class: "error" }, error.message));
      }
    } }, "register"), said);
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
  replace(checkpointBox, el("h2", {}, `Checkpoints (${checkpoints.length})`),
    checkpoints.length ? table(columns, checkpoints, (c) => ({ class: "checkpoint-row" }))
      : el("p", { class: "muted" }, "none yet"));
}

function systemValue(name, value) {
  if (name.endsWith("_bytes")) return fmtBytes(value);
  if (name.endsWith("_bytes_per_s")) return `${fmtBytes(value)}/s`;
  if (name.endsWith("_percent")) return `${fmtNumber(value)}%`;
  return fmtNumber(value);
}

function drawSystem() {
  const names = [...new Set(systemReports.flatMap((r) => Object.keys(r.metrics)))].sort();
  const metric = names.includes(systemSelect.value) ? systemSelect.value : "cpu_util_percent";
  replace(systemSelect, names.map((n) => el("option", { value: n, selected: n === metric }, n)));
  const start = systemReports.length ? systemReports[0].stepsCompleted : 0;
  const points = systemReports.filter((r) => typeof r.metrics[metric] === "number")
    .map((r) => [(r.stepsCompleted - start) / 1000, r.metrics[metric]]);
  systemBox.dataset.metric = metric;
  drawLines(systemChart, [{ name: metric, color: rankColor(0), points }],
    { xLabel: "seconds", yLabel: metric, height: 260 });
  const last = systemReports[systemReports.length - 1];
  replace(systemLatest, last ? `latest (${fmtTime(last.reportTime)}): ` + Object.entries(
    last.metrics).map(([k, v]) => `${k} ${systemValue(k, v)}`).join(" · ") : "");
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
  main.dataset.state = shortState(trial.state);
  await renderError(trial);
  await renderSystem();
  const stamp = `${trial.totalBatchesProcessed}:${trial.latestCheckpointUuid}:${trial.state}`;
  if (stamp !== lastStamp) {
    lastStamp = stamp;
    const [{ checkpoints }] = await Promise.all([
      api(`/api/v1/trials/${trialId}/checkpoints`), curves.load([trialId]),
    ]);
    renderCheckpoints(checkpoints);
  }
  return TERMINAL.includes(shortState(trial.state));
}

async function start() {
  if (!(await startPage())) return;
  replace(systemBox, el("h2", {}, "System metrics"),
    el("div", { class: "controls" }, el("label", {}, "metric ", systemSelect)), systemChart,
    systemLatest);
  replace(main, header, errorBox, status, el("h2", {}, "Learning curves"), curveBox, systemBox,
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
