// One trial: what it is, its learning curves, its checkpoints and its logs as they arrive
// (GET /api/v1/trials/{id}/logs/stream; without the stream, the lines so far).

import { api, every, follow, lastErrorLines, startPage, token } from "/static/api.js";
import { drawLines, rankColor } from "/static/charts.js";
import { CurvePanel } from "/static/curves.js";
import { el, fmtBytes, fmtNumber, fmtTime, replace, shortState, stateBadge, table }
  from "/static/dom.js";

const TERMINAL = document.body.dataset.terminalStates.split(",");  // common/states.py
const MAX_LOG_LINES = 5000;

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
const logBox = el("pre", { id: "logs", class: "logs", "data-lines": "0" });
const followBox = el("input", { type: "checkbox", id: "follow-logs", checked: true });
// Lines are kept (up to MAX_LOG_LINES) so the search and the level filter can show them again.
const logLines = [];
const logSearch = el("input", { type: "search", id: "log-search", placeholder: "search the logs",
  "aria-label": "search the logs", oninput: () => filterLogs() });
const LEVELS = ["LOG_LEVEL_DEBUG", "LOG_LEVEL_INFO", "LOG_LEVEL_WARNING", "LOG_LEVEL_ERROR",
  "LOG_LEVEL_CRITICAL"];
const logLevel = el("select", { id: "log-level", "aria-label": "lowest level shown",
  onchange: () => filterLogs() },
el("option", { value: "LOG_LEVEL_DEBUG" }, "all levels"),
el("option", { value: "LOG_LEVEL_WARNING" }, "warnings and errors"),
el("option", { value: "LOG_LEVEL_ERROR" }, "errors"));
// Lines of a run on several processes carry their rank (`[rank=1] `, as Determined's launchers
// and torch's print them): the filter offers each rank seen.
const RANK = /^\[rank=?(\d+)\]:? /;
const logRank = el("select", { id: "log-rank", "aria-label": "rank shown", hidden: true,
  onchange: () => filterLogs() }, el("option", { value: "" }, "all ranks"));
const ranksSeen = new Set();
// The training code's own timestamp at the start of a line (Python logging, ISO 8601): the
// line's time is shown once, from the agent.
const OWN_TIMESTAMP = /^\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?[ ]*/;
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
      exp ? ` · best ${exp.searcherMetric} ${fmtNumber(trial.searcherMetricValue)}` : ""),
    el("p", { class: "hparams" }, hparams));
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

function shownLog(line) {
  const query = logSearch.value.trim().toLowerCase();
  return LEVELS.indexOf(line.level) >= LEVELS.indexOf(logLevel.value)
    && (!logRank.value || line.rank === logRank.value)
    && (!query || line.text.toLowerCase().includes(query));
}

function filterLogs() {
  for (const line of logLines) line.node.hidden = !shownLog(line);
}

function addLog(log) {
  const stick = followBox.checked;
  const text = log.log.replace(OWN_TIMESTAMP, "").replace(/\n$/, "");
  const level = LEVELS.includes(log.level) ? log.level : "LOG_LEVEL_INFO";
  const time = new Date(log.timestamp).toLocaleTimeString(undefined, { hour12: false });
  const node = el("span", { class: "log-line", "data-level": level.replace("LOG_LEVEL_", "") },
    el("span", { class: "log-time", title: log.timestamp }, `${time} `),
    el("span", { class: `level-${level.replace("LOG_LEVEL_", "").toLowerCase()}` }, `${text}\n`));
  const rank = (RANK.exec(text) || [])[1] || "";
  if (rank && !ranksSeen.has(rank)) {
    ranksSeen.add(rank);
    logRank.hidden = false;
    const options = [...ranksSeen].sort((a, b) => a - b)
      .map((r) => el("option", { value: r, selected: r === logRank.value }, `rank ${r}`));
    replace(logRank, el("option", { value: "" }, "all ranks"), options);
  }
  const line = { node, level, text, rank, timestamp: log.timestamp };
  node.hidden = !shownLog(line);
  logLines.push(line);
  logBox.append(node);
  while (logLines.length > MAX_LOG_LINES) logLines.shift().node.remove();
  logBox.dataset.lines = String(Number(logBox.dataset.lines) + 1);
  if (stick) logBox.scrollTop = logBox.scrollHeight;
}

function downloadLogs() {
  const text = logLines.map((l) => `${l.timestamp} ${l.level.replace("LOG_LEVEL_", "")} ${l.text}\n`)
    .join("");
  const link = el("a", { href: URL.createObjectURL(new Blob([text], { type: "text/plain" })),
    download: `trial-${trialId}.log` });
  link.click();
  URL.revokeObjectURL(link.href);
}

// A trial in ERROR says why at the top: its last error lines (else its last lines).
async function renderError(trial) {
  if (shortState(trial.state) !== "ERROR" || errorBox.dataset.trial) return;
  errorBox.dataset.trial = String(trial.id);
  const shown = await lastErrorLines(trialId);
  replace(errorBox, el("div", { class: "error-summary" },
    el("strong", {}, `Trial ${trial.id} ended in ERROR`),
    trial.earlyExitReason ? ` (${trial.earlyExitReason})` : "", ". Its last error lines:",
    el("pre", {}, shown.join("\n") || "(no log lines)")));
}

// Without the stream: the lines so far, read once as NDJSON.
async function readLogsOnce() {
  const response = await fetch(`/api/v1/trials/${trialId}/logs`,
    { headers: { Authorization: `Bearer ${token()}` } });
  const text = await response.text();
  replace(logBox);
  logLines.length = 0;
  logBox.dataset.lines = "0";
  for (const line of text.split("\n")) if (line.trim()) addLog(JSON.parse(line).result);
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
    el("section", { class: "panel" }, el("h2", {}, "Logs"),
      el("div", { class: "log-controls" }, logSearch, logLevel, logRank,
        el("label", { class: "follow" }, followBox, " follow"),
        el("button", { type: "button", id: "log-download", onclick: downloadLogs }, "download")),
      logBox));
  const holder = { exp: null };
  let stop = null;
  stop = every(2, async () => {
    if ((await refresh(holder)) && stop) stop();
  }, status);
  follow(`/api/v1/trials/${trialId}/logs/stream`, { log: addLog }, () => readLogsOnce());
}

start().catch((error) => replace(main, el("p", { class: "error" }, String(error.message))));
