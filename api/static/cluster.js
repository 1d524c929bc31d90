// The cluster: agents and their slots (GET /api/v1/agents) and the job queue in the scheduler's
// order (GET /api/v1/job-queues: experiments and interactive tasks, each task linked to its row
// on the Tasks page, and what a waiting job waits for), refreshed every two seconds. For admins
// (who alone may read the allocation history), slot-hours per user and per workspace for each of
// the last 7 UTC days (GET /api/v1/resources/allocation/aggregated), refreshed every minute.
//
// A queued experiment's job is moved as in Determined's web UI (POST /api/v1/job-queues): one
// place up or down among its pool's queued experiments (aheadOf the one before it, behindOf the
// one after it), or to another pool (resourcePool; the pools from GET /api/v1/resource-pools,
// read every 30 s). What a move did, or the master's reason for refusing it, shows above the
// queue, which is then read again.

import { api, every, startPage } from "/static/api.js";
import { STATES, el, fmtTime, message, replace, shortState, table } from "/static/dom.js";

const main = document.getElementById("main");
const status = el("div", { class: "status" });
const agentBox = el("section", { id: "agents", class: "panel" });
const slotBox = el("section", { id: "slots", class: "panel" });
const queueTitle = el("h2", {}, "Job queue");
const queueStatus = el("div", { id: "queue-status", class: "status", role: "status" });
const queueTable = el("div", { id: "queue-jobs" });
const queueBox = el("section", { id: "queue", class: "panel" }, queueTitle, queueStatus,
  queueTable);
const usageBox = el("section", { id: "usage", class: "panel" });
const USAGE_DAYS = 7;
const POOLS_EVERY_MS = 30000;
let poolNames = [];
let poolsRead = 0;

function yesNo(value, yes, no) {
  return el("span", { class: value ? "ok" : "bad" }, value ? yes : no);
}

// A trial's slot names the trial and its experiment; an interactive task's (allocation
// `<taskId>.1`) the task's kind and id, its description in the link's title.
function heldBy(slot) {
  if (!slot.allocationId) return "free";
  if (slot.trialId) {
    return el("a", { href: `/trials/${slot.trialId}` },
      slot.taskName || `Trial ${slot.trialId} (Experiment ${slot.experimentId})`);
  }
  const taskId = slot.taskId || slot.allocationId.replace(/\.\d+$/, "");
  const kind = (slot.taskType || "TASK_TYPE_TASK").replace(/^TASK_TYPE_/, "").toLowerCase();
  return el("a", { href: `/tasks#${taskId}`, title: slot.taskName || "" },
    `${kind} ${taskId.slice(0, 8)}`);
}

function renderAgents(agents) {
  const columns = [
    { label: "Agent", cell: (a) => a.id },
    { label: "Pool", cell: (a) => a.resourcePool },
    { label: "Alive", cell: (a) => yesNo(a.alive, "alive", "lost") },
    { label: "Enabled", cell: (a) => yesNo(a.enabled, "enabled", "draining") },
    { label: "Slots used", class: "num",
      cell: (a) => `${a.usedSlots} / ${Object.keys(a.slots || {}).length}` },
    { label: "Registered", cell: (a) => fmtTime(a.registeredTime) },
    { label: "Last seen", cell: (a) => fmtTime(a.lastSeen) },
    { label: "Version", cell: (a) => a.version || "" },
  ];
  replace(agentBox, el("h2", {}, `Agents (${agents.length})`), agents.length
    ? table(columns, agents, (a) => ({ class: "agent-row", "data-agent-id": a.id }))
    : message("No agent has registered: start one with `epochal agent run`."));
  const slots = agents.flatMap((a) => Object.values(a.slots || {}).map((s) => ({ agent: a, ...s })));
  const slotColumns = [
    { label: "Agent", cell: (s) => s.agent.id },
    { label: "Slot", cell: (s) => s.id },
    { label: "Type", cell: (s) => (s.type || "").replace(/^TYPE_/, "") },
    { label: "Device", cell: (s) => (s.device ? s.device.brand || s.device.uuid || "" : "") },
    { label: "Enabled", cell: (s) => yesNo(s.enabled, "yes", "no") },
    { label: "In use by", cell: heldBy },
  ];
  replace(slotBox, el("h2", {}, `Slots (${slots.length})`),
    table(slotColumns, slots, (s) => ({ class: "slot-row", "data-busy": Boolean(s.allocationId) })));
}

let queueJobs = [];
let drawnQueue = "";
// Jobs whose move is sent and not yet answered: their controls stay disabled.
const moving = new Set();

// Send one move of `job` (`update`: aheadOf, behindOf or resourcePool), say what came of it
// (`what`: the move in words), and read the queue again.
async function moveJob(job, update, what) {
  moving.add(job.jobId);
  drawnQueue = "";
  renderQueue(queueJobs);
  replace(queueStatus, `${job.jobId} ${what}: sent`);
  try {
    await api("/api/v1/job-queues", { method: "POST",
      body: { updates: [{ jobId: job.jobId, ...update }] } });
    replace(queueStatus, `${job.jobId} ${what}: moved`);
  } catch (error) {
    replace(queueStatus, el("span", { class: "error" },
      `${job.jobId} ${what}: refused: ${error.message}`));
  }
  moving.delete(job.jobId);
  drawnQueue = "";
  await refresh().catch((error) => replace(status,
    el("span", { class: "error" }, String(error.message || error))));
}

// A queued experiment's controls: up and down past its neighbours among its pool's queued
// experiments (disabled at either end), and a pool to move it to, where there is another.
function moveControls(job, before, after) {
  const busy = moving.has(job.jobId);
  const step = (way, anchor, field, words) => {
    const what = `${way}${anchor ? `, ${words} ${anchor.jobId}` : ""}`;
    return el("button", { type: "button", class: `move-${way}`, disabled: busy || !anchor,
      "aria-label": `move ${job.jobId} ${what}`, title: anchor ? `move ${what}`
        : `the ${way === "up" ? "first" : "last"} queued experiment of pool ${job.resourcePool}`,
      onclick: () => moveJob(job, { [field]: anchor.jobId }, what) }, way === "up" ? "↑" : "↓");
  };
  const up = step("up", before, "aheadOf", "ahead of");
  const down = step("down", after, "behindOf", "behind");
  const names = [...new Set([job.resourcePool, ...poolNames])].sort();
  if (names.length < 2) return el("span", { class: "queue-actions" }, up, down);
  const pool = el("select", { class: "move-pool", disabled: busy,
    "aria-label": `resource pool to move ${job.jobId} to` },
  names.map((name) => el("option", { value: name, selected: name === job.resourcePool }, name)));
  const go = el("button", { type: "button", class: "move-to-pool", disabled: true,
    "aria-label": `move ${job.jobId} to the chosen pool`,
    onclick: () => moveJob(job, { resourcePool: pool.value }, `to pool ${pool.value}`) },
  "Move");
  pool.addEventListener("change", () => { go.disabled = pool.value === job.resourcePool; });
  return el("span", { class: "queue-actions" }, up, down, pool, go);
}

// Redrawn only when what it shows changes (tasks.js does the same), so a live update does not
// take a control from under the pointer or close an open pool list.
function renderQueue(jobs) {
  queueJobs = jobs;
  const key = JSON.stringify([jobs, poolNames, [...moving]]);
  if (key === drawnQueue) return;
  drawnQueue = key;
  const queued = jobs.filter((j) => j.type === "TYPE_EXPERIMENT"
    && shortState(j.summary.state) === STATES.job.QUEUED);
  const controls = (j) => {
    const pool = queued.filter((q) => q.resourcePool === j.resourcePool);
    const at = pool.indexOf(j);
    return at < 0 ? "" : moveControls(j, pool[at - 1], pool[at + 1]);
  };
  const columns = [
    { label: "Job", cell: (j) => (j.type === "TYPE_EXPERIMENT"
      ? el("a", { href: `/experiments/${j.entityId}` }, j.jobId)
      : el("a", { href: `/tasks#${j.entityId}` },
        `${j.type.replace(/^TYPE_/, "").toLowerCase()} ${j.entityId.slice(0, 8)}`)) },
    { label: "Pool", class: "pool", cell: (j) => j.resourcePool },
    { label: "Priority", class: "num", cell: (j) => j.priority },
    { label: "State", cell: (j) => shortState(j.summary.state) },
    { label: "Jobs ahead", class: "num", cell: (j) => j.summary.jobsAhead },
    // requestedSlots counts the slots a job needs, those it holds among them (Determined's).
    { label: "Slots (allocated / requested)", class: "num slots",
      cell: (j) => `${j.allocatedSlots} / ${j.requestedSlots}` },
    // An interactive task has no trials (null counts): the cell stays empty.
    { label: "Trials (running / queued)", class: "num trials",
      cell: (j) => (j.runningTrials == null ? "" : `${j.runningTrials} / ${j.queuedTrials}`) },
    { label: "Waits for", class: "waits-for", cell: (j) => j.waiting || "" },
    { label: "Move", class: "move", cell: controls },
  ];
  replace(queueTitle, `Job queue (${jobs.length})`);
  replace(queueTable, jobs.length
    ? table(columns, jobs, (j) => ({ class: "job-row", "data-job-id": j.jobId,
      "data-pool": j.resourcePool, "data-state": shortState(j.summary.state) }))
    : message("Nothing is queued or running."));
}

function utcDay(offsetDays) {
  return new Date(Date.now() + offsetDays * 86400000).toISOString().slice(0, 10);
}

function slotHours(seconds) {
  return seconds ? (seconds / 3600).toFixed(2) : "0";
}

// One row per key (a user, a workspace) of `field`, a column per day and the week's total, the
// biggest users first.
function usageTable(entries, field, label) {
  const totals = {};
  for (const entry of entries) {
    for (const [key, seconds] of Object.entries(entry[field] || {})) {
      totals[key] = (totals[key] || 0) + seconds;
    }
  }
  const keys = Object.keys(totals).sort((a, b) => totals[b] - totals[a] || a.localeCompare(b));
  const columns = [
    { label, cell: (key) => key || "(none)" },
    ...entries.map((entry) => ({ label: entry.periodStart.slice(5), class: "num",
      cell: (key) => slotHours((entry[field] || {})[key]) })),
    { label: "Total", class: "num total", cell: (key) => slotHours(totals[key]) },
  ];
  return keys.length
    ? table(columns, keys, (key) => ({ class: "usage-row", "data-key": key }))
    : message("No slots were used.");
}

function renderUsage({ resourceEntries }) {
  const total = resourceEntries.reduce((sum, entry) => sum + entry.seconds, 0);
  replace(usageBox,
    el("h2", {}, `Usage, last ${USAGE_DAYS} days (slot-hours, UTC days): ${slotHours(total)}`),
    el("h3", {}, "By user"), el("div", { id: "usage-users" },
      usageTable(resourceEntries, "byUsername", "User")),
    el("h3", {}, "By workspace"), el("div", { id: "usage-workspaces" },
      usageTable(resourceEntries, "byWorkspace", "Workspace")));
}

async function refreshUsage() {
  const params = new URLSearchParams({
    startDate: utcDay(1 - USAGE_DAYS), endDate: utcDay(0),
    period: "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY",
  });
  renderUsage(await api(`/api/v1/resources/allocation/aggregated?${params}`));
}

async function refresh() {
  const poolsDue = Date.now() - poolsRead >= POOLS_EVERY_MS;
  const [{ agents }, { jobs }, pools] = await Promise.all([api("/api/v1/agents"),
    api("/api/v1/job-queues"), poolsDue ? api("/api/v1/resource-pools") : null]);
  if (pools) {
    poolNames = pools.resourcePools.map((p) => p.name);
    poolsRead = Date.now();
  }
  renderAgents(agents);
  renderQueue(jobs);
}

replace(main, el("h1", {}, "Cluster"), status, agentBox, slotBox, queueBox);
startPage().then((user) => {
  if (!user) return;
  every(2, refresh, status);
  if (user.admin) {
    const usageStatus = el("div", { class: "status" });
    main.append(usageBox, usageStatus);
    every(60, refreshUsage, usageStatus);
  }
});
