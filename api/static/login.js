// The login form: POST /api/v1/auth/login, keep the token, go back where the user came from.

import { ApiError, api, saveToken } from "/static/api.js";
import { replace } from "/static/dom.js";

// Only a path on this site, never another origin (`//host` or `https://...`).
function nextPage() {
  const next = new URLSearchParams(location.search).get("next") || "/";
  return next.startsWith("/") && !next.startsWith("//") ? next : "/";
}

const form = document.getElementById("login-form");
const error = document.getElementById("login-error");

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  replace(error);
  const fields = new FormData(form);
  try {
    const answer = await api("/api/v1/auth/login", {
      method: "POST",
      body: { username: fields.get("username"), password: fields.get("password"), isHashed: false },
    });
    saveToken(answer.token);
    location.assign(nextPage());
  } catch (failure) {
    replace(error, failure instanceof ApiError ? failure.message : String(failure));
  }
});
