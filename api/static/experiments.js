// The experiment list: state filter (asked of the server), text filter (over the loaded page),
// refreshed every two seconds.

import { api, every, query, startPage } from "/static/api.js";
import { STATES, el, fmtNumber, fmtTime, message, progressBar, replace, stateBadge, table,
  unmanagedBadge } from "/static/dom.js";

const PAGE_SIZE = 50;
const E = STATES.experiment;
const FILTERED_STATES = [E.ACTIVE, E.PAUSED, E.STOPPING_CANCELED, E.STOPPING_KILLED, E.COMPLETED,
  E.CANCELED, E.ERROR];

const main = document.getElementById("main");
const status = el("div", { class: "status" });
const listBox = el("div", { id: "experiment-list" });
const stateSelect = el("select", { id: "state-filter", "aria-label": "state" },
  el("option", { value: "" }, "all states"),
  FILTERED_STATES.map((s) => el("option", { value: `STATE_${s}` }, s.toLowerCase().replace("_", " "))));
const textFilter = el("input", { id: "text-filter", type: "search",
  placeholder: "filter by name, id, owner", "aria-label": "filter" });
let offset = 0;
let experiments = [];
let total = 0;

function matches(exp, text) {
  if (!text) return true;
  const haystack = `${exp.id} ${exp.name} ${exp.username} ${exp.description}`.toLowerCase();
  return text.toLowerCase().split(/\s+/).every((word) => haystack.includes(word));
}

function render() {
  const shown = experiments.filter((e) => matches(e, textFilter.value.trim()));
  const columns = [
    { label: "ID", cell: (e) => el("a", { href: `/experiments/${e.id}` }, e.id) },
    { label: "Name", cell: (e) => el("a", { href: `/experiments/${e.id}` }, e.name) },
    { label: "State", cell: (e) => [stateBadge(e.state), " ", unmanagedBadge(e)] },
    { label: "Progress", cell: (e) => progressBar(e.progress) },
    { label: "Best metric", cell: (e) => (e.bestValidation === null || e.bestValidation === undefined
      ? "" : `${e.searcherMetric} ${fmtNumber(e.bestValidation)}`) },
    { label: "Trials", class: "num", cell: (e) => e.numTrials },
    { label: "Owner", cell: (e) => e.username },
    { label: "Started", cell: (e) => fmtTime(e.startTime) },
  ];
  const pager = el("div", { class: "pager" },
    el("button", { type: "button", disabled: offset === 0,
      onclick: () => { offset = Math.max(0, offset - PAGE_SIZE); refresh(); } }, "newer"),
    el("span", {}, total ? `${offset + 1}-${offset + experiments.length} of ${total}` : ""),
    el("button", { type: "button", disabled: offset + PAGE_SIZE >= total,
      onclick: () => { offset += PAGE_SIZE; refresh(); } }, "older"));
  replace(listBox, shown.length
    ? table(columns, shown, (e) => ({ class: "experiment-row", "data-id": e.id }))
    : message(experiments.length || stateSelect.value ? "No experiment matches the filter."
      : "No experiments yet: epochal experiment create CONFIG DIR"), pager);
}

async function refresh() {
  const data = await api(`/api/v1/experiments${query({
    limit: PAGE_SIZE, offset, states: stateSelect.value, orderBy: "ORDER_BY_DESC",
    archived: "false",
  })}`);
  experiments = data.experiments;
  total = data.pagination.total;
  render();
}

stateSelect.addEventListener("change", () => { offset = 0; refresh(); });
textFilter.addEventListener("input", render);
replace(main, el("h1", {}, "Experiments"),
  el("div", { class: "filters" }, stateSelect, textFilter), status, listBox);
startPage().then((user) => user && every(2, refresh, status));
