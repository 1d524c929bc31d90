// One workspace: its projects (experiments, last activity), its members, a new project.

import { api, startPage } from "/static/api.js";
import { el, fmtTime, message, replace, table } from "/static/dom.js";

const main = document.getElementById("main");
const workspaceId = Number(document.body.dataset.id);
const projectsBox = el("div", { id: "project-list" });
const formError = el("p", { class: "error", role: "alert", id: "project-error" });
const summary = el("p", { class: "muted", id: "workspace-summary" });
let owner = "";

async function showProjects() {
  const data = await api(`/api/v1/workspaces/${workspaceId}/projects?sortBy=SORT_BY_NAME`);
  const experiments = data.projects.reduce((n, p) => n + p.numExperiments, 0);
  replace(summary, `owner ${owner} · ${data.projects.length} projects · ${experiments} experiments`);
  replace(projectsBox, data.projects.length ? table([
    { label: "Project", cell: (p) => [el("a", { href: `/projects/${p.id}` }, p.name),
      p.archived ? el("span", { class: "badge archived-badge" }, "archived") : ""] },
    { label: "Description", cell: (p) => p.description },
    { label: "Experiments", class: "num", cell: (p) => p.numExperiments },
    { label: "Active", class: "num", cell: (p) => p.numActiveExperiments },
    { label: "Last experiment", cell: (p) => fmtTime(p.lastExperimentStartedAt) },
    { label: "Owner", cell: (p) => p.username },
  ], data.projects, (p) => ({ class: "project-row", "data-id": p.id }))
    : message("No projects yet."));
}

function createForm(workspace) {
  const name = el("input", { id: "project-name", required: true, maxlength: 320,
    placeholder: "project name", "aria-label": "project name" });
  const description = el("input", { id: "project-description", maxlength: 10000,
    placeholder: "description", "aria-label": "project description" });
  return el("form", { id: "create-project", class: "filters", onsubmit: async (event) => {
    event.preventDefault();
    replace(formError);
    try {
      await api(`/api/v1/workspaces/${workspaceId}/projects`, { method: "POST",
        body: { name: name.value.trim(), description: description.value } });
      name.value = "";
      description.value = "";
      await showProjects();
    } catch (error) {
      replace(formError, error.message);
    }
  } }, name, description, el("button", { type: "submit", disabled: workspace.archived },
    "Create project"));
}

startPage().then(async (user) => {
  if (!user) return;
  try {
    const { workspace } = await api(`/api/v1/workspaces/${workspaceId}`);
    const members = await api(`/api/v1/roles/workspace/${workspaceId}`);
    document.title = `${workspace.name} · Epochal`;
    owner = workspace.username;
    replace(main, el("p", {}, el("a", { href: "/workspaces" }, "Workspaces"), " /"),
      el("h1", {}, workspace.name,
        workspace.archived ? el("span", { class: "badge archived-badge" }, "archived") : ""),
      summary,
      el("h2", {}, "Projects"), createForm(workspace), formError, projectsBox,
      el("h2", {}, "Members"), el("ul", { id: "members" }, members.usersAssignedDirectly.map(
        (u) => el("li", {}, `${u.displayName || u.username} (workspace admin)`))));
    await showProjects();
  } catch (error) {
    replace(main, el("h1", {}, "Workspace"), message(error.message, "error"));
  }
});
