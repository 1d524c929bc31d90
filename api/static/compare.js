// Experiments side by side (/compare?experiments=1,2,...): their trials' validation curves
// overlaid, one colour per experiment, for a metric they all report; one table of all their
// trials, sortable, showing by default only the hyperparameters whose values differ, with each
// experiment's best trial highlighted (what Determined's and MLflow's compare views bury among
// every column).

import { AddressState } from "/static/address.js";
import { api, query, startPage } from "/static/api.js";
import { drawLines, rankColor } from "/static/charts.js";
import { smallerIsBetter } from "/static/curves.js";
import { el, flatHparams, fmtNumber, message, replace, sortButton, stateBadge, table }
  from "/static/dom.js";

const MAX_EXPERIMENTS = 10;
const TRIALS_EACH = 100;  // each experiment's best ones: a readable chart, a bounded page
const main = document.getElementById("main");
const view = new AddressState({ experiments: [], metric: "", sort: "best", desc: false,
  allHparams: false });
const chartBox = el("div", { id: "compare-curves", class: "line-chart" });
const tableBox = el("div", { id: "compare-trials" });
const differBox = el("p", { id: "compare-differ" });
const metricSelect = el("select", { id: "compare-metric", "aria-label": "metric" });
const allBox = el("input", { id: "compare-all-hparams", type: "checkbox",
  checked: view.get("allHparams"), onchange: () => { view.set({ allHparams: allBox.checked });
    renderTable(); } });
let loaded = [];  // [{experiment, trials, series: {trialId: points}}]

const key = (value) => JSON.stringify(value ?? null);

// Hyperparameter names across every trial, and those whose values are not all the same.
function hparamNames() {
  const values = new Map();
  for (const { trials } of loaded) {
    for (const t of trials) {
      for (const [name, value] of Object.entries(flatHparams(t.hparams))) {
        if (!values.has(name)) values.set(name, new Set());
        values.get(name).add(key(value));
      }
    }
  }
  const all = [...values.keys()].sort();
  // A name some trials lack differs too.
  const differ = all.filter((name) => values.get(name).size > 1 || loaded.some(
    (l) => l.trials.some((t) => !(name in flatHparams(t.hparams)))));
  return { all, differ };
}

function renderTable() {
  const { all, differ } = hparamNames();
  replace(differBox, ...(differ.length ? ["Differ: ", ...differ.flatMap((n, i) => [i ? ", " : "",
    el("code", { class: "differs" }, n)])] : ["No hyperparameter differs."]));
  const rows = loaded.flatMap(({ experiment, trials }, index) => trials.map((t) => ({
    experiment, index, trial: t, hp: flatHparams(t.hparams), best: t.searcherMetricValue,
    isBest: t.id === experiment.bestTrialId })));
  const sorts = {
    experiment: (r) => r.experiment.id, trial: (r) => r.trial.id, best: (r) => r.best,
    ...Object.fromEntries(all.map((n) => [`hp.${n}`, (r) => r.hp[n]])),
  };
  const by = sorts[view.get("sort")] || sorts.best;
  const sign = view.get("desc") ? -1 : 1;
  rows.sort((a, b) => {
    const [x, y] = [by(a), by(b)];
    if (x === y) return a.trial.id - b.trial.id;
    if (x === null || x === undefined) return 1;
    if (y === null || y === undefined) return -1;
    return (x < y ? -1 : 1) * sign;
  });
  const header = (label, sort) => {
    const active = view.get("sort") === sort;
    return sortButton(label, { key: sort, active, desc: view.get("desc"), onSort: () => {
      view.set({ sort, desc: active ? !view.get("desc") : false });
      renderTable();
    } });
  };
  const shownHparams = view.get("allHparams") ? all : differ;
  const columns = [
    { label: header("Experiment", "experiment"), cell: (r) => [
      el("span", { class: "swatch", style: `background:${rankColor(r.index)}` }),
      el("a", { href: `/experiments/${r.experiment.id}` }, `${r.experiment.id} ${r.experiment.name}`)] },
    { label: header("Trial", "trial"), cell: (r) => [el("a", { href: `/trials/${r.trial.id}` },
      r.trial.id), " ", stateBadge(r.trial.state),
    r.isBest ? el("span", { class: "badge best-badge" }, "best") : ""] },
    ...shownHparams.map((n) => ({ label: header(n, `hp.${n}`),
      class: differ.includes(n) ? "differs" : "", cell: (r) => (r.hp[n] === undefined ? ""
        : typeof r.hp[n] === "number" ? fmtNumber(r.hp[n]) : String(r.hp[n])) })),
    { label: header("Best value", "best"), class: "num", cell: (r) => fmtNumber(r.best) },
  ];
  replace(tableBox, table(columns, rows, (r) => ({
    class: `compare-row${r.isBest ? " best-trial" : ""}`, "data-trial": r.trial.id,
    "data-experiment": r.experiment.id })));
}

function drawCurves() {
  const metric = view.get("metric");
  const lines = loaded.flatMap(({ experiment, trials, series }, index) => trials.map((t, i) => ({
    name: `${experiment.id} ${experiment.name}`, group: String(experiment.id),
    showlegend: i === 0, color: rankColor(index), width: t.id === experiment.bestTrialId ? 3 : 1.5,
    points: (series[t.id] || []).filter((p) => typeof p.values?.[metric] === "number")
      .map((p) => [p.batches, p.values[metric]]),
  })));
  drawLines(chartBox, lines, { yLabel: metric, smallerIsBetter: smallerIsBetter(metric) });
  chartBox.dataset.metric = metric;
  chartBox.dataset.experiments = String(loaded.length);
}

async function load(ids) {
  loaded = await Promise.all(ids.map(async (id) => {
    const { experiment } = await api(`/api/v1/experiments/${id}`);
    const { trials } = await api(`/api/v1/experiments/${id}/trials${query({
      limit: TRIALS_EACH, sortBy: "SORT_BY_BEST_VALIDATION_METRIC",
      orderBy: experiment.smallerIsBetter ? "ORDER_BY_ASC" : "ORDER_BY_DESC" })}`);
    const series = {};
    if (trials.length) {
      const data = await api(`/api/v1/trials/time-series${query({
        trialIds: trials.map((t) => t.id), group: "validation" })}`);
      for (const { trial, metrics } of data.trials) {
        series[trial.id] = (metrics.find((m) => m.group === "validation") || { data: [] }).data;
      }
    }
    return { experiment, trials, series };
  }));
}

// The validation metrics every experiment reports; the first's searcher metric first.
function sharedMetrics() {
  const sets = loaded.map(({ series }) => new Set(Object.values(series).flatMap(
    (points) => points.flatMap((p) => Object.keys(p.values || {})))));
  const shared = sets.length ? [...sets[0]].filter((m) => sets.every((s) => s.has(m))).sort() : [];
  const first = loaded[0]?.experiment.searcherMetric;
  return shared.includes(first) ? [first, ...shared.filter((m) => m !== first)] : shared;
}

startPage().then(async (user) => {
  if (!user) return;
  const ids = [...new Set(view.get("experiments").map(Number))];
  replace(main, el("h1", {}, "Compare experiments"));
  if (ids.length < 2 || ids.length > MAX_EXPERIMENTS || ids.some((id) => !Number.isInteger(id)
    || id <= 0)) {
    main.append(message(`Choose 2 to ${MAX_EXPERIMENTS} experiments in the list, then Compare`
      + " (experiments=ID,ID,... in the address).", "error"));
    return;
  }
  try {
    await load(ids);
  } catch (error) {
    main.append(message(error.message, "error"));
    return;
  }
  const metrics = sharedMetrics();
  if (!metrics.includes(view.get("metric"))) view.set({ metric: metrics[0] || "" });
  replace(metricSelect, metrics.map((m) => el("option", { value: m,
    selected: m === view.get("metric") }, m)));
  metricSelect.addEventListener("change", () => { view.set({ metric: metricSelect.value });
    drawCurves(); });
  main.append(
    el("p", { id: "compare-experiments", class: "muted" }, loaded.flatMap(({ experiment }, i) => [
      i ? " · " : "",
      el("span", { class: "swatch", style: `background:${rankColor(i)}` }),
      el("a", { href: `/experiments/${experiment.id}` }, `${experiment.id} ${experiment.name}`)])),
    el("div", { class: "filters" }, el("label", {}, "metric ", metricSelect)),
    metrics.length ? chartBox : message("These experiments share no validation metric."),
    el("h2", {}, "Trials"), differBox,
    el("div", { class: "filters" }, el("label", {}, allBox, " all hyperparameters")), tableBox);
  if (metrics.length) drawCurves();
  renderTable();
});
