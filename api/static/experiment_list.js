// The experiments list (the home page's, a project's): the server sorts, searches and pages, so
// "1-50 of N" counts what the filters keep; the view (sort, search, state, archived, columns,
// page, project) lives in the address, so a copied link opens the same list.

import { AddressState } from "/static/address.js";
import { api, every, query } from "/static/api.js";
import { STATES, el, fmtNumber, fmtTime, message, progressBar, replace, sortButton,
  stateBadge, table, unmanagedBadge } from "/static/dom.js";

const PAGE_SIZE = 50;
const E = STATES.experiment;
const FILTERED_STATES = [E.ACTIVE, E.PAUSED, E.STOPPING_CANCELED, E.STOPPING_KILLED, E.COMPLETED,
  E.CANCELED, E.ERROR];

function fmtDuration(ms) {
  if (ms === null || ms === undefined) return "";
  const s = Math.round(ms / 1000);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return h ? `${h}h ${m}m` : m ? `${m}m ${s % 60}s` : `${s}s`;
}

// Every column: its key (in the address), header, the server's sort key, and its cell.
const COLUMNS = [
  { key: "id", label: "ID", sort: "SORT_BY_ID",
    cell: (e) => el("a", { href: `/experiments/${e.id}` }, e.id) },
  { key: "name", label: "Name", sort: "SORT_BY_NAME", cell: (e) => [
    el("a", { href: `/experiments/${e.id}` }, e.name),
    e.archived ? el("span", { class: "badge archived-badge" }, "archived") : ""] },
  { key: "state", label: "State", sort: "SORT_BY_STATE",
    cell: (e) => [stateBadge(e.state), " ", unmanagedBadge(e)] },
  { key: "project", label: "Project", sort: "SORT_BY_PROJECT", cell: (e) => [
    el("a", { href: `/workspaces/${e.workspaceId}` }, e.workspaceName), " / ",
    el("a", { href: `/projects/${e.projectId}` }, e.projectName)] },
  { key: "progress", label: "Progress", sort: "SORT_BY_PROGRESS",
    cell: (e) => progressBar(e.progress) },
  { key: "best", label: "Best metric", sort: "SORT_BY_SEARCHER_METRIC_VAL",
    cell: (e) => (e.bestValidation === null || e.bestValidation === undefined
      ? "" : `${e.searcherMetric} ${fmtNumber(e.bestValidation)}`) },
  { key: "trials", label: "Trials", sort: "SORT_BY_NUM_TRIALS", class: "num",
    cell: (e) => e.numTrials },
  { key: "labels", label: "Labels", sort: "SORT_BY_LABELS",
    cell: (e) => e.labels.map((l) => el("span", { class: "badge label" }, l)) },
  { key: "owner", label: "Owner", sort: "SORT_BY_USER", cell: (e) => e.username },
  { key: "started", label: "Started", sort: "SORT_BY_START_TIME", cell: (e) => fmtTime(e.startTime) },
  { key: "ended", label: "Ended", sort: "SORT_BY_END_TIME", cell: (e) => fmtTime(e.endTime) },
  { key: "duration", label: "Duration", sort: "SORT_BY_DURATION", class: "num",
    cell: (e) => fmtDuration(e.duration) },
];
const DEFAULT_COLUMNS = ["id", "name", "state", "project", "progress", "best", "trials", "owner",
  "started", "duration"];

// Builds the list into `container`; `projectId` fixes the project (a project's page), else the
// user may filter by one. Returns nothing: it refreshes itself every two seconds.
export function experimentList(container, { projectId = 0 } = {}) {
  const view = new AddressState({ sort: "SORT_BY_ID", order: "desc", q: "", state: "",
    archived: false, cols: DEFAULT_COLUMNS, page: 1, project: 0 });
  const selected = new Set();
  let projects = [];  // every project, for the filter and "move to"
  let experiments = [];
  let total = 0;
  const status = el("div", { class: "status" });
  const listBox = el("div", { id: "experiment-list" });
  const actions = el("div", { id: "bulk-actions", class: "filters" });

  const stateSelect = el("select", { id: "state-filter", "aria-label": "state" },
    el("option", { value: "" }, "all states"),
    FILTERED_STATES.map((s) => el("option", { value: `STATE_${s}`, selected: view.get("state") ===
      `STATE_${s}` }, s.toLowerCase().replace("_", " "))));
  const textFilter = el("input", { id: "text-filter", type: "search", value: view.get("q"),
    maxlength: 200, placeholder: "search id, name, description, owner", "aria-label": "search" });
  const archivedBox = el("input", { id: "show-archived", type: "checkbox",
    checked: view.get("archived") });
  const projectSelect = el("select", { id: "project-filter", "aria-label": "project" },
    el("option", { value: "0" }, "all projects"));
  const chooser = el("details", { id: "experiment-columns", class: "chooser" },
    el("summary", {}, "columns"), el("div", { class: "choices" },
    COLUMNS.map((c) => el("label", { class: "choice" }, el("input", { type: "checkbox",
      "data-column": c.key, checked: view.get("cols").includes(c.key), onchange: (event) => {
        const cols = COLUMNS.map((x) => x.key).filter((k) => (k === c.key ? event.target.checked
          : view.get("cols").includes(k)));
        view.set({ cols });
        render();
      } }), c.label))));

  const restart = (changes) => { view.set({ ...changes, page: 1 }); refresh(); };
  stateSelect.addEventListener("change", () => restart({ state: stateSelect.value }));
  archivedBox.addEventListener("change", () => restart({ archived: archivedBox.checked }));
  projectSelect.addEventListener("change", () => restart({ project: Number(projectSelect.value) }));
  let typing = null;
  textFilter.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => restart({ q: textFilter.value.trim() }), 250);
  });

  function sortHeader(column) {
    const active = view.get("sort") === column.sort;
    const desc = view.get("order") === "desc";
    return sortButton(column.label, { key: column.sort, active, desc,
      onSort: () => restart({ sort: column.sort,
        order: active ? (desc ? "asc" : "desc") : "desc" }) });
  }

  function renderActions() {
    const ids = [...selected];
    const bulk = (verb, body = undefined) => async () => {
      const failed = [];
      for (const id of ids) {
        try {
          await api(`/api/v1/experiments/${id}/${verb}`, { method: "POST", body });
        } catch (error) {
          failed.push(`${id}: ${error.message}`);
        }
      }
      selected.clear();
      await refresh();
      if (failed.length) replace(status, el("span", { class: "error" }, failed.join("; ")));
    };
    replace(actions, ids.length ? [
      el("span", { id: "selected-count" }, `${ids.length} selected`),
      el("a", { id: "compare-selected", class: "button", href: `/compare?experiments=${ids.join(",")}`,
        "aria-disabled": ids.length < 2 ? "true" : null,
        onclick: (event) => { if (ids.length < 2) event.preventDefault(); } }, "Compare"),
      el("button", { type: "button", id: "archive-selected", onclick: bulk("archive") }, "Archive"),
      el("button", { type: "button", id: "unarchive-selected", onclick: bulk("unarchive") },
        "Unarchive"),
      el("select", { id: "move-selected", "aria-label": "move to project", onchange: async (event) => {
        const destination = Number(event.target.value);
        if (!destination) return;
        await bulk("move", { destinationProjectId: destination })();
      } }, el("option", { value: "" }, "move to project…"), projects.map((p) =>
        el("option", { value: String(p.id) }, `${p.workspaceName} / ${p.name}`))),
      el("button", { type: "button", onclick: () => { selected.clear(); render(); } }, "Clear"),
    ] : "");
  }

  function render() {
    const shown = COLUMNS.filter((c) => view.get("cols").includes(c.key));
    const columns = [
      { label: "", cell: (e) => el("input", { type: "checkbox", class: "select-experiment",
        "aria-label": `select ${e.id}`, checked: selected.has(e.id), onchange: (event) => {
          if (event.target.checked) selected.add(e.id);
          else selected.delete(e.id);
          renderActions();
        } }) },
      ...shown.map((c) => ({ ...c, label: sortHeader(c) })),
    ];
    const offset = (view.get("page") - 1) * PAGE_SIZE;
    const turn = (page) => { view.set({ page }); refresh(); };
    const pager = el("div", { class: "pager" },
      el("button", { type: "button", id: "experiments-prev", disabled: offset === 0,
        onclick: () => turn(view.get("page") - 1) }, "‹ previous"),
      el("span", { id: "experiments-range" },
        total ? ` ${offset + 1}-${offset + experiments.length} of ${total} ` : " none "),
      el("button", { type: "button", id: "experiments-next", disabled: offset + PAGE_SIZE >= total,
        onclick: () => turn(view.get("page") + 1) }, "next ›"));
    const filtered = view.get("q") || view.get("state") || view.get("project") || projectId;
    replace(listBox, experiments.length
      ? table(columns, experiments, (e) => ({ class: `experiment-row${e.archived ? " archived" : ""}`,
        "data-id": e.id }))
      : message(filtered ? "No experiment matches the filter."
        : "No experiments yet: epochal experiment create CONFIG DIR"), pager);
    renderActions();
  }

  // Only the latest request draws: an older answer (the timer's, sent before a click) is dropped.
  let asked = 0;
  async function refresh() {
    const ask = ++asked;
    const offset = (view.get("page") - 1) * PAGE_SIZE;
    const data = await api(`/api/v1/experiments${query({
      limit: PAGE_SIZE, offset, states: view.get("state"), sortBy: view.get("sort"),
      orderBy: view.get("order") === "desc" ? "ORDER_BY_DESC" : "ORDER_BY_ASC",
      archived: view.get("archived") ? "" : "false", search: view.get("q"),
      projectId: projectId || view.get("project") || "",
    })}`);
    if (ask !== asked) return;
    experiments = data.experiments;
    total = data.pagination.total;
    render();
  }

  async function offerProjects() {
    projects = (await api("/api/v1/workspaces/0/projects")).projects;
    replace(projectSelect, el("option", { value: "0" }, "all projects"),
      projects.map((p) => el("option", { value: String(p.id),
        selected: view.get("project") === p.id }, `${p.workspaceName} / ${p.name}`)));
  }

  replace(container, el("div", { class: "filters list-filters" }, stateSelect, textFilter,
    projectId ? "" : projectSelect,
    el("label", {}, archivedBox, " show archived"), chooser), actions, status, listBox);
  offerProjects().catch(() => {});
  every(2, refresh, status);
}
