// One project: its description and its experiments, in the home page's list.

import { api, startPage } from "/static/api.js";
import { el, message, replace } from "/static/dom.js";
import { experimentList } from "/static/experiment_list.js";

const main = document.getElementById("main");
const projectId = Number(document.body.dataset.id);

startPage().then(async (user) => {
  if (!user) return;
  try {
    const { project } = await api(`/api/v1/projects/${projectId}`);
    document.title = `${project.name} · Epochal`;
    const box = el("div");
    replace(main, el("p", {}, el("a", { href: "/workspaces" }, "Workspaces"), " / ",
      el("a", { href: `/workspaces/${project.workspaceId}` }, project.workspaceName), " /"),
    el("h1", {}, project.name),
    el("p", { id: "project-description", class: "muted" }, project.description || "No description."),
    box);
    experimentList(box, { projectId });
  } catch (error) {
    replace(main, el("h1", {}, "Project"), message(error.message, "error"));
  }
});
