// Building elements and formatting values. Data is only ever set as text (never innerHTML), so
// a name or a log line cannot inject markup.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
}

export function replace(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

// A string equal for equal content, whatever order its objects' keys came in (two endpoints
// answer the same experiment with its fields in another order): what a view last drew.
export function contentKey(value) {
  return JSON.stringify(value, (key, part) => (part && typeof part === "object"
    && !Array.isArray(part) ? Object.fromEntries(Object.entries(part).sort(
      ([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) : part));
}

// Every state by kind, named by its one home, common/states.py, through the page's
// <body data-states>: `STATES.experiment.ACTIVE`, and `STATES.terminal` (a list).
const stateNames = JSON.parse(document.body.dataset.states || "{}");
export const STATES = Object.fromEntries(Object.entries(stateNames).map(([kind, names]) =>
  [kind, kind === "terminal" ? names : Object.freeze(Object.fromEntries(names.map((n) => [n, n])))]));

export function shortState(state) {
  return (state || "").replace(/^STATE_/, "");
}

export function stateBadge(state) {
  const name = shortState(state);
  return el("span", { class: `state state-${name.toLowerCase()}`, "data-state": name }, name);
}

// An experiment a script outside the cluster runs (Determined's core_v2): the cluster only records
// what it reports.
export function unmanagedBadge(experiment) {
  return experiment.unmanaged ? el("span", { class: "unmanaged", title:
    "Unmanaged: run outside the cluster by a script (Determined's core_v2); the cluster records "
    + "its reports and cannot pause or stop it" }, "unmanaged") : "";
}

export function fmtNumber(value) {
  if (value === null || value === undefined || value === "") return "";
  if (typeof value !== "number") return String(value);
  if (Number.isInteger(value)) return String(value);
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e5)) return value.toExponential(3);
  return value.toPrecision(4).replace(/\.?0+$/, "");
}

// Nested hyperparameters as their own dotted names (`optimizer.momentum`), as the trials table,
// the charts and the trial page show them.
export function flatHparams(hparams, prefix = "", into = {}) {
  for (const [name, value] of Object.entries(hparams || {})) {
    if (value !== null && typeof value === "object" && !Array.isArray(value)) {
      flatHparams(value, `${prefix}${name}.`, into);
    } else {
      into[`${prefix}${name}`] = value;
    }
  }
  return into;
}

export function fmtTime(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  return date.toLocaleString(undefined, {
    year: "numeric", month: "short", day: "numeric",
    hour: "2-digit", minute: "2-digit", second: "2-digit",
  });
}

export function fmtBytes(bytes) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit ? value.toFixed(1) : value} ${units[unit]}`;
}

export function progressBar(fraction) {
  const pct = Math.round(Math.max(0, Math.min(1, fraction || 0)) * 100);
  return el("span", { class: "progress", title: `${pct}%` },
    el("span", { class: "progress-track" }, el("span", { class: "progress-fill", style: `width:${pct}%` })),
    el("span", {}, `${pct}%`));
}

// A table from column specs: {label, cell(row) -> node|text, class?}.
export function table(columns, rows, rowAttrs = () => ({})) {
  return el("table", {},
    el("thead", {}, el("tr", {}, columns.map((c) => el("th", { class: c.class }, c.label)))),
    el("tbody", {}, rows.map((row) =>
      el("tr", rowAttrs(row), columns.map((c) => el("td", { class: c.class }, c.cell(row)))))));
}

export function message(text, kind = "muted") {
  return el("p", { class: kind }, text);
}

// A link to the workflow (every run of its id) in Temporal's UI, after `before`, where the
// master knows the UI's address (the page's data-temporal-workflows); nothing where it does not.
export function workflowLink(workflowId, before = "") {
  const workflows = document.body.dataset.temporalWorkflows;
  if (!workflows || !workflowId) return "";
  const query = encodeURIComponent(`WorkflowId="${workflowId}"`);
  return [before, el("a", { class: "workflow-link", href: `${workflows}?query=${query}`,
    target: "_blank", rel: "noopener", title: `${workflowId} in Temporal's UI` }, "Temporal")];
}

// A column header the user sorts by: a button showing the active direction (▲ ▼) and saying it
// in aria-sort; `onSort` is called on a click (the caller picks the next direction).
export function sortButton(label, { key, active, desc, onSort }) {
  return el("button", { type: "button", class: `sort${active ? " active" : ""}`,
    "data-sort": key, "aria-sort": active ? (desc ? "descending" : "ascending") : "none",
    onclick: onSort }, label, active ? (desc ? " ▼" : " ▲") : "");
}
