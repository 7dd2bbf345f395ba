// The operator page: reads api/status every 2 s and renders it with textContent only (names
// come from upstreams and tags: never parsed as HTML). Buttons POST JSON to api/invalidate
// and api/refresh; the session cookie (HttpOnly, SameSite=Strict) authenticates them.
"use strict";

const REFRESH_MS = 2000;

function cell(row, text, className) {
  const td = row.insertCell();
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function button(td, label, title, action, body, className) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  b.title = title;
  if (className) b.className = className;
  b.dataset.action = action;
  b.dataset.body = JSON.stringify(body);
  td.appendChild(b);
}

function actions(td, selector) {
  button(td, "Refresh", "refresh now, in the background", "refresh", selector);
  button(td, "Purge", "soft purge: refreshed on the next request, still the outage fallback",
         "invalidate", Object.assign({ soft: true }, selector));
  button(td, "Forget", "hard purge: deleted; an outage then fails",
         "invalidate", Object.assign({ soft: false }, selector), "hard");
}

function ago(at) {
  const seconds = Math.max(0, Math.round(Date.now() / 1000 - at));
  return seconds < 120 ? `${seconds} s ago` : `${Math.round(seconds / 60)} min ago`;
}

function render(status) {
  const upstreams = document.querySelector("#upstreams tbody");
  upstreams.replaceChildren();
  const names = Object.keys(status.upstreams);
  document.getElementById("no-upstreams").hidden = names.length > 0;
  for (const name of names) {
    const u = status.upstreams[name];
    const row = upstreams.insertRow();
    row.dataset.upstream = name;
    cell(row, name);
    cell(row, u.breaker, u.breaker);
    cell(row, u.last_failure ? `${u.last_failure.code}, ${ago(u.last_failure.at)}` : "none");
    cell(row, String(u.failures), "num");
    cell(row, String(u.stale_serves_last_minute), "num");
    cell(row, String(u.stale_serves), "num");
    actions(row.insertCell(), { upstream: name });
  }
  const surfaces = document.querySelector("#surfaces tbody");
  surfaces.replaceChildren();
  const names2 = Object.keys(status.surfaces);
  for (const name of names2) {
    const s = status.surfaces[name];
    const row = surfaces.insertRow();
    row.dataset.surface = name;
    cell(row, name);
    cell(row, String(s.entries), "num entries");
    for (const at of ["p50", "p90", "max"]) {
      cell(row, s.age_seconds ? `${s.age_seconds[at]} s` : "–", "num");
    }
    actions(row.insertCell(), { surface: name });
  }
  document.getElementById("updated").textContent =
    `updated ${new Date().toLocaleTimeString()}`;
}

async function poll() {
  try {
    const response = await fetch("api/status", { credentials: "same-origin" });
    if (response.status === 401) {
      window.location.reload(); // signed out (expired, or the token changed)
      return;
    }
    render(await response.json());
  } catch (error) {
    document.getElementById("updated").textContent = "status unavailable, retrying";
  }
}

async function act(event) {
  const target = event.target.closest("button[data-action]");
  if (!target) return;
  const outcome = document.getElementById("outcome");
  const response = await fetch(`api/${target.dataset.action}`, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json" },
    body: target.dataset.body,
  });
  const answer = await response.json();
  outcome.className = response.ok ? "" : "failed";
  outcome.textContent = response.ok
    ? ("invalidated" in answer
        ? `${answer.invalidated} entries invalidated`
        : `${answer.refreshing} refreshes started`)
    : `failed: ${answer.error}`;
  poll();
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelector("main").addEventListener("click", act);
  poll();
  setInterval(poll, REFRESH_MS);
});
