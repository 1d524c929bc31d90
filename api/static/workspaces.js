// Every workspace: its projects, experiments and owner; archived ones on request.

import { AddressState } from "/static/address.js";
import { api, query, startPage } from "/static/api.js";
import { el, message, replace, table } from "/static/dom.js";

const main = document.getElementById("main");
const view = new AddressState({ archived: false });
const listBox = el("div", { id: "workspace-list" });
const archivedBox = el("input", { id: "show-archived-workspaces", type: "checkbox",
  checked: view.get("archived"), onchange: () => { view.set({ archived: archivedBox.checked });
    show(); } });

async function show() {
  try {
    const data = await api(`/api/v1/workspaces${query({
      archived: view.get("archived") ? "" : "false", sortBy: "SORT_BY_NAME" })}`);
    replace(listBox, data.workspaces.length ? table([
      { label: "Workspace", cell: (w) => [el("a", { href: `/workspaces/${w.id}` }, w.name),
        w.archived ? el("span", { class: "badge archived-badge" }, "archived") : ""] },
      { label: "Projects", class: "num", cell: (w) => w.numProjects },
      { label: "Experiments", class: "num", cell: (w) => w.numExperiments },
      { label: "Owner", cell: (w) => w.username },
    ], data.workspaces, (w) => ({ class: `workspace-row${w.archived ? " archived" : ""}`,
      "data-id": w.id })) : message("No workspaces: epochal workspace create NAME"));
  } catch (error) {
    replace(listBox, message(error.message, "error"));
  }
}

startPage().then((user) => {
  if (!user) return;
  replace(main, el("h1", {}, "Workspaces"),
    el("div", { class: "filters" }, el("label", {}, archivedBox, " show archived")), listBox);
  show();
});
