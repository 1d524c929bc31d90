// A log panel: lines as they arrive (Server-Sent Events `log`, or NDJSON read once), one
// timestamp a line (the training code's own leading timestamp is dropped), coloured by level,
// with search, a level filter, a rank filter (lines of a run on several processes carry their
// rank), a trial filter when the lines come from several trials, follow and download. The trial
// page shows one trial's lines; the experiment page all its trials'.

import { follow, token } from "/static/api.js";
import { el, replace } from "/static/dom.js";

const MAX_LOG_LINES = 5000;
const LEVELS = ["LOG_LEVEL_DEBUG", "LOG_LEVEL_INFO", "LOG_LEVEL_WARNING", "LOG_LEVEL_ERROR",
  "LOG_LEVEL_CRITICAL"];
// `[rank=1] `, as Determined's launchers and torch print it.
const RANK = /^\[rank=?(\d+)\]:? /;
// The training code's own timestamp at the start of a line (Python logging, ISO 8601): the
// line's time is shown once, from the agent.
const OWN_TIMESTAMP = /^\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?[ ]*/;

// A select offering each value seen (ranks, trials), "all" first.
class SeenFilter {
  constructor(id, label, all, onchange) {
    this.label = label;
    this.all = all;
    this.seen = new Set();
    this.select = el("select", { id, "aria-label": label, hidden: true, onchange },
      el("option", { value: "" }, all));
  }

  see(value) {
    if (!value || this.seen.has(value)) return;
    this.seen.add(value);
    this.select.hidden = false;
    const chosen = this.select.value;
    replace(this.select, el("option", { value: "" }, this.all),
      [...this.seen].sort((a, b) => a - b).map((v) =>
        el("option", { value: v, selected: v === chosen }, `${this.label} ${v}`)));
  }
}

export class LogPanel {
  // `name` names the downloaded file; `byTrial` prefixes each line with its trial and offers
  // a trial filter.
  constructor({ name, byTrial = false }) {
    this.name = name;
    this.byTrial = byTrial;
    this.lines = [];
    this.box = el("pre", { id: "logs", class: "logs", "data-lines": "0" });
    this.followBox = el("input", { type: "checkbox", id: "follow-logs", checked: true });
    const refilter = () => this.filter();
    this.search = el("input", { type: "search", id: "log-search", placeholder: "search the logs",
      "aria-label": "search the logs", oninput: refilter });
    this.level = el("select", { id: "log-level", "aria-label": "lowest level shown",
      onchange: refilter },
    el("option", { value: "LOG_LEVEL_DEBUG" }, "all levels"),
    el("option", { value: "LOG_LEVEL_WARNING" }, "warnings and errors"),
    el("option", { value: "LOG_LEVEL_ERROR" }, "errors"));
    this.ranks = new SeenFilter("log-rank", "rank", "all ranks", refilter);
    this.trials = new SeenFilter("log-trial", "trial", "all trials", refilter);
    this.element = el("div", {},
      el("div", { class: "log-controls" }, this.search, this.level, this.trials.select,
        this.ranks.select, el("label", { class: "follow" }, this.followBox, " follow"),
        el("button", { type: "button", id: "log-download", onclick: () => this.download() },
          "download")),
      this.box);
  }

  shown(line) {
    const query = this.search.value.trim().toLowerCase();
    return LEVELS.indexOf(line.level) >= LEVELS.indexOf(this.level.value)
      && (!this.ranks.select.value || line.rank === this.ranks.select.value)
      && (!this.trials.select.value || line.trial === this.trials.select.value)
      && (!query || line.text.toLowerCase().includes(query));
  }

  filter() {
    for (const line of this.lines) line.node.hidden = !this.shown(line);
  }

  add(log) {
    const stick = this.followBox.checked;
    const text = log.log.replace(OWN_TIMESTAMP, "").replace(/\n$/, "");
    const level = LEVELS.includes(log.level) ? log.level : "LOG_LEVEL_INFO";
    const time = new Date(log.timestamp).toLocaleTimeString(undefined, { hour12: false });
    const trial = this.byTrial ? String(log.trialId) : "";
    const node = el("span", { class: "log-line", "data-level": level.replace("LOG_LEVEL_", ""),
      "data-trial": trial || null },
    el("span", { class: "log-time", title: log.timestamp }, `${time} `),
    trial ? el("a", { class: "log-trial", href: `/trials/${trial}` }, `[trial ${trial}] `) : "",
    el("span", { class: `level-${level.replace("LOG_LEVEL_", "").toLowerCase()}` }, `${text}\n`));
    const rank = (RANK.exec(text) || [])[1] || "";
    this.ranks.see(rank);
    this.trials.see(trial);
    const line = { node, level, text, rank, trial, timestamp: log.timestamp };
    node.hidden = !this.shown(line);
    this.lines.push(line);
    this.box.append(node);
    while (this.lines.length > MAX_LOG_LINES) this.lines.shift().node.remove();
    this.box.dataset.lines = String(Number(this.box.dataset.lines) + 1);
    if (stick) this.box.scrollTop = this.box.scrollHeight;
  }

  download() {
    const text = this.lines.map((l) => `${l.timestamp} ${l.trial ? `trial ${l.trial} ` : ""}`
      + `${l.level.replace("LOG_LEVEL_", "")} ${l.text}\n`).join("");
    const link = el("a", { href: URL.createObjectURL(new Blob([text], { type: "text/plain" })),
      download: `${this.name}.log` });
    link.click();
    URL.revokeObjectURL(link.href);
  }

  // Lines as the SSE stream at `streamPath` sends them; without it, the NDJSON at `oncePath`.
  follow(streamPath, oncePath) {
    return follow(streamPath, { log: (log) => this.add(log) }, () => this.readOnce(oncePath));
  }

  async readOnce(path) {
    const response = await fetch(path, { headers: { Authorization: `Bearer ${token()}` } });
    const text = await response.text();
    replace(this.box);
    this.lines.length = 0;
    this.box.dataset.lines = "0";
    for (const line of text.split("\n")) if (line.trim()) this.add(JSON.parse(line).result);
  }
}
