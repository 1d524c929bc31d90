// Two small SVG charts: lines (learning curves, one per trial) and a scatter (a hyperparameter
// against the searcher metric). Each SVG carries data-points (how many points it drew) and
// data-series, which the browser tests read.

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 760;
const HEIGHT = 300;
const PAD = { left: 64, right: 16, top: 12, bottom: 40 };
const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
  "#7f7f7f", "#bcbd22", "#17becf"];

export function color(index) {
  return COLORS[index % COLORS.length];
}

function svgEl(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

// About `count` round tick values covering [lo, hi].
function ticks(lo, hi, count = 5) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(v);
  return out;
}

function label(value) {
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e5)) return value.toExponential(1);
  return String(Number(value.toPrecision(6)));
}

// [lo, hi] of the values, widened by `pad` (a fraction of the span) so no mark sits on the border.
function extent(values, pad = 0) {
  let lo = Math.min(...values);
  let hi = Math.max(...values);
  if (!Number.isFinite(lo)) return [0, 1];
  if (lo === hi) {
    const half = Math.abs(lo) * 0.1 || 1;
    return [lo - half, hi + half];
  }
  const margin = (hi - lo) * pad;
  return [lo - margin, hi + margin];
}

// Axes, grid and labels for the plot area; returns the scales.
function frame(svg, xs, ys, xLabel, yLabel, { xCategories = null, xPad = 0, yPad = 0.05 } = {}) {
  const [x0, x1] = extent(xs, xPad);
  const [y0, y1] = extent(ys, yPad);
  const w = WIDTH - PAD.left - PAD.right;
  const h = HEIGHT - PAD.top - PAD.bottom;
  const sx = (x) => PAD.left + ((x - x0) / (x1 - x0)) * w;
  const sy = (y) => PAD.top + h - ((y - y0) / (y1 - y0)) * h;
  const grid = svgEl("g", { class: "grid" });
  for (const t of ticks(y0, y1)) {
    grid.append(svgEl("line", { x1: PAD.left, x2: PAD.left + w, y1: sy(t), y2: sy(t) }));
    grid.append(svgEl("text", { x: PAD.left - 6, y: sy(t) + 4, "text-anchor": "end" }, label(t)));
  }
  const xTicks = xCategories ? xCategories.map((_, i) => i) : ticks(x0, x1);
  for (const t of xTicks) {
    grid.append(svgEl("line", { x1: sx(t), x2: sx(t), y1: PAD.top, y2: PAD.top + h }));
    const text = xCategories ? xCategories[t] : label(t);
    grid.append(svgEl("text", { x: sx(t), y: PAD.top + h + 16, "text-anchor": "middle" }, text));
  }
  svg.append(grid);
  svg.append(svgEl("rect", { class: "plot-border", x: PAD.left, y: PAD.top, width: w, height: h }));
  svg.append(svgEl("text", { class: "axis-label", x: PAD.left + w / 2, y: HEIGHT - 4,
    "text-anchor": "middle" }, xLabel));
  svg.append(svgEl("text", { class: "axis-label", x: 12, y: PAD.top + h / 2,
    transform: `rotate(-90 12 ${PAD.top + h / 2})`, "text-anchor": "middle" }, yLabel));
  return { sx, sy };
}

function emptyChart(svg, text) {
  svg.append(svgEl("text", { x: WIDTH / 2, y: HEIGHT / 2, "text-anchor": "middle",
    class: "empty" }, text));
  svg.dataset.points = "0";
  svg.dataset.series = "0";
  return svg;
}

function newSvg(className) {
  return svgEl("svg", { class: `chart ${className}`, viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    preserveAspectRatio: "xMidYMid meet", role: "img" });
}

// series: [{name, color, points: [[x, y], ...]}]
export function lineChart(series, { xLabel = "batches", yLabel = "" } = {}) {
  const svg = newSvg("line-chart");
  const drawn = series.filter((s) => s.points.length > 0);
  if (!drawn.length) return emptyChart(svg, "no data yet");
  const all = drawn.flatMap((s) => s.points);
  const { sx, sy } = frame(svg, all.map((p) => p[0]), all.map((p) => p[1]), xLabel, yLabel);
  for (const s of drawn) {
    const d = s.points.map((p, i) => `${i ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`);
    const path = svgEl("path", { class: "series", d: d.join(""), stroke: s.color, fill: "none",
      "data-points": s.points.length });
    path.append(svgEl("title", {}, s.name));
    svg.append(path);
    if (s.points.length === 1) {
      const [x, y] = s.points[0];
      svg.append(svgEl("circle", { cx: sx(x), cy: sy(y), r: 3, fill: s.color }));
    }
  }
  svg.dataset.points = String(all.length);
  svg.dataset.series = String(drawn.length);
  return svg;
}

// points: [{x, y, label, color}]; x may be a category (string) when `categories` is given.
export function scatterChart(points, { xLabel = "", yLabel = "", categories = null } = {}) {
  const svg = newSvg("scatter-chart");
  if (!points.length) return emptyChart(svg, "no trial has a searcher metric yet");
  const xs = points.map((p) => (categories ? categories.indexOf(String(p.x)) : p.x));
  const { sx, sy } = frame(svg, categories ? [-0.5, categories.length - 0.5] : xs,
    points.map((p) => p.y), xLabel, yLabel,
    { xCategories: categories, xPad: categories ? 0 : 0.08, yPad: 0.08 });
  points.forEach((p, i) => {
    const dot = svgEl("circle", { class: "point", cx: sx(xs[i]), cy: sy(p.y), r: 5,
      fill: p.color || color(0) });
    dot.append(svgEl("title", {}, p.label));
    svg.append(dot);
  });
  svg.dataset.points = String(points.length);
  svg.dataset.series = "1";
  return svg;
}
