// Learning curves of one or more trials on one chart: a training/validation toggle, a metric
// selector and the lines, read from GET /api/v1/trials/time-series (Determined's CompareTrials).

import { api, query } from "/static/api.js";
import { color, lineChart } from "/static/charts.js";
import { el, replace } from "/static/dom.js";

const MAX_POINTS = 500;
const GROUPS = ["training", "validation"];

export class CurvePanel {
  // `preferred` names the metric to show first in each group when it exists.
  constructor(container, { group = "validation", preferred = {} } = {}) {
    this.group = group;
    this.preferred = preferred;
    this.chosen = {};
    this.trialIds = [];
    this.series = [];
    this.groupButtons = GROUPS.map((name) => el("button", {
      type: "button", class: "toggle", "data-group": name,
      onclick: () => this.setGroup(name),
    }, name));
    this.select = el("select", { class: "metric-select", "aria-label": "metric",
      onchange: () => {
        this.chosen[this.group] = this.select.value;
        this.draw();
      } });
    this.chartBox = el("div", { class: "chart-box" });
    this.legend = el("div", { class: "legend" });
    replace(container, el("div", { class: "controls" }, el("span", { class: "toggles" },
      this.groupButtons), el("label", {}, "metric ", this.select)), this.chartBox, this.legend);
    this.container = container;
  }

  setGroup(name) {
    this.group = name;
    return this.load(this.trialIds);
  }

  async load(trialIds) {
    this.trialIds = [...trialIds].sort((a, b) => a - b);
    for (const button of this.groupButtons) {
      button.classList.toggle("active", button.dataset.group === this.group);
    }
    this.container.dataset.group = this.group;
    if (!this.trialIds.length) {
      this.series = [];
      this.draw();
      return;
    }
    const data = await api(`/api/v1/trials/time-series${query({
      trialIds: this.trialIds, group: this.group, maxDatapoints: MAX_POINTS,
    })}`);
    this.series = data.trials.map(({ trial, metrics }) => ({
      trialId: trial.id,
      data: (metrics.find((m) => m.group === this.group) || { data: [] }).data,
    }));
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

  draw() {
    const names = this.metricNames();
    const wanted = this.chosen[this.group] || this.preferred[this.group];
    const metric = names.includes(wanted) ? wanted : names.find((n) => n.includes("loss")) || names[0];
    replace(this.select, names.map((n) => el("option", { value: n, selected: n === metric }, n)));
    this.container.dataset.metric = metric || "";
    const lines = this.series.map((s) => ({
      name: `trial ${s.trialId}`,
      color: color(this.trialIds.indexOf(s.trialId)),
      points: s.data.filter((p) => typeof (p.values || {})[metric] === "number")
        .map((p) => [p.batches, p.values[metric]]),
    }));
    replace(this.chartBox, lineChart(lines, { xLabel: "batches", yLabel: metric || "" }));
    replace(this.legend, lines.filter((l) => l.points.length).map((l) => el("span",
      { class: "legend-item" }, el("span", { class: "swatch", style: `background:${l.color}` }),
      l.name)));
  }
}
