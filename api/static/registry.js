// The model registry's pieces the Models, model, version and trial pages share: tags as chips,
// metadata as key/value rows, an inline confirm, a copy button, and the form that registers a
// checkpoint as a version of an existing or a new model.

import { api, query } from "/static/api.js";
import { el, replace } from "/static/dom.js";

// Who may change what a user made: its owner or an admin (api/access.py's OWNER rule; the
// master refuses anyone else, the pages only hide what would be refused).
export function mayChange(user, owner) {
  return Boolean(user && (user.admin || user.username === owner));
}

// Tags (Determined's labels) as chips; with `onChange` each has a remove button and a box adds
// one. `onChange(values)` saves and may throw: its message shows beside the box.
export function chipEditor({ id, values, onChange = null, placeholder = "add a tag",
  kind = "label" }) {
  const said = el("span", { class: "error", role: "alert" });
  const save = async (next) => {
    replace(said);
    try {
      await onChange(next);
    } catch (error) {
      replace(said, error.message);
    }
  };
  const chips = values.map((value) => el("span", { class: `chip ${kind}`, "data-value": value },
    value, onChange ? el("button", { type: "button", class: "chip-remove",
      "aria-label": `remove ${value}`, title: `remove ${value}`,
      onclick: () => save(values.filter((v) => v !== value)) }, "×") : ""));
  if (!onChange) {
    return el("span", { id, class: "chips" }, chips.length ? chips : el("span",
      { class: "muted" }, "none"));
  }
  const input = el("input", { class: "chip-input", placeholder, "aria-label": placeholder,
    maxlength: 255, size: 14 });
  const add = el("form", { class: "chip-add", onsubmit: (event) => {
    event.preventDefault();
    const value = input.value.trim();
    if (value && !values.includes(value)) save([...values, value]);
  } }, input, el("button", { type: "submit" }, "Add"));
  return el("span", { id, class: "chips" }, chips, add, said);
}

// A model's or a version's tags and metadata, each part re-drawn alone after its own save, so
// a save never wipes what is typed in the other. `current()` is the object as last saved (its
// `labels` and `metadata`); `patch(body)` saves a change and may throw.
export function labelsAndMetadata(prefix, current, patch) {
  const tagsBox = el("div", {});
  const metadataBox = el("div", {});
  const renderTags = (editable) => replace(tagsBox, chipEditor({ id: `${prefix}-tags`,
    values: current().labels,
    onChange: editable ? async (labels) => {
      await patch({ labels });
      renderTags(editable);
    } : null }));
  const renderMetadata = (editable) => replace(metadataBox, metadataEditor({
    id: `${prefix}-metadata`, metadata: current().metadata,
    onSave: editable ? async (metadata) => {
      await patch({ metadata });
      renderMetadata(editable);
      metadataBox.append(el("span", { class: "muted saved", id: `${prefix}-metadata-saved` },
        "saved"));
    } : null }));
  return {
    tagsBox,
    metadataBox,
    render(editable) {
      renderTags(editable);
      renderMetadata(editable);
    },
  };
}

function shown(value) {
  return typeof value === "string" ? value : JSON.stringify(value);
}

// A value typed in a metadata box: JSON where it reads as JSON (numbers, lists), else the text.
function typed(text) {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

// Metadata (a JSON mapping) as key/value rows; with `onSave`, rows to edit, add and remove.
export function metadataEditor({ id, metadata, onSave = null }) {
  const entries = Object.entries(metadata || {});
  if (!onSave) {
    return el("div", { id }, entries.length ? el("table", { class: "kv" }, el("tbody", {},
      entries.map(([k, v]) => el("tr", { "data-key": k }, el("th", {}, k),
        el("td", {}, shown(v)))))) : el("p", { class: "muted" }, "no metadata"));
  }
  const body = el("tbody", {});
  const said = el("span", { class: "error", role: "alert" });
  const row = (key = "", value = "") => {
    const tr = el("tr", { class: "kv-row" },
      el("td", {}, el("input", { class: "kv-key", value: key, placeholder: "key",
        "aria-label": "metadata key", maxlength: 255 })),
      el("td", {}, el("input", { class: "kv-value", value, placeholder: "value",
        "aria-label": "metadata value", size: 30 })),
      el("td", {}, el("button", { type: "button", class: "kv-remove",
        "aria-label": `remove ${key || "row"}`, onclick: () => tr.remove() }, "×")));
    body.append(tr);
  };
  entries.forEach(([k, v]) => row(k, shown(v)));
  const form = el("form", { id, class: "kv-form", onsubmit: async (event) => {
    event.preventDefault();
    replace(said);
    const next = {};
    for (const tr of body.querySelectorAll("tr")) {
      const key = tr.querySelector(".kv-key").value.trim();
      if (key) next[key] = typed(tr.querySelector(".kv-value").value);
    }
    try {
      await onSave(next);
    } catch (error) {
      replace(said, error.message);
    }
  } }, el("table", { class: "kv" }, body),
  el("button", { type: "button", class: "kv-add", onclick: () => row() }, "Add field"), " ",
  el("button", { type: "submit", class: "kv-save" }, "Save metadata"), " ", said);
  return form;
}

// A button that asks once more, in place, before `action` (no browser dialog).
export function confirmButton({ id, label, question, action }) {
  const box = el("span", { id, class: "confirm" });
  const said = el("span", { class: "error", role: "alert" });
  const ask = () => replace(box, el("span", { class: "confirm-question" }, question), " ",
    el("button", { type: "button", class: "danger confirm-yes", onclick: async () => {
      replace(said);
      try {
        await action();
      } catch (error) {
        replace(said, error.message);
      }
    } }, label), " ",
    el("button", { type: "button", class: "confirm-no", onclick: start }, "Cancel"), " ", said);
  const start = () => replace(box, el("button", { type: "button", class: "danger",
    onclick: ask }, label));
  start();
  return box;
}

// A command shown as code with a button that copies it.
export function copyCommand(text, id) {
  const said = el("span", { class: "muted copy-said" });
  const code = el("code", { class: "command" }, text);
  return el("div", { id, class: "copy-command" }, code, " ", el("button", { type: "button",
    class: "copy", "aria-label": `copy ${text}`, onclick: async () => {
      try {
        await navigator.clipboard.writeText(text);
        replace(said, "copied");
      } catch {
        getSelection().selectAllChildren(code); // no clipboard (plain http): select it to copy
        replace(said, "selected: press Ctrl+C");
      }
    } }, "Copy"), " ", said);
}

const NEW_MODEL = "";

// Register checkpoint `uuid` as the next version of a model chosen here (or made here, by
// name); `onDone(modelVersion)` after. `models` is a list of the models one may choose.
export function registerForm(uuid, { onDone, models }) {
  const choose = el("select", { class: "register-model", "aria-label": "model" },
    models.map((m) => el("option", { value: m.name }, m.name)),
    el("option", { value: NEW_MODEL }, "New model…"));
  const name = el("input", { class: "register-new-name", placeholder: "new model's name",
    "aria-label": "new model's name", maxlength: 255, hidden: models.length > 0 });
  const comment = el("input", { class: "register-comment", placeholder: "comment (optional)",
    "aria-label": "comment" });
  const said = el("span", { class: "error", role: "alert" });
  choose.addEventListener("change", () => { name.hidden = choose.value !== NEW_MODEL; });
  if (!models.length) choose.value = NEW_MODEL;
  return el("form", { class: "register-form inline-form", onsubmit: async (event) => {
    event.preventDefault();
    replace(said);
    try {
      let model = choose.value;
      if (model === NEW_MODEL) {
        ({ model: { name: model } } = await api("/api/v1/models", { method: "POST",
          body: { name: name.value.trim() } }));
      }
      const { modelVersion } = await api(`/api/v1/models/${encodeURIComponent(model)}/versions`,
        { method: "POST", body: { checkpointUuid: uuid, comment: comment.value } });
      onDone(modelVersion);
    } catch (error) {
      replace(said, error.message);
    }
  } }, choose, name, comment, el("button", { type: "submit", class: "register-submit" },
    "Register"), said);
}

// The models `user` may register a checkpoint to: those not archived they may change, by name.
export async function registrableModels(user) {
  const { models } = await api(`/api/v1/models${query({ sortBy: "SORT_BY_NAME",
    archived: "false" })}`);
  return models.filter((m) => mayChange(user, m.username));
}

// A version's aliases as chips (MLflow's: "production", "champion").
export function aliasChips(names) {
  return names.map((name) => el("span", { class: "chip alias", "data-alias": name }, `@${name}`));
}
