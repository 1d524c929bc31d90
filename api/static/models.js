// The model registry: every model (GET /api/v1/models), refreshed every five seconds, and a
// form to create one (POST /api/v1/models).

import { api, every, query, startPage } from "/static/api.js";
import { el, fmtTime, message, replace, table } from "/static/dom.js";

const main = document.getElementById("main");
const status = el("div", { class: "status" });
const listBox = el("div", { id: "model-list" });
const nameInput = el("input", { id: "model-name", placeholder: "name", "aria-label": "model name",
  required: true, maxlength: 255 });
const descriptionInput = el("input", { id: "model-description", placeholder: "description",
  "aria-label": "model description" });
const formError = el("span", { class: "error", role: "alert" });
const form = el("form", { id: "create-model", class: "inline-form" },
  nameInput, descriptionInput, el("button", { type: "submit" }, "Create model"), formError);

function render(models) {
  const link = (m, text) => el("a", { href: `/models/${m.id}` }, text);
  const columns = [
    { label: "ID", cell: (m) => link(m, m.id) },
    { label: "Name", cell: (m) => link(m, m.name) },
    { label: "Versions", class: "num", cell: (m) => m.numVersions },
    { label: "Labels", cell: (m) => m.labels.join(", ") },
    { label: "Owner", cell: (m) => m.username },
    { label: "Updated", cell: (m) => fmtTime(m.lastUpdatedTime) },
    { label: "Description", cell: (m) => m.description },
  ];
  replace(listBox, models.length
    ? table(columns, models, (m) => ({ class: "model-row", "data-id": m.id }))
    : message("No models yet: create one here, or with `epochal model create NAME`."));
}

async function refresh() {
  const data = await api(`/api/v1/models${query({ sortBy: "SORT_BY_NAME", archived: "false" })}`);
  render(data.models);
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  replace(formError);
  try {
    const { model } = await api("/api/v1/models", { method: "POST",
      body: { name: nameInput.value, description: descriptionInput.value } });
    location.assign(`/models/${model.id}`);
  } catch (error) {
    replace(formError, error.message);
  }
});

replace(main, el("h1", {}, "Models"), form, status, listBox);
startPage().then((user) => user && every(5, refresh, status));
