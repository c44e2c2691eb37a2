// The "Converting hosts: 5/16" panel under the top bar: a multi-host run's trace
// indexes being built on the server's Dask cluster (--dask-workers / --dask), each host's
// state and progress as its worker reported it (GET /api/convert?run=, app/scale_out.py).
// Polled twice a second while something is pending, every 3 s while some host is not
// submitted yet (another user or tab may open its timeline), not at all once every host
// is done; a server without Dask answers 404 once and the panel stays hidden from then on.
import { $, el, fill } from "./dom.js";

const POLL_MS = 500; // the workers report at most 4 times a second
const IDLE_POLL_MS = 3000;
const OPEN_UP_TO = 32; // more hosts than this: the per-host list starts folded
let noDask = false;
let watch = null; // { run, timer, submitted, shown, done }

// The run's conversions; null when there is nothing to show (no Dask, a refusal). A
// network failure throws (the caller tries again).
async function fetchJson(url, options) {
  // plain fetch, not api.js getJson: a poll must not bring up the slow-request bar
  const res = await fetch(url, options);
  const body = await res.json().catch(() => ({}));
  if (res.status === 404 && (body.error || "").includes("without Dask")) noDask = true;
  return res.ok ? body : null;
}

function stop() {
  if (watch && watch.timer) clearTimeout(watch.timer);
  watch = null;
}

// Called by the shell on every render: the trace viewer submits the run (the viewed host
// first, as opening its timeline would), every other page only looks.
export function showConversions(state, details) {
  const box = $("#conversions");
  if (!box || noDask || !details.hosts || details.hosts.length < 2) {
    stop();
    if (box) box.hidden = true;
    return;
  }
  const timeline = (state.tool || "").replace(/@$/, "") === "trace_viewer";
  if (watch && watch.run === state.run && (watch.submitted || !timeline)) return; // already watching
  const keep = watch && watch.run === state.run ? watch.shown : false;
  if (!keep) box.hidden = true; // another run's panel
  stop();
  const me = { run: state.run, timer: null, submitted: timeline, shown: keep, done: null };
  watch = me;
  const q = new URLSearchParams({ run: state.run });
  if (timeline) q.set("host", state.host || details.hosts[0]);
  const poll = async (first) => {
    let body, failed = false;
    try {
      body = await fetchJson(`/api/convert?${q}`, first && timeline ? { method: "POST" } : undefined);
      // a refused POST (a host this server cannot read: 403) still submitted the others
      if (!body && first && timeline && !noDask) body = await fetchJson(`/api/convert?${new URLSearchParams({ run: me.run })}`);
    } catch { failed = true; /* no answer: try again below */ }
    if (watch !== me) return; // the user moved to another run meanwhile
    if (noDask || (!body && !failed)) { if (!me.shown) box.hidden = true; if (watch === me) watch.timer = null; return; }
    const busy = failed || body.hosts.some((h) => h.state === "pending" || h.state === "processing");
    // shown once something converts while this page looks (between two polls, too)
    const changed = body && me.done !== null && body.done !== me.done;
    if (body && (busy || changed || me.shown)) { me.shown = true; draw(box, body); }
    if (body) me.done = body.done;
    const idle = body && body.hosts.some((h) => h.state === "not submitted");
    me.timer = busy ? setTimeout(() => poll(false), POLL_MS) : idle ? setTimeout(() => poll(false), IDLE_POLL_MS) : null;
  };
  poll(true);
}

function pct(f) { return `${Math.round(100 * (f || 0))}%`; }

function hostText(h) {
  if (h.state === "done") return h.seconds != null ? `done ${h.seconds.toFixed(1)} s${h.pid ? ` · pid ${h.pid}` : ""}` : "done";
  if (h.state === "processing") return `${pct(h.fraction)}${h.stage ? ` · ${h.stage}` : ""}`;
  if (h.state === "error") return `error: ${h.error || "failed"}`;
  return h.state; // pending, not submitted
}

function draw(box, body) {
  const errors = body.hosts.filter((h) => h.state === "error").length;
  const finished = body.done + errors === body.total;
  box.hidden = false;
  box.dataset.done = body.done;
  box.dataset.total = body.total;
  box.dataset.state = finished ? (errors ? "failed" : "done") : "converting";
  const list = box.querySelector(".cv-hosts") || el("ul", { class: "cv-hosts" });
  fill(list, body.hosts.map((h) => el("li", {
    class: "cv-host", "data-host": h.host, "data-state": h.state, title: h.error || h.stage || h.state,
  },
  el("span", { class: "cv-name" }, h.host),
  el("span", { class: "cv-bar", style: `--p: ${h.state === "done" ? "100%" : pct(h.fraction)}` }),
  el("span", { class: "cv-state" }, hostText(h)))));
  let folder = box.querySelector("details");
  if (!folder) {
    folder = el("details", {}, el("summary", {}, "hosts"), list);
    folder.open = body.total <= OPEN_UP_TO;
  }
  const head = el("div", { class: "cv-head" },
    el("strong", { class: "cv-count" }, `${finished ? "Converted" : "Converting"} hosts: ${body.done}/${body.total}`),
    errors ? el("span", { class: "cv-errors" }, ` · ${errors} failed`) : null,
    el("span", { class: "cv-bar cv-total", style: `--p: ${pct(body.done / Math.max(body.total, 1))}` }),
    el("span", { class: "muted" }, "trace indexes on the Dask cluster"));
  fill(box, head, folder);
}
