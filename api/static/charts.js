// The dashboard's charts, drawn by plotly.js (window.Plotly, loaded by the page from the plotly
// package the master has installed): learning curves, a hyperparameter against the searcher
// metric, parallel coordinates and hyperparameter importance. Plotly gives hover values, zoom
// (drag; double-click resets), log axes and a legend that hides (click) or isolates
// (double-click) a trial. Each chart's box carries data-points and data-series (what it drew),
// which the browser tests read.

// Distinct colours for the best trials; the others are grey, so ten colours are never reused.
const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
  "#17becf", "#bcbd22", "#393b79"];
const GREY = "#c4c4c4";
const CONFIG = { displaylogo: false, responsive: true,
  modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d", "sendChartToCloud"] };
const MARGIN = { l: 64, r: 16, t: 16, b: 44 };

// The colour of the trial ranked `rank` (0 the best) by the searcher metric.
export function rankColor(rank) {
  return rank >= 0 && rank < PALETTE.length ? PALETTE[rank] : GREY;
}

function plotly() {
  if (!window.Plotly) throw new Error("plotly.js did not load");
  return window.Plotly;
}

function axis(title, extra = {}) {
  return { title: { text: title }, automargin: true, zeroline: false, ...extra };
}

function mark(box, points, series) {
  box.dataset.points = String(points);
  box.dataset.series = String(series);
  // When the page first showed data here (ms since navigation): what the load-time test reads.
  if (points && !box.dataset.firstDrawn) box.dataset.firstDrawn = String(Math.round(performance.now()));
}

function empty(box, text) {
  if (box.classList.contains("js-plotly-plot")) plotly().purge(box);
  box.replaceChildren(Object.assign(document.createElement("p"), { className: "empty muted",
    textContent: text }));
  mark(box, 0, 0);
}

// lines: [{name, group, color, width, dash, showlegend, points: [[x, y], ...], labels?, count?}]:
// a line with `labels` names each point in its hover (a line of several trials, `count` of
// them, separated by [null, null]). Hovering shows every drawn line's value at that step.
// `xAxis` adds to plotly's x axis (a time axis: {type: "date", range}).
export function drawLines(box, lines, { xLabel = "batches", yLabel = "", logY = false,
  height = 320, xAxis = {} } = {}) {
  const drawn = lines.filter((l) => l.points.length);
  if (!drawn.length) {
    empty(box, "no data yet");
    return;
  }
  const traces = drawn.map((l) => ({
    type: "scatter", mode: l.points.length === 1 ? "markers" : "lines", name: l.name,
    legendgroup: l.group ?? l.name, showlegend: l.showlegend ?? true,
    x: l.points.map((p) => p[0]), y: l.points.map((p) => p[1]),
    line: { color: l.color, width: l.width ?? 1.5, dash: l.dash ?? "solid" },
    marker: { color: l.color, size: 6 },
    text: l.labels, hovertemplate: `${l.labels ? "%{text}" : l.name}: %{y:.4g}<extra></extra>`,
  }));
  plotly().react(box, traces, {
    // Hover shows each line's point nearest the mouse's step however far apart reports are.
    height, margin: MARGIN, hovermode: "x unified", hoverdistance: -1, showlegend: true,
    legend: { orientation: "v", font: { size: 11 } },
    xaxis: axis(xLabel, xAxis), yaxis: axis(yLabel, { type: logY ? "log" : "linear" }),
    uirevision: `${yLabel}:${logY}`,  // keeps the user's zoom across live updates
  }, CONFIG);
  mark(box, drawn.reduce((n, l) => n + l.points.length - (l.count ?? 1) + 1, 0),
    drawn.reduce((n, l) => n + (l.count ?? 1), 0));
}

// points: [{x, y, text, color}]; `kind` is the hyperparameter's type (log: a log x axis;
// categorical: one column per value).
export function drawScatter(box, points, { xLabel = "", yLabel = "", kind = "double" } = {}) {
  if (!points.length) {
    empty(box, "no trial has a searcher metric yet");
    return;
  }
  plotly().react(box, [{
    type: "scatter", mode: "markers", x: points.map((p) => p.x), y: points.map((p) => p.y),
    text: points.map((p) => p.text), hovertemplate: "%{text}<extra></extra>",
    marker: { size: 9, color: points.map((p) => p.color), line: { width: 1, color: "#fff" } },
  }], {
    height: 320, margin: MARGIN, hovermode: "closest",
    xaxis: axis(xLabel, { type: kind === "log" ? "log" : kind === "categorical" ? "category"
      : "linear" }),
    yaxis: axis(yLabel),
  }, CONFIG);
  mark(box, points.length, 1);
  box.dataset.xaxis = kind === "log" ? "log" : kind === "categorical" ? "category" : "linear";
}

// One line per trial across an axis per hyperparameter (each on its own scale: log10 for a log
// hyperparameter, ticks named for a categorical one) and a last axis for the searcher metric,
// which also colours the lines. dimensions: [{label, kind, values}] (values per trial, in order).
export function drawParallel(box, dimensions, metric, { smallerIsBetter = true } = {}) {
  const count = metric.values.length;
  if (count < 2) {
    empty(box, "parallel coordinates need two trials with a searcher metric");
    return;
  }
  const dims = dimensions.map(({ label, kind, values }) => {
    if (kind === "categorical") {
      const names = [...new Set(values.map(String))].sort();
      return { label, values: values.map((v) => names.indexOf(String(v))),
        tickvals: names.map((_, i) => i), ticktext: names };
    }
    if (kind === "log") {
      const logs = values.map((v) => Math.log10(v));
      const lo = Math.floor(Math.min(...logs));
      const hi = Math.ceil(Math.max(...logs));
      const tickvals = [];
      for (let e = lo; e <= hi; e += 1) tickvals.push(e);
      return { label: `${label} (log)`, values: logs, tickvals,
        ticktext: tickvals.map((e) => `1e${e}`) };
    }
    return { label, values };
  });
  dims.push({ label: metric.label, values: metric.values });
  plotly().react(box, [{
    type: "parcoords", dimensions: dims,
    line: { color: metric.values, colorscale: "Viridis", reversescale: smallerIsBetter,
      showscale: true, colorbar: { title: { text: metric.label } } },
  }], { height: 360, margin: { l: 48, r: 48, t: 48, b: 24 } }, CONFIG);
  mark(box, count, dims.length);
}

// importance: {name: share}, largest first.
export function drawImportance(box, importance, { metric = "" } = {}) {
  const names = Object.keys(importance);
  if (!names.length) {
    empty(box, "importance needs trials that differ in their hyperparameters");
    return;
  }
  plotly().react(box, [{
    type: "bar", orientation: "h", y: names.slice().reverse(),
    x: names.map((n) => importance[n]).reverse(), marker: { color: PALETTE[0] },
    hovertemplate: "%{y}: %{x:.3f}<extra></extra>",
  }], {
    height: 60 + 28 * names.length, margin: { ...MARGIN, l: 140 },
    xaxis: axis(`importance for ${metric}`, { range: [0, 1] }), yaxis: axis(""),
  }, CONFIG);
  mark(box, names.length, 1);
}
