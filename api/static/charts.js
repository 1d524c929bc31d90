// The dashboard's charts, drawn by plotly.js (window.Plotly, loaded by the page from the plotly
// package the master has installed): learning curves, a hyperparameter against the searcher
// metric, parallel coordinates and hyperparameter importance. Plotly gives hover values, zoom
// (drag; double-click resets), log axes and a legend that hides (click) or isolates
// (double-click) a trial. Each chart's box carries data-points and data-series (what it drew),
// which the browser tests read.

import { el, replace } from "/static/dom.js";

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

// The most trials a curve's hover lists (the best first, then "+k more"); fewer where the chart
// is too short for them.
const HOVER_ROWS = 10;
const HOVER_ROW_PX = 15;

// Each trial's run of points in `lines` (a line of several trials is split at its gaps), with
// its reporting interval (the median step between its points; a single point takes the
// chart's): what the hover reads.
function trialRuns(lines, toLinear) {
  const runs = [];
  lines.forEach((line, trace) => {
    let run = null;
    line.points.forEach(([x, y], i) => {
      if (x === null || y === null) {
        run = null;
        return;
      }
      if (!run) {
        run = { label: line.labels ? line.labels[i] : line.name, color: line.color, trace,
          xs: [], ys: [] };
        runs.push(run);
      }
      run.xs.push(toLinear(x));
      run.ys.push(y);
    });
  });
  for (const run of runs) run.interval = medianInterval(run.xs);
  const typical = median(runs.map((r) => r.interval).filter((i) => i !== null)) ?? 0;
  for (const run of runs) run.interval ??= typical;
  return runs;
}

const median = (values) => values.sort((a, b) => a - b)[Math.floor(values.length / 2)];

// The median step between a run's points; null for a single point.
function medianInterval(xs) {
  return xs.length > 1 ? median(xs.slice(1).map((x, i) => x - xs[i])) : null;
}

function nearest(xs, x) {
  let lo = 0;
  let hi = xs.length - 1;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (xs[mid] <= x) lo = mid;
    else hi = mid;
  }
  return Math.abs(xs[hi] - x) < Math.abs(xs[lo] - x) ? hi : lo;
}

// The trials that have a point at step `x` or within one reporting interval of it (a trial that
// stopped earlier has none), each with its nearest value, the best first.
export function valuesAt(runs, x, { smallerIsBetter = true, shown = () => true } = {}) {
  const rows = [];
  for (const run of runs) {
    if (!shown(run.trace)) continue;
    const i = nearest(run.xs, x);
    if (Math.abs(run.xs[i] - x) <= run.interval) {
      rows.push({ label: run.label, color: run.color, x: run.xs[i], y: run.ys[i] });
    }
  }
  return rows.sort((a, b) => (smallerIsBetter ? a.y - b.y : b.y - a.y));
}

function format(value) {
  return String(Number(value.toPrecision(4)));
}

// The hover box, inside the plot area: the step under the mouse, then the trials that reached
// it (as valuesAt), as many as fit, then "+k more".
function showHover(box, event) {
  const layout = box._fullLayout;
  const state = box._curveHover;
  const hover = box.querySelector(":scope > .curve-hover") || box.appendChild(
    el("div", { class: "curve-hover", role: "tooltip" }));
  const guide = box.querySelector(":scope > .curve-guide") || box.appendChild(
    el("div", { class: "curve-guide" }));
  const size = layout?._size;
  const rect = box.getBoundingClientRect();
  let px = event.clientX - rect.left - (size?.l ?? 0);
  const py = event.clientY - rect.top - (size?.t ?? 0);
  // A pixel's slack at the plot's edges, where the first and last steps are drawn.
  if (!state || !size || event.buttons || px < -2 || px > size.w + 2 || py < 0 || py > size.h) {
    hover.hidden = true;
    guide.hidden = true;
    return;
  }
  px = Math.min(Math.max(px, 0), size.w);
  const x = layout.xaxis.p2l(px);
  const rows = valuesAt(state.runs, x, { smallerIsBetter: state.smallerIsBetter,
    shown: (trace) => box._fullData?.[trace]?.visible === true });
  const fit = Math.max(1, Math.min(HOVER_ROWS,
    Math.floor((size.h - 12) / HOVER_ROW_PX) - 2));
  const listed = rows.length > fit ? rows.slice(0, fit - 1) : rows;
  const step = rows.length ? rows.reduce((a, r) => (Math.abs(r.x - x) < Math.abs(a - x) ? r.x : a),
    rows[0].x) : Math.round(x);
  // A time axis's numbers are its dates' clock time read as UTC (plotly's linear dates).
  const stepText = state.dates ? new Date(step).toISOString().slice(11, 19) : format(step);
  replace(hover, el("div", { class: "curve-hover-step" }, `${state.xLabel} ${stepText}`),
    listed.map((r) => el("div", { class: "curve-hover-row", "data-label": r.label },
      el("span", { class: "swatch", style: `background:${r.color}` }),
      `${r.label}: ${format(r.y)}`)),
    rows.length > listed.length
      ? el("div", { class: "curve-hover-more" }, `+${rows.length - listed.length} more`) : null,
    rows.length ? null : el("div", { class: "muted" }, "no trial reached this step"));
  hover.dataset.trials = String(rows.length);
  hover.dataset.step = String(step);
  hover.hidden = false;
  guide.hidden = false;
  guide.style.cssText = `left:${size.l + px}px;top:${size.t}px;height:${size.h}px`;
  hover.style.maxHeight = `${size.h}px`;
  hover.style.top = `${size.t}px`;
  // Right of the mouse, or left of it where the box would leave the plot.
  const right = size.l + px + 12;
  hover.style.left = right + hover.offsetWidth <= size.l + size.w ? `${right}px`
    : `${Math.max(size.l, size.l + px - 12 - hover.offsetWidth)}px`;
}

// lines: [{name, group, color, width, dash, showlegend, points: [[x, y], ...], labels?, count?}]:
// a line with `labels` names each point in its hover (a line of several trials, `count` of
// them, separated by [null, null]). Hovering lists the trials that reached the step under the
// mouse (within one of their reporting intervals), their values the best first (smaller, unless
// `smallerIsBetter` is false), as many as fit in the chart. `xAxis` adds to plotly's x axis (a
// time axis: {type: "date", range}).
export function drawLines(box, lines, { xLabel = "batches", yLabel = "", logY = false,
  height = 320, smallerIsBetter = true, xAxis = {} } = {}) {
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
    marker: { color: l.color, size: 6 }, hoverinfo: "none",
  }));
  plotly().react(box, traces, {
    // The hover is showHover's, not Plotly's, which lists every line at its nearest point
    // however far (a trial stopped at step 200 at step 700) and cannot cap its rows.
    height, margin: MARGIN, hovermode: false, showlegend: true,
    legend: { orientation: "v", font: { size: 11 } },
    xaxis: axis(xLabel, xAxis), yaxis: axis(yLabel, { type: logY ? "log" : "linear" }),
    uirevision: `${yLabel}:${logY}`,  // keeps the user's zoom across live updates
  }, CONFIG);
  // On a time axis the hover works in plotly's own numbers for its dates.
  const dates = box._fullLayout?.xaxis?.type === "date";
  const runs = trialRuns(drawn, dates ? box._fullLayout.xaxis.d2l : (x) => x);
  box._curveHover = { runs, smallerIsBetter, xLabel, dates };
  if (!box.dataset.hover) {
    box.dataset.hover = "custom";
    box.addEventListener("mousemove", (event) => showHover(box, event));
    box.addEventListener("mouseleave", () => {
      for (const part of box.querySelectorAll(":scope > .curve-hover, :scope > .curve-guide")) {
        part.hidden = true;
      }
    });
  }
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
// which also colours the lines. dimensions: [{label, kind, values, brush}] (values per trial, in
// order); `brush`, an axis's brushed range in its values: {lo, hi}, or {values} of a categorical
// one. Brushing (dragging along an axis) calls onBrush with each axis's range (null: none), the
// metric's last.
export function drawParallel(box, dimensions, metric, { smallerIsBetter = true,
  onBrush = () => {} } = {}) {
  const count = metric.values.length;
  if (count < 2) {
    empty(box, "parallel coordinates need two trials with a searcher metric");
    return;
  }
  const axes = [...dimensions, { ...metric, kind: "double" }].map(({ label, kind, values,
    brush }) => {
    if (kind === "categorical") {
      const names = [...new Set(values.map(String))].sort();
      const picked = (brush?.values || []).map((v) => names.indexOf(v)).filter((i) => i >= 0);
      return { dim: { label, values: values.map((v) => names.indexOf(String(v))),
        tickvals: names.map((_, i) => i), ticktext: names,
        constraintrange: picked.length ? [Math.min(...picked) - 0.25, Math.max(...picked) + 0.25]
          : undefined },
      read: ([lo, hi]) => ({ values: names.filter((_, i) => i >= lo && i <= hi) }) };
    }
    if (kind === "log") {
      const logs = values.map((v) => Math.log10(v));
      const lo = Math.floor(Math.min(...logs));
      const hi = Math.ceil(Math.max(...logs));
      const tickvals = [];
      for (let e = lo; e <= hi; e += 1) tickvals.push(e);
      return { dim: { label: `${label} (log)`, values: logs, tickvals,
        ticktext: tickvals.map((e) => `1e${e}`),
        constraintrange: brush ? [Math.log10(brush.lo), Math.log10(brush.hi)] : undefined },
      read: ([a, b]) => ({ lo: 10 ** a, hi: 10 ** b }) };
    }
    return { dim: { label, values, constraintrange: brush ? [brush.lo, brush.hi] : undefined },
      read: ([a, b]) => ({ lo: a, hi: b }) };
  });
  const dims = axes.map(({ dim }) => ({ ...dim, multiselect: false }));
  plotly().react(box, [{
    type: "parcoords", dimensions: dims,
    line: { color: metric.values, colorscale: "Viridis", reversescale: smallerIsBetter,
      showscale: true, colorbar: { title: { text: metric.label } } },
  }], { height: 360, margin: { l: 48, r: 48, t: 48, b: 24 } }, CONFIG);
  // A brush is a restyle of an axis's constraintrange; the ranges are read from the chart.
  box.removeAllListeners?.("plotly_restyle");
  box.on("plotly_restyle", () => {
    const drawn = box.data?.[0]?.dimensions || [];
    onBrush(axes.map(({ read }, i) => {
      const range = drawn[i]?.constraintrange;
      if (!range || !range.length) return null;
      return read(Array.isArray(range[0]) ? range[0] : range);
    }));
  });
  mark(box, count, dims.length);
}

// What an importance answer was computed by, from and how sure it is, for the panel's caption.
export function importanceNote({ method, trials, resamples, metric }) {
  return `${method} over ${trials} trials' ${metric}; bars show each share ± its standard `
    + `deviation over ${resamples} bootstrap resamples`;
}

// answer: GET /experiments/{id}/hyperparameter-importance's: importance {name: share}, largest
// first, and spread {name: standard deviation}, drawn as error bars.
export function drawImportance(box, { importance, spread = {}, metric = "" }) {
  const names = Object.keys(importance);
  if (!names.length) {
    empty(box, "importance needs trials that differ in their hyperparameters");
    return;
  }
  const ordered = names.slice().reverse();
  const spreads = ordered.map((n) => spread[n] ?? 0);
  plotly().react(box, [{
    type: "bar", orientation: "h", y: ordered, x: ordered.map((n) => importance[n]),
    marker: { color: PALETTE[0] }, customdata: spreads,
    error_x: { type: "data", array: spreads, visible: true, color: "#555" },
    hovertemplate: "%{y}: %{x:.3f} ± %{customdata:.3f}<extra></extra>",
  }], {
    height: 60 + 28 * names.length, margin: { ...MARGIN, l: 140 },
    xaxis: axis(`share of ${metric}'s variance`, { range: [0, 1] }), yaxis: axis(""),
  }, CONFIG);
  mark(box, names.length, 1);
}
