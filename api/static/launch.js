// "Open TensorBoard" and "Open notebook" for an experiment or a trial: launched through the API
// the CLI uses (POST /api/v1/tensorboards, /api/v1/notebooks) as the viewing user, and opened
// through the master's proxy (as the Tasks page opens them) in a new tab once ready. A
// TensorBoard of the same experiments and trials the user already has running is reused.

import { api, query } from "/static/api.js";
import { STATES, el, replace, shortState } from "/static/dom.js";

// Where a served task opens under its serviceAddress (/proxy/<id>/), by type (as
// api/routes/dashboard.py's INTERACTIVE_PAGES, by Determined's service name).
export const SERVICE_PAGES = { NOTEBOOK: "lab", TENSORBOARD: "" };
const READY_POLL_MS = 1000;
const READY_TIMEOUT_MS = 10 * 60 * 1000;
const OVER = [STATES.task.TERMINATING, STATES.task.TERMINATED];

const sameIds = (a, b) => JSON.stringify([...a].sort()) === JSON.stringify([...b].sort());

// The user's own TensorBoard of exactly these experiments and trials that is not ending.
async function runningTensorBoard(user, experimentIds, trialIds) {
  const { tensorboards } = await api(`/api/v1/tensorboards${query({ userIds: [user.id],
    orderBy: "ORDER_BY_DESC", limit: 100 })}`);
  return tensorboards.find((t) => t.userId === user.id && !OVER.includes(shortState(t.state))
    && sameIds(t.experimentIds, experimentIds) && sameIds(t.trialIds, trialIds)) || null;
}

// Waits until the task's service is ready (it posts /tasks/{id}/ready), or says why not.
async function ready(taskId) {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline) {
    const { task } = await api(`/api/v1/tasks/${taskId}`);
    if (task.endTime) throw new Error(`it ended before it was ready (task ${taskId})`);
    if (task.allocations.length && task.allocations[0].isReady) return;
    await new Promise((resolve) => setTimeout(resolve, READY_POLL_MS));
  }
  throw new Error(`not ready after ${READY_TIMEOUT_MS / 60000} minutes (task ${taskId})`);
}

// A tab opened at the click (a tab opened later, after awaits, is a blocked pop-up), which
// says "starting..." until the task is ready and is then sent to it.
function blankTab(label) {
  const tab = window.open("", "_blank");
  if (tab) {
    tab.document.title = `${label}: starting...`;
    tab.document.body.textContent = `${label} is starting...`;
  }
  return tab;
}

// A button that launches (or reuses) a task with `start()` -> its item {id, serviceAddress},
// then opens `page` under its address; its progress and errors are shown in `status`, beside it.
function launchButton({ id, label, page, start }) {
  const status = el("span", { class: "status launch-status", id: `${id}-status`,
    role: "status" });
  const button = el("button", { type: "button", id, class: "action launch", onclick: async () => {
    button.disabled = true;
    const tab = blankTab(label);
    replace(status, "starting...");
    try {
      const task = await start();
      status.dataset.task = task.id;
      await ready(task.id);
      const address = `${task.serviceAddress}${page}`;
      if (tab) {
        tab.opener = null;
        tab.location.href = address;
      }
      replace(status, el("a", { href: address, target: "_blank", rel: "noopener",
        class: "launch-open" }, `${label} ready: open`));
    } catch (error) {
      if (tab) tab.close();
      replace(status, el("span", { class: "error" }, `${label} failed: ${error.message}`));
    } finally {
      button.disabled = false;
    }
  } }, `Open ${label}`);
  return el("span", { class: "launch-control" }, button, " ", status);
}

// experimentIds/trialIds: what the TensorBoard shows.
export function tensorBoardButton(user, { experimentIds = [], trialIds = [] }) {
  return launchButton({ id: "open-tensorboard", label: "TensorBoard", page: SERVICE_PAGES.TENSORBOARD,
    start: async () => {
      const running = await runningTensorBoard(user, experimentIds, trialIds);
      if (running) return running;
      const { tensorboard } = await api("/api/v1/tensorboards", { method: "POST",
        body: { experimentIds, trialIds } });
      return tensorboard;
    } });
}

// A JupyterLab in the experiment's workspace with its environment's image, as
// Determined's "Launch JupyterLab" from an experiment.
export function notebookButton(experiment, config) {
  // Only the image: the config as shown hides its secret variables' values.
  const image = config.environment?.image;
  return launchButton({ id: "open-notebook", label: "notebook", page: SERVICE_PAGES.NOTEBOOK,
    start: async () => {
      const { notebook } = await api("/api/v1/notebooks", { method: "POST",
        body: { workspaceId: experiment.workspaceId, config: {
          description: `JupyterLab (experiment ${experiment.id})`,
          ...(image ? { environment: { image } } : {}) } } });
      return notebook;
    } });
}
