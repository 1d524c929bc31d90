// Talking to the master: the session token, JSON calls, Server-Sent Events, and the page header.
//
// The token lives in localStorage (sent as `Authorization: Bearer`) and in the `auth` cookie,
// which the master accepts for GET only: that is how EventSource, which cannot send headers,
// is authenticated. Any 401 sends the user to /login and back here afterwards.

import { el, replace } from "/static/dom.js";

const TOKEN_KEY = "epochal.token";
const COOKIE_MAX_AGE = 7 * 24 * 3600;

export function token() {
  return localStorage.getItem(TOKEN_KEY);
}

export function saveToken(value) {
  localStorage.setItem(TOKEN_KEY, value);
  document.cookie = `auth=${encodeURIComponent(value)}; path=/; max-age=${COOKIE_MAX_AGE}; SameSite=Strict`;
}

export function forgetToken() {
  localStorage.removeItem(TOKEN_KEY);
  document.cookie = "auth=; path=/; max-age=0; SameSite=Strict";
}

// Set once the page is on its way to /login: a 401 answered after that (a poll sent with the
// token that "Log out" has just revoked) must not turn the way out into "/login?next=here".
let leaving = false;

export function toLogin() {
  if (leaving) return;
  leaving = true;
  forgetToken();
  const here = location.pathname + location.search;
  location.assign(`/login?next=${encodeURIComponent(here)}`);
}

export class ApiError extends Error {
  constructor(status, body) {
    const details = (body && body.details) || [];
    super([body && body.message, ...details].filter(Boolean).join(": ") || `HTTP ${status}`);
    this.status = status;
  }
}

// While the master does not answer, a banner says so and the page's actions are disabled (CSS
// on body[data-offline]); the next answer takes both away, if its request was sent after the
// failure (an answer to an older request, late, says nothing about the master now).
let offlineSince = null;
let requestsSent = 0;
let offlineAfterRequest = 0;

function masterAnswered(answered, request) {
  if (answered === (offlineSince === null)) return;
  if (answered && request <= offlineAfterRequest) return;
  offlineSince = answered ? null : new Date();
  if (!answered) offlineAfterRequest = requestsSent;
  const banner = document.getElementById("offline-banner");
  if (answered) {
    delete document.body.dataset.offline;
    if (banner) banner.remove();
    return;
  }
  document.body.dataset.offline = "true";
  document.body.prepend(el("div", { id: "offline-banner", class: "offline-banner", role: "alert" },
    `The master is not answering (since ${offlineSince.toLocaleTimeString()}): what this page `
    + "shows may be out of date, and its actions wait until it answers again."));
}

export async function api(path, { method = "GET", body } = {}) {
  const headers = { Accept: "application/json" };
  const saved = token();
  if (saved) headers.Authorization = `Bearer ${saved}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const request = ++requestsSent;
  let response;
  try {
    response = await fetch(path, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (error) {  // no answer at all: the master (or the network to it) is down
    masterAnswered(false, request);
    throw new ApiError(0, { message: `the master did not answer: ${error.message}` });
  }
  masterAnswered(response.status !== 502 && response.status !== 504, request);  // a proxy's word
  if (response.status === 401 && path !== "/api/v1/auth/login") {
    toLogin();
    throw new ApiError(401, { message: "not logged in" });
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : {};
  } catch {
    data = { message: text };
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

// A MetricReport's values (Determined's form wraps them in `avgMetrics`).
export function reportValues(report) {
  const values = (report && report.metrics) || {};
  return values.avgMetrics && typeof values.avgMetrics === "object" ? values.avgMetrics : values;
}

export function query(params) {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value === null || value === undefined || value === "") continue;
    for (const item of Array.isArray(value) ? value : [value]) search.append(key, String(item));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}

// Follow an SSE stream: `handlers` maps event names to functions of the parsed data. The stream
// is closed on its `end` event; if it cannot be opened or breaks for good, `onFail` runs (pages
// fall back to polling). Returns a function that closes it.
export function follow(path, handlers, onFail = () => {}) {
  const source = new EventSource(path);
  let open = true;
  const close = () => {
    open = false;
    source.close();
  };
  for (const [name, handler] of Object.entries(handlers)) {
    source.addEventListener(name, (event) => handler(JSON.parse(event.data)));
  }
  source.addEventListener("end", close);
  source.addEventListener("error", () => {
    // EventSource reconnects by itself after a dropped connection; CLOSED means it gave up.
    if (open && source.readyState === EventSource.CLOSED) {
      open = false;
      onFail();
    }
  });
  return close;
}

// Run `task` now and every `seconds` while the page is open; errors show in `status`.
export function every(seconds, task, status) {
  let timer = null;
  let stopped = false;
  const run = async () => {
    try {
      await task();
      if (status) replace(status);
    } catch (error) {
      if (status) replace(status, el("span", { class: "error" }, String(error.message || error)));
    }
    if (!stopped) timer = setTimeout(run, seconds * 1000);
  };
  run();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

// The last lines a trial logged at ERROR or above (else its last lines), oldest first: what a
// page shows of why the trial failed.
export async function lastErrorLines(trialId, count = 12) {
  const response = await fetch(`/api/v1/trials/${trialId}/logs?limit=200&orderBy=ORDER_BY_DESC`,
    { headers: { Authorization: `Bearer ${token()}` } });
  const lines = (await response.text()).split("\n").filter((l) => l.trim())
    .map((l) => JSON.parse(l).result).reverse();
  const errors = lines.filter((l) => ["LOG_LEVEL_ERROR", "LOG_LEVEL_CRITICAL"].includes(l.level));
  return (errors.length ? errors : lines).slice(-count).map((l) => l.log.replace(/\n$/, ""));
}

// The header every page but /login shares: who is logged in, and a way out.
export async function startPage() {
  if (!token()) {
    toLogin();
    return null;
  }
  document.getElementById("logout").addEventListener("click", async (event) => {
    event.preventDefault();
    leaving = true;
    try {
      await api("/api/v1/auth/logout", { method: "POST" });
    } finally {
      forgetToken();
      location.assign("/login");
    }
  });
  const { user } = await api("/api/v1/me");
  replace(document.getElementById("whoami"), user.displayName || user.username);
  return user;
}
