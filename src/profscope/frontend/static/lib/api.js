// Fetching JSON from the server. Every refusal has one shape, the server's
// { ok: false, status, error, file }: ApiError carries it (as .body), whatever went wrong
// (a 4xx/5xx answer, a body that is not JSON, no answer at all). A slow request shows the
// server's progress board (/api/progress) under the top bar.
import { $, el } from "./dom.js";

export class ApiError extends Error {
  constructor(status, body = {}) {
    super(body.error || `HTTP ${status}`);
    this.status = status;
    this.body = { ok: false, status, error: this.message, file: body.file ?? null };
  }
}

export async function getJson(url) {
  const res = await withProgress(fetch(url));
  const text = await res.text();
  let body;
  try { body = JSON.parse(text); } catch { body = { error: text || res.statusText }; }
  if (!res.ok) throw new ApiError(res.status, body);
  return body;
}

// Pages re-render on every state change (a hover selection, a filter); this keeps their
// last few payloads so those changes do not refetch. A failed request is dropped so the
// next render retries. `get` fetches and decodes (lib/columns.js getColumns: a binary answer).
const jsonCache = new Map();
export function cachedJson(url, keep = 8, get = getJson) {
  if (!jsonCache.has(url)) {
    const promise = get(url);
    promise.catch(() => jsonCache.delete(url));
    jsonCache.set(url, promise);
    while (jsonCache.size > keep) jsonCache.delete(jsonCache.keys().next().value);
  }
  return jsonCache.get(url);
}

// Show the server's progress board while a request is slow (after 300 ms, polled twice a second).
let pending = 0;
export async function withProgress(promise) {
  pending++;
  const box = $("#progress");
  let done = false;
  let timer = setTimeout(async function poll() {
    if (done || !box) return;
    box.hidden = false;
    try {
      const { jobs } = await (await fetch("/api/progress")).json();
      if (done) return; // the request finished while this poll was in flight
      const job = jobs[0];
      box.querySelector(".label").textContent = job ? `${job.label}${job.message ? ": " + job.message : ""} (${job.elapsedSeconds}s)` : "working…";
      box.querySelector(".bar").style.setProperty("--p", `${Math.round(100 * (job ? job.fraction : 0))}%`);
    } catch { /* the poll is best effort */ }
    if (!done) timer = setTimeout(poll, 500);
  }, 300);
  try { return await promise; } finally {
    done = true;
    clearTimeout(timer);
    if (--pending === 0 && box) box.hidden = true;
  }
}

// A refusal as the pages show it: what failed, the server's message, the file it names.
export function errorBox(err, what) {
  const body = err.body || {};
  return el("div", { class: "error", role: "alert" },
    el("strong", {}, `${what}: `), err.message,
    body.file ? el("div", {}, "file: ", el("code", {}, body.file)) : null,
    err.status ? el("div", { class: "muted" }, `HTTP ${err.status}`) : null);
}
