// Interactive tasks: every user's commands, notebooks, shells and TensorBoards, newest first,
// refreshed every two seconds. A ready notebook or TensorBoard opens through the master's proxy
// (which takes the dashboard's cookie); its owner or an admin may kill a task; a task's logs
// are followed as they arrive (GET /api/v1/tasks/{id}/logs?follow=true, NDJSON) until it ends.

import { ApiError, api, every, query, startPage, toLogin, token } from "/static/api.js";
import { SERVICE_PAGES } from "/static/launch.js";
import { LogPanel } from "/static/logs.js";
import { STATES, el, fmtTime, message, replace, shortState, stateBadge, table, workflowLink }
  from "/static/dom.js";

// The kinds as api/routes/ntsc.py serves them; `page`: where a served one opens under its
// serviceAddress (/proxy/<id>/).
const KINDS = [
  { type: "COMMAND", path: "commands", label: "command" },
  { type: "NOTEBOOK", path: "notebooks", label: "notebook", page: SERVICE_PAGES.NOTEBOOK },
  { type: "SHELL", path: "shells", label: "shell" },
  { type: "TENSORBOARD", path: "tensorboards", label: "TensorBoard",
    page: SERVICE_PAGES.TENSORBOARD },
];
const OVER = STATES.task.TERMINATED;
const LISTED = 100;  // the newest of each kind

const main = document.getElementById("main");
const status = el("div", { class: "status" });
const actionStatus = el("div", { class: "status", id: "task-action-status" });
const listBox = el("section", { id: "task-list", class: "panel" });
const logBox = el("section", { id: "task-logs", class: "panel", hidden: true });
const typeSelect = el("select", { id: "type-filter", "aria-label": "type" },
  el("option", { value: "" }, "all types"),
  KINDS.map((k) => el("option", { value: k.type }, `${k.label}s`)));
const textFilter = el("input", { id: "text-filter", type: "search",
  placeholder: "filter by id, description, owner, state", "aria-label": "filter" });
let user = null;
let tasks = [];
let truncated = false;
let drawn = "";
let stopLogs = () => {};
// The task the address names (/tasks#<id>, as the cluster page links): its logs open once listed.
let picked = location.hash.slice(1);
let openPicked = Boolean(picked);

function shortId(id) {
  return id.slice(0, 8);
}

function matches(task, text) {
  if (typeSelect.value && task.kind.type !== typeSelect.value) return false;
  if (!text) return true;
  const haystack = `${task.id} ${task.description} ${task.username} ${shortState(task.state)}`
    .toLowerCase();
  return text.toLowerCase().split(/\s+/).every((word) => haystack.includes(word));
}

// Only a task's owner and admins may kill it or reach it through the proxy (the API says so too).
function mine(task) {
  return Boolean(user && (user.admin || user.id === task.userId));
}

function openLink(task) {
  if (task.kind.page === undefined || task.state !== "STATE_RUNNING" || !task.serviceAddress
    || !mine(task)) {
    return "";
  }
  return el("a", { class: "open-task", href: `${task.serviceAddress}${task.kind.page}`,
    target: "_blank", rel: "noopener" }, "Open");
}

function killButton(task) {
  if (!mine(task) || shortState(task.state) === OVER) return "";
  const name = `${task.kind.label} ${shortId(task.id)}`;
  return el("button", { type: "button", class: "action action-kill", "data-action": "kill",
    onclick: async (event) => {
      if (!confirm(`Kill ${task.kind.label} ${task.id}?`)) return;
      event.target.disabled = true;
      replace(actionStatus, `kill ${name}: sent`);
      try {
        await api(`/api/v1/${task.kind.path}/${task.id}/kill`, { method: "POST" });
        replace(actionStatus, `kill ${name}: accepted`);
        await refresh();
      } catch (error) {
        event.target.disabled = false;
        replace(actionStatus, el("span", { class: "error" }, `kill ${name} failed: ${error.message}`));
      }
    } }, "Kill");
}

function logsButton(task) {
  return el("button", { type: "button", class: "show-logs", onclick: () => showLogs(task) },
    "Logs");
}

function render() {
  const key = JSON.stringify([tasks, typeSelect.value, textFilter.value, picked]);
  if (key === drawn) return;  // unchanged: keep the table (and what the pointer is on)
  drawn = key;
  const shown = tasks.filter((t) => matches(t, textFilter.value.trim()));
  const columns = [
    { label: "Type", cell: (t) => t.kind.label },
    { label: "ID", cell: (t) => el("span", { class: "task-id", title: t.id }, shortId(t.id)) },
    { label: "Description", class: "description", cell: (t) => t.description },
    { label: "Owner", cell: (t) => t.username },
    { label: "State", cell: (t) => stateBadge(t.state) },
    { label: "Resource pool", cell: (t) => t.resourcePool },
    { label: "Started", cell: (t) => fmtTime(t.startTime) },
    { label: "Exit status", cell: (t) => t.exitStatus || "" },
    { label: "", cell: (t) => el("span", { class: "actions" }, openLink(t), killButton(t),
      logsButton(t), workflowLink(t.workflowId)) },
  ];
  replace(listBox, el("h2", {}, `Tasks (${tasks.length})`), shown.length
    ? table(columns, shown, (t) => ({ class: t.id === picked ? "task-row picked" : "task-row",
      "data-id": t.id, "data-type": t.kind.type, "data-state": shortState(t.state) }))
    : message(tasks.length ? "No task matches the filter."
      : "No tasks yet: epochal cmd run, epochal notebook start, epochal shell start, "
        + "epochal tensorboard start (or Determined's det cmd run, ...)."),
  truncated ? message(`Only the newest ${LISTED} tasks of each type are shown.`) : "");
}

async function refresh() {
  const answers = await Promise.all(KINDS.map((kind) => api(`/api/v1/${kind.path}${query({
    limit: LISTED, orderBy: "ORDER_BY_DESC", sortBy: "SORT_BY_START_TIME" })}`)));
  truncated = answers.some((a) => a.pagination.total > LISTED);
  tasks = answers.flatMap((answer, i) => answer[KINDS[i].path].map((t) => ({ ...t,
    kind: KINDS[i] })))
    .sort((a, b) => b.startTime.localeCompare(a.startTime) || a.id.localeCompare(b.id));
  render();
  if (openPicked) {
    openPicked = false;
    const task = tasks.find((t) => t.id === picked);
    if (task) showLogs(task);
  }
}

// Reads NDJSON lines from `response` into `panel` until the stream ends.
async function readLines(response, panel) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let pending = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    const lines = (pending + value).split("\n");
    pending = lines.pop();
    for (const line of lines) if (line.trim()) panel.add(JSON.parse(line).result);
  }
}

async function showLogs(task) {
  stopLogs();
  const following = new AbortController();
  stopLogs = () => following.abort();
  picked = task.id;
  history.replaceState(null, "", `#${task.id}`);
  render();
  const panel = new LogPanel({ name: `${task.kind.path.replace(/s$/, "")}-${task.id}` });
  const logStatus = el("div", { class: "status", id: "task-log-status" }, "following");
  replace(logBox, el("h2", {}, `Logs of ${task.kind.label} ${task.id}`),
    el("p", { class: "summary" }, task.description), logStatus, panel.element);
  logBox.hidden = false;
  try {
    const response = await fetch(`/api/v1/tasks/${encodeURIComponent(task.id)}/logs?follow=true`,
      { headers: { Authorization: `Bearer ${token()}` }, signal: following.signal });
    if (response.status === 401) {
      toLogin();
      return;
    }
    if (!response.ok) {
      throw new ApiError(response.status, await response.json().catch(() => null));
    }
    await readLines(response, panel);
    replace(logStatus, `the ${task.kind.label} has ended: these are all its lines`);
  } catch (error) {
    if (error.name === "AbortError") return;
    replace(logStatus, el("span", { class: "error" }, `logs: ${error.message || error}`));
  }
}

typeSelect.addEventListener("change", render);
textFilter.addEventListener("input", render);
replace(main, el("h1", {}, "Tasks"), el("div", { class: "filters" }, typeSelect, textFilter),
  status, actionStatus, listBox, logBox);
startPage().then((me) => {
  user = me;
  if (user) every(2, refresh, status);
});
