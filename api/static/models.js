// The model registry: every model (GET /api/v1/models), searched by name, filtered by tag and
// workspace, archived ones on request, sorted by any column by the master; the view is kept in
// the address (address.js). A form creates a model (POST /api/v1/models).

import { AddressState } from "/static/address.js";
import { api, every, query, startPage } from "/static/api.js";
import { el, fmtTime, message, replace, sortButton, table } from "/static/dom.js";

const view = new AddressState({ q: "", label: "", workspace: "", archived: false,
  sort: "SORT_BY_LAST_UPDATED_TIME", order: "desc" });

const main = document.getElementById("main");
const status = el("div", { class: "status" });
const listBox = el("div", { id: "model-list" });
const nameInput = el("input", { id: "model-name", placeholder: "name", "aria-label": "model name",
  required: true, maxlength: 255 });
const descriptionInput = el("input", { id: "model-description", placeholder: "description",
  "aria-label": "model description", maxlength: 65536 });
const labelsInput = el("input", { id: "model-labels", placeholder: "tags, comma-separated",
  "aria-label": "model tags" });
const workspaceInput = el("select", { id: "model-workspace", "aria-label": "model workspace" });
const formError = el("span", { class: "error", role: "alert" });
const form = el("form", { id: "create-model", class: "inline-form" },
  nameInput, descriptionInput, labelsInput, workspaceInput,
  el("button", { type: "submit" }, "Create model"), formError);

const search = el("input", { id: "model-search", type: "search", placeholder: "search names",
  "aria-label": "search model names", value: view.get("q"), maxlength: 255 });
const labelFilter = el("select", { id: "model-label-filter", "aria-label": "tag" });
const workspaceFilter = el("select", { id: "model-workspace-filter", "aria-label": "workspace" });
const archivedToggle = el("input", { id: "model-show-archived", type: "checkbox",
  checked: view.get("archived") });
const filters = el("div", { class: "inline-form", id: "model-filters" }, search,
  el("label", {}, "tag ", labelFilter), el("label", {}, "workspace ", workspaceFilter),
  el("label", {}, archivedToggle, " show archived"));

let workspaces = new Map();

function options(select, values, chosen, any) {
  replace(select, el("option", { value: "" }, any),
    values.map(([value, text]) => el("option", { value, selected: String(value) === chosen },
      text)));
  select.value = chosen;
}

function sortHeader(label, sortBy) {
  const active = view.get("sort") === sortBy;
  const desc = view.get("order") === "desc";
  return sortButton(label, { key: sortBy, active, desc, onSort: () => {
    view.set({ sort: sortBy, order: active && !desc ? "desc" : "asc" });
    refresh().catch((error) => replace(status, el("span", { class: "error" }, error.message)));
  } });
}

function render(models, total) {
  const link = (m, text) => el("a", { href: `/models/${m.id}` }, text);
  const columns = [
    { label: sortHeader("Name", "SORT_BY_NAME"), cell: (m) => [link(m, m.name),
      m.archived ? el("span", { class: "chip archived" }, "archived") : ""] },
    { label: sortHeader("Latest version", "SORT_BY_LATEST_VERSION"), class: "num latest",
      cell: (m) => (m.latestVersion ? el("a", { href: `/models/${m.id}/versions/${m.latestVersion}` },
        `v${m.latestVersion}`) : "") },
    { label: sortHeader("Versions", "SORT_BY_NUM_VERSIONS"), class: "num versions",
      cell: (m) => m.numVersions },
    { label: sortHeader("Workspace", "SORT_BY_WORKSPACE"), class: "workspace",
      cell: (m) => workspaces.get(m.workspaceId) ?? `workspace ${m.workspaceId}` },
    { label: "Tags", cell: (m) => m.labels.map((l) => el("button", { type: "button",
      class: "chip label", title: `only models tagged ${l}`, onclick: () => filterByTag(l) }, l)) },
    { label: sortHeader("Owner", "SORT_BY_OWNER"), cell: (m) => m.username },
    { label: sortHeader("Updated", "SORT_BY_LAST_UPDATED_TIME"),
      cell: (m) => fmtTime(m.lastUpdatedTime) },
    { label: sortHeader("Created", "SORT_BY_CREATION_TIME"), cell: (m) => fmtTime(m.creationTime) },
    { label: sortHeader("Description", "SORT_BY_DESCRIPTION"), cell: (m) => m.description },
  ];
  const filtered = view.get("q") || view.get("label") || view.get("workspace");
  replace(listBox, el("p", { class: "muted", id: "model-count" },
    `${total} model${total === 1 ? "" : "s"}`, models.length < total
      ? `, the first ${models.length} shown: search to narrow them` : ""), models.length
    ? table(columns, models, (m) => ({ class: `model-row${m.archived ? " archived" : ""}`,
      "data-id": m.id, "data-name": m.name }))
    : message(filtered ? "No model matches these filters."
      : "No models yet: create one here, or with `epochal model create NAME`."));
}

async function loadChoices() {
  const [{ workspaces: found }, { labels }] = await Promise.all([
    api("/api/v1/workspaces"), api("/api/v1/model/labels")]);
  workspaces = new Map(found.map((w) => [w.id, w.name]));
  const named = found.map((w) => [w.id, w.name]);
  options(workspaceFilter, named, view.get("workspace"), "any");
  options(workspaceInput, named, String(found[0]?.id ?? ""), "workspace");
  workspaceInput.value = String(found.find((w) => w.id === 1)?.id ?? found[0]?.id ?? "");
  options(labelFilter, labels.map((l) => [l, l]), view.get("label"), "any");
}

let shown = 0;
async function refresh() {
  const asked = ++shown;
  const params = { sortBy: view.get("sort"), orderBy: view.get("order") === "desc"
    ? "ORDER_BY_DESC" : "ORDER_BY_ASC", name: view.get("q"), labels: view.get("label"),
  workspaceIds: view.get("workspace"), archived: view.get("archived") ? "" : "false",
  limit: 200 };
  const data = await api(`/api/v1/models${query(params)}`);
  if (asked !== shown) return; // a newer filter's answer is already shown
  render(data.models, data.pagination.total);
}

// A tag clicked in the table filters by it.
function filterByTag(label) {
  if (![...labelFilter.options].some((o) => o.value === label)) {
    labelFilter.append(el("option", { value: label }, label));
  }
  labelFilter.value = label;
  view.set({ label });
  rerun();
}

const rerun = () => refresh().catch((error) =>
  replace(status, el("span", { class: "error" }, error.message)));
search.addEventListener("input", () => { view.set({ q: search.value.trim() }); rerun(); });
labelFilter.addEventListener("change", () => { view.set({ label: labelFilter.value }); rerun(); });
workspaceFilter.addEventListener("change", () => {
  view.set({ workspace: workspaceFilter.value });
  rerun();
});
archivedToggle.addEventListener("change", () => {
  view.set({ archived: archivedToggle.checked });
  rerun();
});

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  replace(formError);
  try {
    const { model } = await api("/api/v1/models", { method: "POST",
      body: { name: nameInput.value, description: descriptionInput.value,
        labels: labelsInput.value.split(",").map((l) => l.trim()).filter(Boolean),
        workspaceId: Number(workspaceInput.value) || null } });
    location.assign(`/models/${model.id}`);
  } catch (error) {
    replace(formError, error.message);
  }
});

replace(main, el("h1", {}, "Models"), form, filters, status, listBox);
startPage().then(async (user) => {
  if (!user) return;
  await loadChoices();
  every(5, refresh, status);
});
