// Learning curves of one or more trials, read from GET /api/v1/trials/time-series (Determined's
// CompareTrials): training, validation or both overlaid (validation solid, training dotted:
// `validation_loss` with the training `loss`), one
// chart per chosen metric, a linear or log y axis and smoothing. The trials are ranked by the
// searcher metric: the best ones are drawn in full in distinct colours (the best thickest), the
// others downsampled, in grey, as one line, so a page of many trials stays fast and readable.

import { api, query } from "/static/api.js";
import { drawLines, rankColor } from "/static/charts.js";
import { el, replace } from "/static/dom.js";

const FULL_POINTS = 500;
const FEW_POINTS = 40;
const IN_FULL = 10;
const GROUPS = ["training", "validation", "both"];
const DASH = { validation: "solid", training: "dot" };

// TensorBoard's smoothing: an exponential moving average, debiased at the start.
export function smooth(values, weight) {
  if (!(weight > 0)) return values;
  let last = 0;
  return values.map((v, i) => {
    last = last * weight + (1 - weight) * v;
    return last / (1 - weight ** (i + 1));
  });
}

// Whether a smaller value of `metric` is better, from its name (the hover lists the best first).
export function smallerIsBetter(metric) {
  return !/acc|auc|f1|precision|recall|score|iou|bleu|rouge|reward|r2/i.test(metric);
}

// The name a series reports `metric` under: overlaid, a validation metric's training
// counterpart is the same name without `validation_` (Keras's and Determined's convention).
function seriesMetric(series, metric) {
  if (series.group !== "training") return metric;
  const has = (name) => series.data.some((p) => typeof (p.values || {})[name] === "number");
  const base = metric.replace(/^validation_/, "");
  return has(metric) || !has(base) ? metric : base;
}

export class CurvePanel {
  // `preferred` names the metric to show first in each group when it exists.
  constructor(container, { group = "validation", preferred = {} } = {}) {
    this.group = group;
    this.preferred = preferred;
    this.chosen = {};  // group -> [metric names]
    this.ranking = [];  // trial ids, best first
    this.series = [];  // [{trialId, group, data}]
    this.boxes = new Map();  // metric -> its chart's box
    this.groupButtons = GROUPS.map((name) => el("button", {
      type: "button", class: "toggle", "data-group": name,
      onclick: () => this.setGroup(name),
    }, name));
    this.select = el("select", { class: "metric-select", multiple: true, size: 3,
      "aria-label": "metrics", title: "ctrl-click to draw several metrics",
      onchange: () => {
        this.chosen[this.group] = [...this.select.selectedOptions].map((o) => o.value);
        this.draw();
      } });
    this.logY = el("input", { type: "checkbox", class: "log-y", onchange: () => this.draw() });
    this.smoothing = el("input", { type: "range", class: "smoothing", min: 0, max: 0.99,
      step: 0.01, value: 0, "aria-label": "smoothing", oninput: () => this.draw() });
    this.charts = el("div", { class: "curve-charts" });
    replace(container, el("div", { class: "controls" },
      el("span", { class: "toggles" }, this.groupButtons),
      el("label", {}, "metrics ", this.select),
      el("label", {}, this.logY, " log y"),
      el("label", {}, "smoothing ", this.smoothing)), this.charts);
    this.container = container;
  }

  setGroup(name) {
    this.group = name;
    return this.load(this.ranking);
  }

  // `ranking`: the trials to draw, best first.
  async load(ranking) {
    this.ranking = [...ranking];
    for (const button of this.groupButtons) {
      button.classList.toggle("active", button.dataset.group === this.group);
    }
    this.container.dataset.group = this.group;
    const groups = this.group === "both" ? ["validation", "training"] : [this.group];
    const parts = [[this.ranking.slice(0, IN_FULL), FULL_POINTS],
      [this.ranking.slice(IN_FULL), FEW_POINTS]].filter(([ids]) => ids.length);
    const answers = await Promise.all(groups.flatMap((group) => parts.map(([ids, points]) =>
      api(`/api/v1/trials/time-series${query({ trialIds: ids, group, maxDatapoints: points })}`)
        .then((data) => data.trials.map(({ trial, metrics }) => ({
          trialId: trial.id, group,
          data: (metrics.find((m) => m.group === group) || { data: [] }).data,
        }))))));
    this.series = answers.flat();
    this.draw();
  }

  metricNames() {
    const names = new Set();
    for (const s of this.series) {
      for (const point of s.data) {
        for (const [name, value] of Object.entries(point.values || {})) {
          if (typeof value === "number") names.add(name);
        }
      }
    }
    return [...names].sort();
  }

  chosenMetrics(names) {
    const wanted = (this.chosen[this.group] || []).filter((n) => names.includes(n));
    if (wanted.length) return wanted;
    const preferred = this.preferred[this.group === "both" ? "validation" : this.group];
    if (names.includes(preferred)) return [preferred];
    const fallback = names.find((n) => n.includes("loss")) || names[0];
    return fallback ? [fallback] : [];
  }

  // Overlaid, a trial's (or the others') two lines share one legend entry: the validation one.
  showsLegend(metricGroup) {
    return this.group !== "both" || metricGroup === "validation";
  }

  // The trials past the best IN_FULL as one grey line per group (gaps between trials): one
  // trace draws and hovers fast however many trials it holds.
  others(lines) {
    const merged = new Map();
    for (const line of lines.filter((l) => l.rank < 0 || l.rank >= IN_FULL)) {
      const group = line.metricGroup;
      if (!merged.has(group)) {
        merged.set(group, { name: `other trials${this.group === "both" ? ` ${group}` : ""}`,
          group: "other trials", color: rankColor(IN_FULL), width: 1, dash: DASH[group],
          showlegend: this.showsLegend(group), points: [], labels: [], count: 0 });
      }
      const into = merged.get(group);
      if (!line.points.length) continue;
      if (into.points.length) {
        into.points.push([null, null]);
        into.labels.push("");
      }
      into.points.push(...line.points);
      into.labels.push(...line.points.map(() => line.name));
      into.count += 1;
    }
    return [...merged.values()];
  }

  draw() {
    const names = this.metricNames();
    const metrics = this.chosenMetrics(names);
    replace(this.select, names.map((n) => el("option", { value: n,
      selected: metrics.includes(n) }, n)));
    this.container.dataset.metric = metrics.join(",");
    const weight = Number(this.smoothing.value);
    // A metric's chart box is kept across redraws, so a live update keeps the user's zoom.
    for (const [metric, box] of this.boxes) {
      if (!metrics.includes(metric)) {
        window.Plotly?.purge(box);
        this.boxes.delete(metric);
      }
    }
    const boxes = metrics.map((metric) => {
      if (!this.boxes.has(metric)) {
        this.boxes.set(metric, el("div", { class: "chart-box line-chart", "data-metric": metric }));
      }
      const box = this.boxes.get(metric);
      const lines = this.series.map((s) => {
        const rank = this.ranking.indexOf(s.trialId);
        const name = seriesMetric(s, metric);
        const points = s.data.filter((p) => typeof (p.values || {})[name] === "number");
        const ys = smooth(points.map((p) => p.values[name]), weight);
        return {
          name: `trial ${s.trialId}${this.group === "both" ? ` ${s.group}` : ""}`,
          group: `trial ${s.trialId}`, metricGroup: s.group,
          showlegend: this.showsLegend(s.group),
          color: rankColor(rank), width: rank === 0 ? 3 : 1.5, dash: DASH[s.group], rank,
          points: points.map((p, i) => [p.batches, ys[i]]),
        };
      });
      const best = lines.filter((l) => l.rank >= 0 && l.rank < IN_FULL)
        .sort((a, b) => b.rank - a.rank);  // the best drawn last, on top
      return { box, lines: [...this.others(lines), ...best], metric };
    });
    replace(this.charts, boxes.length ? boxes.map(({ box }) => box)
      : el("p", { class: "empty muted" }, "no data yet"));
    for (const { box, lines, metric } of boxes) {
      drawLines(box, lines, { yLabel: metric, logY: this.logY.checked,
        smallerIsBetter: smallerIsBetter(metric) });
    }
  }
}
