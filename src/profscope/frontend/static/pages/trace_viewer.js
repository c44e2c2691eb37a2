// Trace viewer page: what ran when, on a canvas timeline streamed in windows.
// Data: profscope's own trace API (docs/trace_viewer.md), all times in ms relative to the
// trace origin:
//  - /api/trace/window?start_ms=&end_ms=&resolution= : the slices overlapping the window,
//    at most about one per pixel per (track, depth) plus every longer one; every track of
//    the selected hosts; counters decimated to the resolution; steps;
//  - /api/trace/event?id= : one slice with all its args (and the HLO module's name);
//  - /api/trace/search?q= : matches across the whole trace;
//  - /api/trace/export : Chrome-trace JSON downloads.
// Drawing: one 2D canvas, slices filled as one path per palette colour (no DOM per slice),
// so 50k visible slices cost a few dozen fill() calls. Every zoom or pan redraws at once
// from the data in hand and refetches only the visible window at the canvas's pixel
// width, debounced; a response that is no longer the newest request is dropped.
// URL keys: start_ms, end_ms (replaceState while interacting), ev (the selected slice,
// pushState), q (search), hosts (several hosts merged), flows (absent: the selected slice's arrows only,
// "all": every arrow in the window, "0": none; old links' "0" keeps hiding them).
import { el } from "../lib/dom.js";
import { go, readState, setUrl as writeUrl, stateUrl } from "../lib/state.js";
import { cachedJson, errorBox, getJson } from "../lib/api.js";
import { getColumns } from "../lib/columns.js";
import { fmtBytes, fmtDur, fmtTick as fmtIn, fmtTime, hostParts, timeUnit as unitFor } from "../lib/format.js";
import { P, SLICE_COLORS as PALETTE } from "../lib/colors.js";
import { makeSummary } from "./trace_viewer_summary.js";
import { hostsOverview, showsHosts } from "./trace_viewer_hosts.js";
import { counterCard, eventLinks } from "./trace_viewer_links.js";

const GUTTER = 230; // px: track names on the left
const RULER_H = 38; // px: time ruler (ticks, labels, step bands) on top
const ROW_H = 17; // px per slice depth
const TRACK_PAD = 3; // px above and below a track's slices
const PROC_H = 22; // px: process header row
const COUNTER_H = 56; // px: counter track
const SAMPLE_DOTS_MAX = 8; // a counter with at most this many samples in the window marks each one
const MIN_SPAN_MS = 1e-5; // 10 ns: narrower windows say nothing more
const FETCH_DELAY = 90; // ms of quiet before a window is fetched
const SEARCH_PAGE = 50; // matches per /api/trace/search page; stepping fetches the next
const FONT = "11px system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
const BOLD = "600 11px system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";

let current = null; // the view on screen; URL changes update it in place

// -- entry point ---------------------------------------------------------------------

async function renderTraceViewer(view, state, run, details) {
  const key = viewKey(state, run);
  if (current && current.key === key && view.contains(current.root)) return update(current, state);
  leave();
  const ctx = makeContext(key, state, run, details);
  current = ctx;
  view.replaceChildren(ctx.root);
  ctx.status.replaceChildren(el("span", { class: "muted" }, "Reading the trace… (the first look at a run converts it once)"));
  let want = urlWindow(state), note = null;
  if (want && !(want[1] > want[0])) { // a hand-edited link: say so rather than ask for a 400
    note = el("div", { class: "tv-note", id: "tv-bad-window" }, `The link's window (start_ms=${state.start_ms}, end_ms=${state.end_ms}) is empty: showing the whole trace.`);
    want = null;
  }
  let data;
  const first = cachedJson(windowUrl(ctx, want, resolution(ctx)), 8, getColumns);
  showPreview(ctx, first, want);
  try {
    data = await first;
  } catch (err) {
    if (current !== ctx) return;
    ctx.status.replaceChildren(errorBox(err, "Cannot show the trace"),
      want ? el("p", {}, el("a", { href: stateUrl({ ...state, start_ms: "", end_ms: "", ev: "" }),
        onclick: (e) => { e.preventDefault(); go({ ...readState(), start_ms: "", end_ms: "", ev: "" }); } }, "Show the whole trace")) : null);
    return;
  }
  if (current !== ctx || !view.contains(ctx.root)) return; // the user moved on
  ctx.full = data.fullTimespan || [0, 0];
  // A link whose window lies wholly or partly outside the trace (another run's link, a
  // hand-edited one) fetched nothing or a sliver: clamp it to the trace, say so, refetch.
  const fit = want ? fitToTrace(ctx.full, want) : null;
  if (fit && fit.note) {
    note = fit.note;
    want = fit.win;
    try {
      data = await cachedJson(windowUrl(ctx, want, resolution(ctx)), 8, getColumns);
    } catch (err) {
      if (current !== ctx) return;
      ctx.status.replaceChildren(errorBox(err, "Cannot show the trace"));
      return;
    }
    if (current !== ctx || !view.contains(ctx.root)) return;
    setUrl(want ? { start_ms: fmtNum(want[0], want[1] - want[0]), end_ms: fmtNum(want[1], want[1] - want[0]) } : { start_ms: "", end_ms: "" });
  }
  ctx.status.replaceChildren(...(note ? [note] : []));
  if (!(data.tracks || []).length || (!data.totalEventsSize && !(data.counters || []).some((c) => c.t.length))) {
    ctx.stage.hidden = true;
    ctx.status.replaceChildren(el("div", { class: "tv-note", id: "tv-empty" },
      el("strong", {}, "This trace has no events. "),
      run.kind === "chrome_trace" ? "The Chrome trace file holds no complete, begin/end or counter events."
        : "The profile holds no trace events for the selected host(s)."));
    return;
  }
  if (ctx.previewing) return void indexLanded(ctx, data, want);
  ctx.view = want ? clampWindow(ctx, want[0], want[1]) : [ctx.full[0], ctx.full[1]];
  accept(ctx, data, ctx.view, resolution(ctx));
  ctx.ready = true;
  if (state.ev) select(ctx, state.ev, { fromUrl: true });
  counterFromUrl(ctx, state); // a link or a reload with a counter point (ctr, ct)
  if (state.q) runSearch(ctx, state.q);
  relayout(ctx);
  schedule(ctx); // the canvas may be wider than the first guess: fetch at its real width
}

// The first look at a big run builds its index (seconds to minutes); the build publishes
// the whole trace's window early (/api/trace/preview: {preview: false, state: "pending"}
// until then, "ready" once the index is, "several_hosts" for a merged view: no preview to
// wait for). Draw it, marked as a preview, until the index answers, and take input
// meanwhile: windows, a slice's details and searches are answered from the preview
// (app/trace_preview.py: coarse, the short slices arrive with the index; its ids are its
// own, written "p<id>" in the page and the URL); indexLanded swaps in the exact answers.
async function showPreview(ctx, first, want) {
  let settled = false;
  first.then(() => { settled = true; }, () => { settled = true; });
  const url = previewUrl(ctx, want, resolution(ctx));
  while (!settled && current === ctx) {
    await new Promise((r) => setTimeout(r, 400));
    if (settled || current !== ctx) return;
    let res;
    try { res = await fetch(url); } catch { continue; }
    if (!res.ok) return;
    const data = await res.json();
    if (settled || current !== ctx) return;
    if (!data.preview) {
      if (data.state === "pending") continue; // not published yet
      return; // the index is ready (its window is on its way), or no preview will come
    }
    ctx.root.dataset.preview = "1";
    ctx.previewing = true;
    ctx.full = data.fullTimespan || [0, 0];
    ctx.view = want ? clampWindow(ctx, want[0], want[1]) : [ctx.full[0], ctx.full[1]];
    accept(ctx, data, ctx.view, resolution(ctx));
    relayout(ctx);
    ctx.status.replaceChildren(el("div", { class: "tv-note", id: "tv-preview" },
      el("strong", {}, "Preview: "), "what the index build has read so far. Zoom, search and details answer from it; the short slices, args and links arrive with the index (progress above)."));
    const state = readState();
    if (state.ev) select(ctx, state.ev, { fromUrl: true });
    if (state.q) runSearch(ctx, state.q);
    return;
  }
}

const PREVIEW_NOTE = "preview: coarse, the short slices arrive with the index";

function previewUrl(ctx, win, res) {
  const extra = { resolution: res };
  if (win) Object.assign(extra, { start_ms: fmtNum(win[0], win[1] - win[0]), end_ms: fmtNum(win[1], win[1] - win[0]) });
  return `/api/trace/preview?${apiParams(ctx, extra)}`;
}

// The index answered the page's first request while the preview was up: the window the
// user is looking at now (not the whole trace) is fetched exact and replaces the
// preview's; a preview selection becomes the index's same slice (accept ->
// remapSelection) and a search is asked again of the whole trace.
function indexLanded(ctx, data, want) {
  ctx.previewing = false;
  ctx.ready = true;
  delete ctx.root.dataset.preview;
  const whole = sameWindow(ctx.view, ctx.full) && !want;
  if (whole) accept(ctx, data, ctx.view, resolution(ctx));
  else { ctx.dataWindow = null; fetchWindow(ctx); }
  if (ctx.searchQ) runSearch(ctx, ctx.searchQ);
  schedule(ctx); // the canvas's real width
}

// A slice picked in the preview ("p<id>"), found again in an exact window by what the
// preview said of it (track, start, duration, name: the preview's rows are the index's
// rows, so the values are the same numbers): select the index's id, in the URL too.
function remapSelection(ctx) {
  const sel = ctx.selected, s = ctx.data.s;
  if (!sel || !sel.name) return;
  for (const i of ctx.data.byRow.get(rowKey(sel.track, sel.depth)) || []) {
    if (s.start[i] === sel.start && s.dur[i] === sel.dur && ctx.data.names[s.name[i]] === sel.name) {
      const id = String(s.id[i]);
      setUrl({ ev: id });
      select(ctx, id);
      return;
    }
  }
}

function viewKey(state, run) {
  return [state.run, state.host, state.hosts].join("\u0000");
}

function leave() {
  if (!current) return;
  current.dispose();
  current = null;
}

// Everything the URL changes without reloading: window, selection, search.
function update(ctx, state) {
  if (!ctx.ready && !ctx.previewing) return;
  let want = urlWindow(state);
  const fit = want ? fitToTrace(ctx.full, want) : null;
  if (fit) { ctx.status.replaceChildren(fit.note); want = fit.win; }
  const win = want ? clampWindow(ctx, want[0], want[1]) : [ctx.full[0], ctx.full[1]];
  if (!sameWindow(win, ctx.view)) setWindow(ctx, win[0], win[1], { url: !!fit });
  else if (fit) writeWindowUrl(ctx);
  if ((state.ev || "") !== (ctx.selectedId || "")) select(ctx, state.ev || "", { fromUrl: true });
  counterFromUrl(ctx, state);
  if ((state.q || "") !== ctx.search.value) { ctx.search.value = state.q || ""; runSearch(ctx, state.q || ""); }
  const mode = flowModeOf(state.flows);
  if (mode !== ctx.flowMode) { ctx.flowMode = ctx.flowToggle.value = mode; paint(ctx); }
}

// The part of a link's window inside the trace: null when it is all inside; else the
// clamped window (null: the whole trace, when nothing of the link's window is in it) and
// a note saying what happened, so the page never shows an empty stretch of time.
function fitToTrace(full, want) {
  const [f0, f1] = full, [s, e] = want;
  const tol = Math.max(f1 - f0, 1e-9) * 1e-6;
  if (s >= f0 - tol && e <= f1 + tol) return null;
  // In ms, as the URL's keys are: the reader compares the note with the link.
  const n = (v) => Number(v.toPrecision(6)).toLocaleString("en-US", { maximumFractionDigits: 6 });
  const span = (a, b) => `${n(a)}–${n(b)} ms`;
  const lo = Math.max(s, f0), hi = Math.min(e, f1);
  const inside = hi - lo > (f1 - f0) * 1e-6;
  const win = inside && !(lo <= f0 + tol && hi >= f1 - tol) ? [lo, hi] : null;
  const text = `The link's window ${span(s, e)} lies ${inside ? "partly " : ""}outside this trace (${span(f0, f1)}): `
    + (win ? `showing the part inside it, ${span(lo, hi)}.` : "showing the whole trace.");
  return { win, note: el("div", { class: "tv-note", id: "tv-clamped-window" }, text) };
}

// The flows URL key: absent → the selection's arrows, "all", "0" → none.
const FLOW_URL = { selection: "", all: "all", none: "0" };
function flowModeOf(v) { return v === "0" ? "none" : v === "all" ? "all" : "selection"; }

function urlWindow(state) {
  const s = Number(state.start_ms), e = Number(state.end_ms);
  return state.start_ms && state.end_ms && Number.isFinite(s) && Number.isFinite(e) ? [s, e] : null;
}

function apiParams(ctx, extra = {}) {
  const q = new URLSearchParams({ run: ctx.run.name });
  if (ctx.hosts) q.set("hosts", ctx.hosts);
  else if (ctx.host) q.set("host", ctx.host);
  for (const [k, v] of Object.entries(extra)) if (v !== undefined && v !== null && v !== "") q.set(k, v);
  return q;
}

// The window as binary columns (lib/columns.js): a busy window's ~80,000 slices are
// ~3 MB of JSON the browser would parse into arrays of boxed numbers first.
function windowUrl(ctx, win, res) {
  const extra = { resolution: res, format: "columns" };
  if (win) Object.assign(extra, { start_ms: fmtNum(win[0], win[1] - win[0]), end_ms: fmtNum(win[1], win[1] - win[0]) });
  return `/api/trace/window?${apiParams(ctx, extra)}`;
}

// A window bound with enough digits for its span (10 ns below a µs-wide window) and no more.
function fmtNum(v, span) {
  const digits = Math.min(9, Math.max(3, 4 - Math.floor(Math.log10(Math.max(span, 1e-9)))));
  return String(Number(v.toFixed(digits)));
}

// -- page skeleton ---------------------------------------------------------------------

function makeContext(key, state, run, details) {
  const ctx = {
    key, run, details, host: state.hosts ? "" : state.host, hosts: state.hosts || "",
    ready: false, previewing: false, full: [0, 0], view: [0, 1], data: null, dataWindow: null, dataRes: 0,
    seq: 0, timer: 0, collapsed: new Set(), rows: [], trackRow: new Map(), scrollTop: 0,
    selectedId: "", selected: null, hover: null, drag: null, mouseX: null, searchSeq: 0,
    drawn: { n: 0, idx: new Int32Array(0) }, frame: 0, listeners: [], flowMode: flowModeOf(state.flows),
  };
  ctx.search = el("input", { type: "search", id: "tv-search", placeholder: "search slices by name…", "aria-label": "search slices", value: state.q || "",
    oninput: () => { clearTimeout(ctx.searchTimer); ctx.searchTimer = setTimeout(() => searchTyped(ctx), 250); },
    onkeydown: (e) => {
      if (e.key !== "Enter") return;
      clearTimeout(ctx.searchTimer);
      // Enter / Shift+Enter step through the matches once they are in (as in Perfetto).
      if (ctx.hits && ctx.hits.q === ctx.search.value.trim() && ctx.hits.total) { e.preventDefault(); stepMatch(ctx, e.shiftKey ? -1 : 1); } else searchTyped(ctx);
    } });
  ctx.matchPos = el("span", { class: "tv-match-pos muted", id: "tv-match-pos", "aria-live": "polite" });
  ctx.searchNav = el("span", { class: "tv-search-nav", hidden: true },
    el("button", { type: "button", id: "tv-match-prev", title: "Previous match (Shift+Enter)", "aria-label": "previous match", onclick: () => stepMatch(ctx, -1) }, "‹"),
    el("button", { type: "button", id: "tv-match-next", title: "Next match (Enter)", "aria-label": "next match", onclick: () => stepMatch(ctx, 1) }, "›"),
    ctx.matchPos);
  ctx.exportWindow = el("a", { class: "tv-btn", id: "tv-export-window", download: "", title: "Every event in the visible window as Chrome-trace JSON (Perfetto, chrome://tracing)" }, "Download window");
  ctx.exportAll = el("a", { class: "tv-btn", id: "tv-export-all", download: "", href: `/api/trace/export?${apiParams(ctx)}`, title: "The whole trace as Chrome-trace JSON" }, "Download whole trace");
  // Flow arrows (launch -> kernel, async op start -> end, torch's fwd -> bwd) can hide
  // the slices on a busy GPU timeline (a torch trace has one per backward op): as in
  // Perfetto, only the selected slice's are drawn unless "all" is picked; the link keeps it.
  ctx.flowToggle = el("select", { id: "tv-flows", "aria-label": "flow arrows",
    onchange: () => { ctx.flowMode = ctx.flowToggle.value; setUrl({ flows: FLOW_URL[ctx.flowMode] }); paint(ctx); } },
    el("option", { value: "selection" }, "of the selection"), el("option", { value: "all" }, "all"), el("option", { value: "none" }, "none"));
  ctx.flowToggle.value = ctx.flowMode;
  ctx.flowLabel = el("label", { class: "tv-toggle", id: "tv-flows-label", title: "Draw flow arrows between the slices of a flow (host launch → device kernel, async op start → end)" },
    "Flows ", ctx.flowToggle);
  ctx.windowLabel = el("span", { class: "tv-window muted", id: "tv-window" });
  ctx.counts = el("span", { class: "tv-counts muted", id: "tv-counts" });
  const toolbar = el("div", { class: "tv-toolbar" },
    el("div", { class: "tv-searchbox" }, ctx.search), ctx.searchNav,
    el("button", { type: "button", id: "tv-zoom-in", title: "Zoom in (W)", onclick: () => zoomBy(ctx, 0.5) }, "+"),
    el("button", { type: "button", id: "tv-zoom-out", title: "Zoom out (S)", onclick: () => zoomBy(ctx, 2) }, "−"),
    el("button", { type: "button", id: "tv-reset", title: "Show the whole trace (0)", onclick: () => resetZoom(ctx) }, "Reset zoom"),
    hostPicker(ctx, state, details),
    ctx.flowLabel,
    ctx.windowLabel, ctx.counts,
    el("span", { class: "tv-spacer" }),
    ctx.exportWindow, ctx.exportAll);
  ctx.canvas = el("canvas", { class: "tv-canvas", id: "tv-canvas", tabindex: "0", "aria-label": "trace timeline" });
  // Hover outline, counter dot and the dragged range go on a second canvas above, so
  // moving the mouse never repaints the slices.
  ctx.overlay = el("canvas", { class: "tv-overlay", "aria-hidden": "true" });
  ctx.layers = el("div", { class: "tv-layers" }, ctx.canvas, ctx.overlay);
  ctx.inner = el("div", { class: "tv-inner" }, ctx.layers);
  ctx.scroller = el("div", { class: "tv-scroll", id: "tv-scroll" }, ctx.inner);
  ctx.tip = el("div", { class: "tv-tip", id: "tv-tip", hidden: true });
  ctx.stage = el("div", { class: "tv-stage", id: "tv-stage" }, ctx.scroller, ctx.tip);
  ctx.status = el("div", { class: "tv-status", id: "tv-status" });
  ctx.card = el("div", { class: "tv-card", id: "tv-card" }, el("p", { class: "muted" }, "Click a slice for its details."));
  ctx.results = el("div", { class: "tv-results", id: "tv-results" });
  ctx.summary = makeSummary((extra) => apiParams(ctx, extra), () => paintOverlay(ctx)); // Alt-drag: the range's slices, tabulated
  ctx.root = el("div", { class: "tv", id: "tv" },
    el("div", { class: "tv-head" }, el("h1", {}, "Trace viewer"),
      el("span", { class: "tv-subtitle muted" }, run.name, hostsLabel(ctx, details), run.kind === "chrome_trace" ? " · Chrome trace" : "")),
    // a pod's hosts side by side (/api/trace_hosts): which one is slow, links to each
    showsHosts(run, details) ? hostsOverview(run, ctx.hosts ? ctx.hosts.split(",") : [ctx.host || details.hosts[0]]) : null,
    toolbar,
    el("div", { class: "tv-hint muted" }, "Wheel: zoom at the cursor · drag: pan · shift-drag or drag on the ruler: zoom to a range · alt-drag: summarize a range · W/S zoom, A/D pan, F zoom to selection, 0 reset · wheel over the names: scroll rows"),
    ctx.status, ctx.stage, ctx.summary.node,
    el("div", { class: "tv-panels" }, ctx.card, ctx.results));
  ctx.g = ctx.canvas.getContext("2d", { alpha: false });
  ctx.og = ctx.overlay.getContext("2d");
  wire(ctx);
  return ctx;
}

function hostsLabel(ctx, details) {
  if (ctx.hosts) return ` · hosts ${ctx.hosts.split(",").join(", ")}`;
  const h = ctx.host || (details.hosts || [])[0];
  return h ? ` · host ${h}` : "";
}

// The top bar's host picker sets one host; with several hosts this adds "merge hosts":
// a multi-select that sets hosts=a,b (one timeline, processes grouped per host).
function hostPicker(ctx, state, details) {
  const hosts = details.hosts || [];
  if (hosts.length < 2) return null;
  const chosen = new Set(ctx.hosts ? ctx.hosts.split(",") : [ctx.host || hosts[0]]);
  const boxes = hosts.map((h) => el("label", { class: "tv-host" },
    el("input", { type: "checkbox", value: h, checked: chosen.has(h) }), h));
  const apply = (list) => {
    const s = { ...readState(), start_ms: "", end_ms: "", ev: "" };
    if (list.length > 1) Object.assign(s, { hosts: list.join(","), host: "" });
    else Object.assign(s, { hosts: "", host: list[0] || "" });
    go(s);
  };
  return el("details", { class: "tv-hosts", id: "tv-hosts" },
    el("summary", {}, ctx.hosts ? `${chosen.size} hosts` : "Hosts…"),
    el("div", { class: "tv-hosts-menu" }, boxes,
      el("div", { class: "tv-hosts-buttons" },
        el("button", { type: "button", onclick: () => apply(hosts) }, "All hosts"),
        el("button", { type: "button", onclick: (e) => apply([...e.target.closest(".tv-hosts-menu").querySelectorAll("input:checked")].map((i) => i.value)) }, "Apply"))));
}

// -- data ------------------------------------------------------------------------------

function resolution(ctx) {
  const w = Math.round(ctx.scroller.clientWidth || ctx.root.clientWidth || 1200) - GUTTER;
  return Math.max(50, Math.min(100000, w));
}

// Take a window response: index its slices by (track, depth) for hit tests and remember
// per name its colour and label width.
function accept(ctx, data, win, res) {
  const s = data.slices || { id: [], track: [], start: [], dur: [], depth: [], name: [] };
  const n = s.id.length;
  const byRow = new Map();
  for (let i = 0; i < n; i++) {
    const k = rowKey(s.track[i], s.depth[i]);
    let list = byRow.get(k);
    if (!list) byRow.set(k, list = []);
    list.push(i);
  }
  for (const list of byRow.values()) list.sort((a, b) => s.start[a] - s.start[b]);
  const names = data.names || [];
  const colour = new Uint8Array(names.length);
  names.forEach((name, i) => { colour[i] = hash(name) % PALETTE.length; });
  const idIndex = new Map();
  const prefix = data.preview ? "p" : ""; // a preview's ids are its own (showPreview)
  for (let i = 0; i < n; i++) idIndex.set(prefix + s.id[i], i);
  const counters = new Map((data.counters || []).map((c) => [c.track, c]));
  const tracks = data.tracks || [];
  const structure = tracks.map((t) => `${t.id}:${t.maxDepth}:${t.kind}`).join(",");
  ctx.data = { raw: data, s, n, byRow, names, colour, labelW: new Float32Array(names.length).fill(-1), idIndex, counters, prefix,
    steps: data.steps || [], tracks, processes: data.processes || [] };
  ctx.dataWindow = win;
  ctx.dataRes = res;
  ctx.hover = null; // it indexed the previous window's columns
  if (structure !== ctx.structure) { ctx.structure = structure; relayout(ctx); }
  const f = data.flows, arrows = f ? f.from.length + (f.truncated || 0) : 0;
  ctx.counts.textContent = `${(data.returnedEventsSize ?? n).toLocaleString("en-US")} of ${(data.totalEventsSize ?? n).toLocaleString("en-US")} events${arrows ? ` · ${arrows.toLocaleString("en-US")} flows` : ""}${data.truncated ? " · zoom in for more" : ""}`;
  ctx.flowLabel.title = arrows ? `${arrows.toLocaleString("en-US")} flow arrows in view${f.truncated ? ` (the first ${f.from.length.toLocaleString("en-US")} drawn)` : ""}` : "No flow in this window";
  ctx.counts.title = data.truncated ? "Slices shorter than a pixel were thinned to about one per pixel per row; zooming in shows them." : "Every event of this window is drawn.";
  if (data.preview) {
    ctx.counts.textContent += ` · ${data.coarse || PREVIEW_NOTE}`;
    ctx.counts.title = "Drawn from the preview the index build published: the slices a whole-trace pixel long or longer, and the first shorter one per pixel per row.";
  }
  if (ctx.selectedId.startsWith("p") && !data.preview) remapSelection(ctx);
  if (ctx.selectedId && ctx.selected) locateSelected(ctx);
  draw(ctx);
}

function rowKey(track, depth) { return track * 65536 + depth; } // depth < 2^15 (int16 on the server)

function hash(str) { // FNV-1a: the same name gets the same colour in every window
  let h = 2166136261;
  for (let i = 0; i < str.length; i++) { h ^= str.charCodeAt(i); h = Math.imul(h, 16777619); }
  return h >>> 0;
}

// After every change of window or width: fetch when quiet; drop answers that are stale.
function schedule(ctx) {
  clearTimeout(ctx.timer);
  ctx.timerActive = true;
  ctx.timer = setTimeout(() => {
    ctx.timerActive = false;
    if (ctx.urlPending) writeWindowUrl(ctx);
    fetchWindow(ctx);
  }, FETCH_DELAY);
}

async function fetchWindow(ctx) {
  const win = [...ctx.view], res = resolution(ctx);
  const seq = ++ctx.seq; // from here on, answers to earlier requests are stale
  if (ctx.dataWindow && sameWindow(win, ctx.dataWindow) && res === ctx.dataRes) { // back where the data is
    delete ctx.root.dataset.busy;
    ctx.counts.classList.remove("busy");
    return;
  }
  ctx.root.dataset.busy = "1";
  const slow = setTimeout(() => { if (seq === ctx.seq) ctx.counts.classList.add("busy"); }, 150);
  const whole = sameWindow(win, ctx.full);
  try {
    // The last few answers stay cached (app.js): reset zoom or back to a window is instant.
    const data = ctx.previewing ? await getJson(previewUrl(ctx, whole ? null : win, res))
      : await cachedJson(windowUrl(ctx, whole ? null : win, res), 8, getColumns);
    if (seq !== ctx.seq || current !== ctx) return; // a newer window was asked for meanwhile
    if (data.preview === false || (data.preview && !ctx.previewing)) return; // the index landed meanwhile: indexLanded fetches
    ctx.status.replaceChildren();
    accept(ctx, data, win, res);
  } catch (err) {
    if (seq !== ctx.seq || current !== ctx) return;
    ctx.status.replaceChildren(errorBox(err, "Cannot load this window"));
  } finally {
    clearTimeout(slow);
    if (seq === ctx.seq) { delete ctx.root.dataset.busy; ctx.counts.classList.remove("busy"); }
  }
}

function sameWindow(a, b) {
  const tol = Math.max(Math.abs(a[1] - a[0]), 1e-9) * 1e-6;
  return Math.abs(a[0] - b[0]) <= tol && Math.abs(a[1] - b[1]) <= tol;
}

// -- window ----------------------------------------------------------------------------

function clampWindow(ctx, s, e) {
  const [f0, f1] = ctx.full;
  if (!(e > s)) [s, e] = [Math.min(s, e), Math.max(s, e) + MIN_SPAN_MS];
  if (e - s >= f1 - f0) return [f0, f1];
  const span = Math.max(e - s, MIN_SPAN_MS);
  const mid = (s + e) / 2;
  s = mid - span / 2; e = mid + span / 2;
  if (s < f0) { e += f0 - s; s = f0; }
  if (e > f1 && f1 > f0) { s -= e - f1; e = f1; }
  if (s < f0) s = f0;
  // The bounds as the URL writes them, so the view, the URL and the fetched window agree.
  return [Number(fmtNum(s, span)), Number(fmtNum(e, span))];
}

function setWindow(ctx, s, e, { url = true } = {}) {
  ctx.view = clampWindow(ctx, s, e);
  // The URL follows when the fetch goes out: Chromium throttles a page that replaces its
  // URL on every wheel tick or mouse move.
  ctx.urlPending = ctx.urlPending || url;
  draw(ctx);
  schedule(ctx);
}

function writeWindowUrl(ctx) {
  ctx.urlPending = false;
  const whole = sameWindow(ctx.view, ctx.full);
  const span = ctx.view[1] - ctx.view[0];
  setUrl(whole ? { start_ms: "", end_ms: "" } : { start_ms: fmtNum(ctx.view[0], span), end_ms: fmtNum(ctx.view[1], span) });
}

// The URL follows the view without re-rendering; replaceState while the user zooms and
// pans (one history entry per view, not per wheel tick), pushState for a selection.
function setUrl(patch, opts) {
  writeUrl({ ...readState(), ...patch }, opts);
}

function zoomBy(ctx, factor, atX) {
  const [s, e] = ctx.view;
  const w = plotWidth(ctx);
  const frac = atX === undefined || atX === null ? 0.5 : Math.min(1, Math.max(0, (atX - GUTTER) / w));
  const t = s + frac * (e - s);
  const span = (e - s) * factor;
  setWindow(ctx, t - frac * span, t + (1 - frac) * span);
}

function panBy(ctx, fraction) {
  const [s, e] = ctx.view;
  const d = (e - s) * fraction;
  setWindow(ctx, s + d, e + d);
}

function resetZoom(ctx) { setWindow(ctx, ctx.full[0], ctx.full[1]); }

function zoomToSlice(ctx, start, dur) {
  const span = Math.max(dur * 1.6, MIN_SPAN_MS * 20, (ctx.full[1] - ctx.full[0]) * 1e-7);
  const mid = start + dur / 2;
  setWindow(ctx, mid - span / 2, mid + span / 2);
}

// -- layout ----------------------------------------------------------------------------

function plotWidth(ctx) { return Math.max(1, ctx.cssW - GUTTER); }
function timeToX(ctx, t) { return GUTTER + (t - ctx.view[0]) / (ctx.view[1] - ctx.view[0]) * plotWidth(ctx); }
function xToTime(ctx, x) { return ctx.view[0] + (x - GUTTER) / plotWidth(ctx) * (ctx.view[1] - ctx.view[0]); }

// Rows top to bottom: per process (sort index, pid) a header, then its tracks (sort
// index, tid); a collapsed process keeps only its header.
function relayout(ctx) {
  if (!ctx.data) return;
  const procs = [...ctx.data.processes];
  const byPid = new Map();
  for (const t of ctx.data.tracks) {
    if (!byPid.has(t.pid)) byPid.set(t.pid, []);
    byPid.get(t.pid).push(t);
  }
  for (const pid of byPid.keys()) if (!procs.some((p) => p.pid === pid)) procs.push({ pid, name: `process ${pid}`, sortIndex: pid });
  procs.sort((a, b) => (a.sortIndex ?? 0) - (b.sortIndex ?? 0) || a.pid - b.pid);
  const rows = [], trackRow = new Map();
  const hostNames = [...new Set(procs.map((p) => p.host))];
  const multiHost = hostNames.length > 1;
  const shortHosts = multiHost ? shortHostNames(hostNames) : new Map();
  let y = 0;
  for (const p of procs) {
    // a line without a single slice (XProf's emptied "Async XLA Ops") is not a row
    const tracks = (byPid.get(p.pid) || []).filter((t) => t.kind === "counter" || t.events !== 0)
      .sort((a, b) => (a.sortIndex ?? 0) - (b.sortIndex ?? 0) || a.tid - b.tid || a.id - b.id);
    if (!tracks.length) continue;
    const open = !ctx.collapsed.has(p.pid);
    // The header names the host where the server's process name starts with it
    // ("34.83.195.179_6003 /device:GPU:1", an xplane's processes), and in a merged view
    // where it does not (it is put in front).
    const own = String(p.name), known = p.host || "";
    const host = known && (own.startsWith(`${known} `) || (multiHost && !own.includes(known))) ? known : "";
    const proc = host && own.startsWith(`${host} `) ? own.slice(host.length + 1) : own;
    const name = host ? `${host} ${proc}` : own;
    rows.push({ type: "process", pid: p.pid, y, h: PROC_H, name, proc, host, hostForms: shortHosts.get(host) || [],
      count: tracks.length, open });
    y += PROC_H;
    if (!open) continue;
    for (const t of tracks) {
      const h = t.kind === "counter" ? COUNTER_H : (t.maxDepth + 1) * ROW_H + 2 * TRACK_PAD;
      const row = { type: "track", track: t, y, h };
      rows.push(row);
      trackRow.set(t.id, row);
      y += h;
    }
  }
  ctx.rows = rows;
  ctx.trackRow = trackRow;
  ctx.contentH = y;
  sizeCanvas(ctx);
}

// Shorter forms of each host name of a merged view, longest first, that still tell the
// hosts apart: their shared start left out ("…179_6003"), then their shared end too
// ("…179…"). A process header gives up its host's text before its own name.
function shortHostNames(hosts) {
  const { prefix, suffix, mids } = hostParts(hosts);
  return new Map(hosts.map((h, i) => [h, [...new Set([
    prefix ? `…${mids[i]}${suffix}` : null, prefix || suffix ? `${prefix ? "…" : ""}${mids[i]}${suffix ? "…" : ""}` : null,
  ].filter((f) => f && f !== h))]]));
}

function sizeCanvas(ctx) {
  const total = RULER_H + ctx.contentH + 6;
  const room = Math.max(260, window.innerHeight - 300); // leaves the top of the details card in view
  const h = Math.min(total, room);
  ctx.scroller.style.height = `${h}px`;
  ctx.inner.style.height = `${total}px`;
  const w = ctx.scroller.clientWidth;
  const dpr = window.devicePixelRatio || 1;
  if (w !== ctx.cssW || h !== ctx.cssH || dpr !== ctx.dpr) {
    ctx.cssW = w; ctx.cssH = h; ctx.dpr = dpr;
    ctx.layers.style.height = `${h}px`;
    for (const c of [ctx.canvas, ctx.overlay]) {
      c.style.width = `${w}px`; c.style.height = `${h}px`;
      c.width = Math.round(w * dpr); c.height = Math.round(h * dpr);
    }
  }
  draw(ctx);
}

// -- drawing ---------------------------------------------------------------------------

function draw(ctx) {
  if (ctx.frame || !ctx.data) return;
  ctx.frame = requestAnimationFrame(() => { ctx.frame = 0; paint(ctx); });
}

function paint(ctx) {
  const g = ctx.g, W = ctx.cssW, H = ctx.cssH, d = ctx.data;
  if (!W || !H || !d) return;
  const t0 = performance.now();
  g.setTransform(ctx.dpr, 0, 0, ctx.dpr, 0, 0);
  g.fillStyle = "#fff";
  g.fillRect(0, 0, W, H);
  g.font = FONT;
  g.textBaseline = "middle";
  const top = ctx.scroller.scrollTop;
  ctx.scrollTop = top;
  const yOf = (row) => RULER_H + row.y - top;
  const visible = ctx.rows.filter((r) => yOf(r) + r.h > RULER_H && yOf(r) < H);

  // Track backgrounds and process bands.
  let alt = 0;
  for (const r of ctx.rows) {
    if (r.type === "process") { alt = 0; continue; }
    r.alt = alt++ % 2;
  }
  for (const r of visible) {
    const y = yOf(r);
    if (r.type === "process") { g.fillStyle = "#eef1f6"; g.fillRect(0, y, W, r.h); }
    else if (r.alt) { g.fillStyle = "#fafbfc"; g.fillRect(GUTTER, y, W - GUTTER, r.h); }
  }
  g.save();
  g.beginPath();
  g.rect(GUTTER, RULER_H, W - GUTTER, H - RULER_H);
  g.clip();
  drawStepBands(ctx, g, H);
  drawSlices(ctx, g, visible, yOf);
  drawFlows(ctx, g, yOf);
  drawCounters(ctx, g, visible, yOf);
  drawSelection(ctx, g, yOf, H);
  g.restore();
  drawGutter(ctx, g, visible, yOf, H);
  drawRuler(ctx, g, W);
  paintOverlay(ctx);
  const span = ctx.view[1] - ctx.view[0];
  ctx.windowLabel.textContent = `${fmtTime(ctx.view[0], span / 1000)} – ${fmtTime(ctx.view[1], span / 1000)} (${fmtDur(span)})`;
  const whole = sameWindow(ctx.view, ctx.full);
  ctx.exportWindow.href = `/api/trace/export?${apiParams(ctx, whole ? {} : { start_ms: fmtNum(ctx.view[0], span), end_ms: fmtNum(ctx.view[1], span) })}`;
  ctx.paintMs = performance.now() - t0;
  ctx.root.dataset.painted = String((Number(ctx.root.dataset.painted) || 0) + 1);
}

function drawStepBands(ctx, g, H) {
  ctx.data.steps.forEach((st, i) => {
    if (i % 2) return;
    const x0 = timeToX(ctx, st.start), x1 = timeToX(ctx, st.start + st.dur);
    if (x1 < GUTTER || x0 > ctx.cssW) return;
    g.fillStyle = "rgba(47, 111, 223, 0.045)";
    g.fillRect(x0, RULER_H, Math.max(1, x1 - x0), H - RULER_H);
  });
}

// Slices bucketed by palette colour, then fillRect with one fillStyle per colour, on
// whole pixels: in Chromium's software raster that is ~2x faster than one path per
// colour and ~3x faster than a fillStyle per slice (60k slices: ~100 ms vs 150 / 260 ms
// with the raster flush, measured headless). Slices narrower than a pixel are drawn one
// pixel wide and a run of them on the same pixel column is drawn once.
function drawSlices(ctx, g, visible, yOf) {
  const d = ctx.data, s = d.s;
  const W = ctx.cssW, k = plotWidth(ctx) / (ctx.view[1] - ctx.view[0]), v0 = ctx.view[0];
  const paths = PALETTE.map(() => []);
  const labels = [], found = [];
  const match = searchMatches(ctx);
  if (ctx.drawn.idx.length < d.n) ctx.drawn.idx = new Int32Array(d.n);
  let nd = 0;
  for (const r of visible) {
    if (r.type !== "track" || r.track.kind === "counter") continue;
    const base = yOf(r) + TRACK_PAD;
    for (let depth = 0; depth <= r.track.maxDepth; depth++) {
      const y = Math.round(base + depth * ROW_H);
      if (y + ROW_H < RULER_H || y > ctx.cssH) continue;
      const list = d.byRow.get(rowKey(r.track.id, depth));
      if (!list) continue;
      let lastPx = -1e9;
      for (let j = 0; j < list.length; j++) {
        const i = list[j];
        const a = GUTTER + (s.start[i] - v0) * k, b = a + s.dur[i] * k;
        if (b < GUTTER || a > W) continue;
        let x0 = Math.round(a), x1 = Math.round(b);
        if (x1 <= x0) { // sub-pixel: one pixel, once per pixel column
          x0 = Math.floor(a);
          if (x0 === lastPx) continue;
          x1 = x0 + 1;
        }
        lastPx = x1 - 1;
        x0 = Math.max(x0, GUTTER - 2); x1 = Math.min(x1, W + 2);
        paths[d.colour[s.name[i]]].push(x0, y, x1 - x0);
        if (match && match[s.name[i]]) found.push(x0, y, x1 - x0);
        ctx.drawn.idx[nd++] = i;
        if (x1 - x0 > 24) labels.push(i, x0, y, x1 - x0);
      }
    }
  }
  ctx.drawn.n = nd;
  const h = ROW_H - 1;
  for (let c = 0; c < paths.length; c++) {
    const p = paths[c];
    if (!p.length) continue;
    g.fillStyle = PALETTE[c];
    for (let j = 0; j < p.length; j += 3) g.fillRect(p[j], p[j + 1], p[j + 2], h);
  }
  if (found.length) { // slices named like the search text: outlined
    g.strokeStyle = P.bad;
    g.lineWidth = 1.5;
    g.beginPath();
    for (let j = 0; j < found.length; j += 3) g.rect(found[j] + 0.5, found[j + 1] + 0.5, Math.max(found[j + 2] - 1, 1), h - 1);
    g.stroke();
  }
  // Labels where they fit, clipped to the visible part of the slice. Slices of one row
  // come in start order; where a trace nests badly (a slice overlapping its neighbour on
  // the same row) a label starts after the previous one instead of writing over it.
  g.fillStyle = P.fg;
  const ell = g.measureText("…").width;
  let rowY = -1, rowTrack = -1, prevEnd = -Infinity;
  for (let j = 0; j < labels.length; j += 4) {
    const i = labels[j];
    let x0 = labels[j + 1], w = labels[j + 3];
    const y = labels[j + 2];
    if (y !== rowY || s.track[i] !== rowTrack) { rowY = y; rowTrack = s.track[i]; prevEnd = -Infinity; }
    if (x0 < GUTTER) { w -= GUTTER - x0; x0 = GUTTER; }
    if (x0 < prevEnd) { w -= prevEnd - x0; x0 = prevEnd; }
    if (x0 + w > W) w = W - x0;
    const room = w - 8;
    if (room < 14) continue;
    const ni = s.name[i], name = d.names[ni];
    if (d.labelW[ni] < 0) d.labelW[ni] = g.measureText(name).width;
    const full = d.labelW[ni];
    let text = name;
    if (full > room) {
      const chars = Math.floor(name.length * (room - ell) / full);
      if (chars < 2) continue;
      text = name.slice(0, chars) + "…";
    }
    g.fillText(text, x0 + 4, y + h / 2 + 0.5);
    prevEnd = x0 + 4 + Math.min(full, room) + 4;
  }
}

// Flow arrows (Chrome-trace s/t/f events, e.g. torch's forward op -> its backward op or a
// CPU launch -> its GPU kernel; xplane flows, e.g. a host launch -> its device kernel):
// from the deepest slice holding each end on its track, or the track's first row.
function drawFlows(ctx, g, yOf) {
  const f = ctx.data.raw.flows;
  ctx.flowsDrawn = 0;
  if (!f || !f.from.length || ctx.flowMode === "none") return;
  const sel = ctx.selected, only = ctx.flowMode === "selection";
  if (only && !sel) return;
  // an arrow touches the selection when one of its ends is on the selected slice's track within its span
  const touches = (tr, t) => tr === sel.track && t >= sel.start - 1e-9 && t <= sel.start + sel.dur + 1e-9;
  const k = plotWidth(ctx) / (ctx.view[1] - ctx.view[0]), v0 = ctx.view[0];
  g.strokeStyle = "rgba(70, 80, 110, 0.75)";
  g.fillStyle = "rgba(70, 80, 110, 0.85)";
  g.lineWidth = 1;
  for (let i = 0; i < f.from.length; i++) {
    const y0 = flowY(ctx, f.fromTrack[i], f.from[i], yOf), y1 = flowY(ctx, f.toTrack[i], f.to[i], yOf);
    if (only && !touches(f.fromTrack[i], f.from[i]) && !touches(f.toTrack[i], f.to[i])) continue;
    if (y0 === null || y1 === null) continue; // a collapsed process
    const x0 = GUTTER + (f.from[i] - v0) * k, x1 = GUTTER + (f.to[i] - v0) * k;
    if (Math.max(x0, x1) < GUTTER || Math.min(x0, x1) > ctx.cssW) continue;
    g.beginPath();
    g.moveTo(x0, y0);
    const mx = (x0 + x1) / 2;
    g.bezierCurveTo(mx, y0, mx, y1, x1, y1);
    g.stroke();
    const dir = x1 >= x0 ? 1 : -1; // the head points along the curve's end
    g.beginPath();
    g.moveTo(x1, y1);
    g.lineTo(x1 - 6 * dir, y1 - 3);
    g.lineTo(x1 - 6 * dir, y1 + 3);
    g.closePath();
    g.fill();
    ctx.flowsDrawn++;
  }
}

function flowY(ctx, trackId, t, yOf) {
  const row = ctx.trackRow.get(trackId);
  if (!row) return null;
  const s = ctx.data.s, base = yOf(row) + TRACK_PAD;
  for (let depth = row.track.maxDepth; depth >= 0; depth--) {
    const list = ctx.data.byRow.get(rowKey(trackId, depth));
    if (!list) continue;
    let lo = 0, hi = list.length - 1, at = -1; // the last slice starting at or before t
    while (lo <= hi) { const mid = (lo + hi) >> 1; if (s.start[list[mid]] <= t + 1e-9) { at = mid; lo = mid + 1; } else hi = mid - 1; }
    if (at >= 0 && s.start[list[at]] + s.dur[list[at]] >= t - 1e-9) return base + depth * ROW_H + ROW_H / 2;
  }
  return base + ROW_H / 2;
}

function searchMatches(ctx) {
  const q = (ctx.searchQ || "").toLowerCase();
  if (!q) return null;
  const d = ctx.data;
  if (d.matchQ !== q) { d.matchQ = q; d.match = Uint8Array.from(d.names, (n) => (n.toLowerCase().includes(q) ? 1 : 0)); }
  return d.match;
}

function drawCounters(ctx, g, visible, yOf) {
  ctx.counterDots = [];
  for (const r of visible) {
    if (r.type !== "track" || r.track.kind !== "counter") continue;
    const c = ctx.data.counters.get(r.track.id);
    if (!c || !c.t.length) continue;
    const y0 = yOf(r) + 4, h = r.h - 8;
    let max = 0;
    for (const v of c.v) if (v > max) max = v;
    const scale = max > 0 ? h / max : 0;
    g.beginPath();
    g.moveTo(timeToX(ctx, c.t[0]), y0 + h);
    for (let i = 0; i < c.t.length; i++) { // a step line: the value holds until the next sample
      const x = timeToX(ctx, c.t[i]), y = y0 + h - c.v[i] * scale;
      if (i) g.lineTo(x, y0 + h - c.v[i - 1] * scale);
      g.lineTo(x, y);
    }
    const xEnd = Math.min(timeToX(ctx, ctx.full[1]), ctx.cssW);
    g.lineTo(xEnd, y0 + h - c.v[c.v.length - 1] * scale);
    g.lineTo(xEnd, y0 + h);
    g.closePath();
    g.fillStyle = "rgba(176, 122, 161, 0.35)";
    g.fill();
    g.strokeStyle = "#8e4f80";
    g.lineWidth = 1;
    g.stroke();
    const label = `max ${fmtValue(max, c.unit)}`, lw = g.measureText(label).width;
    g.fillStyle = "rgba(255, 255, 255, 0.85)";
    g.fillRect(ctx.cssW - lw - 10, y0, lw + 8, 13);
    g.fillStyle = P.muted;
    g.fillText(label, ctx.cssW - lw - 6, y0 + 6.5);
    // Sparse samples get a dot each (over the label): a series of one sample (a TPU
    // unit's "% util" read once), one at the trace's end or one of 0 has no area to fill
    // and would not show.
    if (c.t.length <= SAMPLE_DOTS_MAX) {
      g.fillStyle = "#8e4f80";
      for (let i = 0; i < c.t.length; i++) {
        const x = Math.min(timeToX(ctx, c.t[i]), ctx.cssW - 3), y = y0 + h - c.v[i] * scale;
        g.beginPath();
        g.arc(x, y, 2.5, 0, 2 * Math.PI);
        g.fill();
        if (x >= GUTTER) ctx.counterDots.push({ track: r.track.id, x, y }); // the plot clips the rest
      }
    }
  }
}

function drawSelection(ctx, g, yOf, H) {
  const sel = ctx.selected;
  if (sel) { // faint lines at the selected slice's ends, across every track
    g.strokeStyle = "rgba(29, 35, 48, 0.35)";
    g.setLineDash([4, 3]);
    g.lineWidth = 1;
    for (const t of [sel.start, sel.start + sel.dur]) {
      const x = Math.round(timeToX(ctx, t)) + 0.5;
      g.beginPath(); g.moveTo(x, RULER_H); g.lineTo(x, H); g.stroke();
    }
    g.setLineDash([]);
    const box = sel.index >= 0 ? sliceBox(ctx, sel.index, yOf) : null;
    if (box) {
      g.strokeStyle = P.fg;
      g.lineWidth = 2;
      g.strokeRect(box.x - 1, box.y - 1, box.w + 2, box.h + 2);
    }
  }
}

function paintOverlay(ctx) {
  const g = ctx.og, H = ctx.cssH;
  if (!g || !ctx.data) return;
  g.setTransform(ctx.dpr, 0, 0, ctx.dpr, 0, 0);
  g.clearRect(0, 0, ctx.cssW, H);
  g.textBaseline = "middle";
  g.save();
  g.beginPath(); g.rect(GUTTER, RULER_H, ctx.cssW - GUTTER, H - RULER_H); g.clip();
  const hv = ctx.hover;
  if (hv && hv.index >= 0) {
    const box = sliceBox(ctx, hv.index);
    if (box) { g.strokeStyle = "rgba(29, 35, 48, 0.7)"; g.lineWidth = 1; g.strokeRect(box.x - 0.5, box.y - 0.5, box.w + 1, box.h + 1); }
  } else if (hv && hv.counter) { // the hovered sample
    const c = hv.counter, y0 = RULER_H + hv.row.y - ctx.scroller.scrollTop + 4, h = hv.row.h - 8;
    let max = 0;
    for (const v of c.v) if (v > max) max = v;
    g.fillStyle = "#8e4f80";
    g.beginPath();
    g.arc(timeToX(ctx, c.t[hv.i]), y0 + h - (max > 0 ? c.v[hv.i] * h / max : 0), 3.5, 0, 2 * Math.PI);
    g.fill();
  }
  drawCounterMark(ctx, g, H);
  g.restore();
  if (ctx.drag && ctx.drag.mode !== "pan" && ctx.drag.moved) drawRange(ctx, g, H, ctx.drag.x0, ctx.drag.x1);
  else if (ctx.summary && ctx.summary.range) { // the summarized range stays shaded, following zoom and pan
    const [a, b] = ctx.summary.range;
    drawRange(ctx, g, H, timeToX(ctx, a), timeToX(ctx, b), b - a);
  }
}

// The selected counter point: a line at its time across the plot, a ring on its value.
function drawCounterMark(ctx, g, H) {
  const sel = ctx.counterSel;
  if (!sel || sel.time === null || !Number.isFinite(sel.time)) return;
  const x = Math.round(timeToX(ctx, sel.time)) + 0.5;
  g.strokeStyle = "rgba(142, 79, 128, 0.8)";
  g.setLineDash([4, 3]);
  g.lineWidth = 1;
  g.beginPath(); g.moveTo(x, RULER_H); g.lineTo(x, H); g.stroke();
  g.setLineDash([]);
  const row = ctx.rows.find((r) => r.type === "track" && r.track.id === sel.track);
  const c = row && ctx.data.counters.get(sel.track);
  if (!c || sel.value === null) return;
  let max = 0;
  for (const v of c.v) if (v > max) max = v;
  const y0 = RULER_H + row.y - ctx.scroller.scrollTop + 4, h = row.h - 8;
  g.strokeStyle = "#5a2a50";
  g.lineWidth = 2;
  g.beginPath();
  g.arc(x, y0 + h - (max > 0 ? Math.min(sel.value, max) * h / max : 0), 5, 0, 2 * Math.PI);
  g.stroke();
}

// Where slice i is drawn (css px inside the canvas), or null when its row is hidden.
function sliceBox(ctx, i, yOf = (r) => RULER_H + r.y - ctx.scroller.scrollTop) {
  const s = ctx.data.s, row = ctx.trackRow.get(s.track[i]);
  if (!row) return null;
  let x0 = timeToX(ctx, s.start[i]), x1 = timeToX(ctx, s.start[i] + s.dur[i]);
  if (x1 - x0 < 1) x1 = x0 + 1;
  x0 = Math.max(x0, GUTTER); x1 = Math.min(x1, ctx.cssW);
  if (x1 <= x0) return null;
  return { x: x0, y: yOf(row) + TRACK_PAD + s.depth[i] * ROW_H, w: x1 - x0, h: ROW_H - 1 };
}

function drawGutter(ctx, g, visible, yOf, H) {
  g.fillStyle = "#fff";
  g.fillRect(0, RULER_H, GUTTER, H - RULER_H);
  g.save();
  g.beginPath(); g.rect(0, RULER_H, GUTTER, H - RULER_H); g.clip();
  for (const r of visible) {
    const y = yOf(r);
    if (r.type === "process") {
      g.fillStyle = "#eef1f6"; g.fillRect(0, y, GUTTER, r.h);
      g.fillStyle = P.fg; g.font = BOLD;
      g.fillText(processLabel(g, r, GUTTER - 12), 6, y + r.h / 2 + 0.5);
      g.font = FONT;
    } else {
      g.fillStyle = r.alt ? "#fafbfc" : "#fff"; g.fillRect(0, y, GUTTER, r.h);
      g.fillStyle = r.track.kind === "counter" ? "#8e4f80" : "#3d4557";
      g.fillText(fitText(g, r.track.name, GUTTER - 26), 18, y + Math.min(r.h, ROW_H + 2 * TRACK_PAD) / 2 + 0.5);
    }
    g.fillStyle = "#e6e9ef"; g.fillRect(0, y + r.h - 1, ctx.cssW, 1);
  }
  g.restore();
  g.fillStyle = P.line; g.fillRect(GUTTER - 1, RULER_H, 1, H - RULER_H);
}

// A process header's text within `room` px. What tells the rows apart is the process's
// own name, whose end holds the device number ("/device:GPU:7"), and, in a merged view,
// the part of the host name the hosts do not share. So the text gives way in this order:
// the host's shared start and end (shortHostNames), the collapsed track count, the host,
// and last the start of the process name ("…vice:GPU:7"); never the number. Kept on the
// row (labelKey: what it was made for) so a repaint measures nothing.
function processLabel(g, r, room) {
  const key = `${r.open}|${room}|${g.font}`;
  if (r.labelKey === key) return r.label;
  const head = r.open ? "▾" : "▸", count = r.open ? "" : `  (${r.count} tracks)`;
  const fits = (t) => g.measureText(t).width <= room;
  const tries = [...[r.host, ...r.hostForms].filter(Boolean).map((h) => `${head} ${h} ${r.proc}${count}`),
    `${head} ${r.proc}${count}`, `${head} ${r.proc}`];
  let label = tries.find(fits);
  if (!label) { // the process name alone is too long: cut its start, keep its end
    let lo = 0, hi = r.proc.length;
    while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (fits(`${head} …${r.proc.slice(r.proc.length - mid)}`)) lo = mid; else hi = mid - 1; }
    label = `${head} …${r.proc.slice(r.proc.length - lo)}`;
  }
  r.labelKey = key;
  r.label = label;
  return label;
}

function fitText(g, text, room) {
  if (g.measureText(text).width <= room) return text;
  let lo = 0, hi = text.length;
  while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (g.measureText(text.slice(0, mid) + "…").width <= room) lo = mid; else hi = mid - 1; }
  return text.slice(0, lo) + "…";
}

// Ticks at 1/2/5 × 10^k ms, at least ~90 px apart, labelled in the unit of the step.
// Labels are times since the trace's start; when that would need many digits (deep
// zoom far into the trace) they count from the first tick, whose full time is shown
// at the left.
function drawRuler(ctx, g, W) {
  const [v0, v1] = ctx.view, span = v1 - v0;
  g.fillStyle = "#f6f7f9"; g.fillRect(0, 0, W, RULER_H);
  // Step bands along the ruler's lower half.
  g.font = FONT;
  const spans = ctx.data.steps.map((st, i) => ({ st, i, x0: Math.max(GUTTER, timeToX(ctx, st.start)), x1: Math.min(W, timeToX(ctx, st.start + st.dur)) }))
    .filter((b) => b.x1 > b.x0);
  for (const b of spans) {
    g.fillStyle = b.i % 2 ? "#c9d7f2" : "#a9c0ec";
    g.fillRect(b.x0, RULER_H - 13, Math.max(1, b.x1 - b.x0), 12);
  }
  let labelEnd = -Infinity; // merged hosts have overlapping steps: a label only where free
  g.fillStyle = P.fg;
  for (const b of spans.sort((p, q) => p.x0 - q.x0)) {
    if (b.x1 - b.x0 <= 30 || b.x0 < labelEnd) continue;
    const text = fitText(g, /^\d+$/.test(b.st.name) ? `step ${b.st.name}` : b.st.name, b.x1 - b.x0 - 6);
    g.fillText(text, b.x0 + 3, RULER_H - 7);
    labelEnd = b.x0 + 6 + g.measureText(text).width;
  }
  const step = niceStep(span * 90 / plotWidth(ctx));
  const first = Math.ceil(v0 / step) * step;
  const relative = Math.abs(first) / step > 1e5;
  // One unit along the ruler: the window's magnitude ("118.19 ms", not "118190 µs").
  const unit = relative ? unitFor(step) : unitFor(Math.max(Math.abs(v0), Math.abs(v1), step));
  g.fillStyle = "#3d4557";
  g.strokeStyle = "#b8bfcc";
  g.lineWidth = 1;
  g.textAlign = "left";
  for (let t = first, n = 0; t <= v1 && n < 200; t = first + ++n * step) {
    const x = Math.round(timeToX(ctx, t)) + 0.5;
    g.beginPath(); g.moveTo(x, 4); g.lineTo(x, RULER_H - 14); g.stroke();
    const label = relative ? `+${fmtIn(t - first, unit, step)}` : fmtIn(t, unit, step);
    if (x + 3 + g.measureText(label).width < W) g.fillText(label, x + 3, 10); // no half labels at the edge
    for (let m = 1; m < 5; m++) { // minor ticks
      const xm = Math.round(timeToX(ctx, t + m * step / 5)) + 0.5;
      g.beginPath(); g.moveTo(xm, RULER_H - 18); g.lineTo(xm, RULER_H - 14); g.stroke();
    }
  }
  g.fillStyle = "#f6f7f9"; g.fillRect(0, 0, GUTTER, RULER_H);
  g.fillStyle = "#3d4557";
  g.font = BOLD;
  g.fillText(relative ? `ticks from ${fmtTime(first, step)}` : "time since trace start", 8, 12);
  g.font = FONT;
  g.fillStyle = P.muted;
  g.fillText(`${fmtDur(span)} visible · ${fmtDur(step)}/tick`, 8, 28);
  g.fillStyle = P.line; g.fillRect(0, RULER_H - 1, W, 1); g.fillRect(GUTTER - 1, 0, 1, RULER_H);
}

// A range between x0 and x1 (css px), shaded, with its duration (default: from the pixels).
function drawRange(ctx, g, H, x0, x1, dur = Math.abs(xToTime(ctx, x1) - xToTime(ctx, x0))) {
  const a = Math.max(GUTTER, Math.min(x0, x1)), b = Math.min(ctx.cssW, Math.max(x0, x1));
  if (b <= a) return; // panned out of view
  g.fillStyle = "rgba(47, 111, 223, 0.14)"; g.fillRect(a, 0, b - a, H);
  g.fillStyle = P.accent; g.fillRect(a, 0, 1, H); g.fillRect(b - 1, 0, 1, H);
  const text = fmtDur(dur);
  g.font = BOLD;
  const w = g.measureText(text).width + 10;
  g.fillStyle = P.accent; g.fillRect((a + b) / 2 - w / 2, RULER_H + 4, w, 16);
  g.fillStyle = "#fff"; g.textAlign = "center"; g.fillText(text, (a + b) / 2, RULER_H + 12.5); g.textAlign = "left";
  g.font = FONT;
}

function niceStep(raw) {
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

const exact = (dur) => Math.max(dur / 1000, 1e-6); // enough digits to tell a slice's ends apart
function fmtValue(v, unit) {
  if (unit === "bytes" || unit === "B") return fmtBytes(v);
  return `${Number(v.toPrecision(4)).toLocaleString("en-US")}${unit ? " " + unit : ""}`;
}

// -- interaction -----------------------------------------------------------------------

function on(ctx, target, type, fn, opts) {
  target.addEventListener(type, fn, opts);
  ctx.listeners.push([target, type, fn, opts]);
}

function wire(ctx) {
  const c = ctx.canvas;
  const pos = (e) => { const r = c.getBoundingClientRect(); return [e.clientX - r.left, e.clientY - r.top]; };
  on(ctx, c, "wheel", (e) => {
    const [x] = pos(e);
    if (x < GUTTER && !e.ctrlKey) return; // over the names: the rows scroll
    e.preventDefault();
    if (e.shiftKey || Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
      panBy(ctx, (e.shiftKey ? e.deltaY || e.deltaX : e.deltaX) / plotWidth(ctx));
      return;
    }
    const px = e.deltaMode === 1 ? e.deltaY * 16 : e.deltaY;
    zoomBy(ctx, Math.exp(Math.max(-1, Math.min(1, px / 300))), x);
  }, { passive: false });
  on(ctx, c, "mousedown", (e) => {
    if (e.button !== 0) return;
    const [x, y] = pos(e);
    c.focus({ preventScroll: true });
    if (x < GUTTER) return void clickGutter(ctx, y);
    const range = e.shiftKey || y < RULER_H;
    ctx.drag = { mode: e.altKey ? "select" : range ? "range" : "pan", x0: x, y0: y, x1: x, moved: false, view: [...ctx.view], top: ctx.scroller.scrollTop };
    e.preventDefault();
  });
  on(ctx, window, "mousemove", (e) => {
    const [x, y] = pos(e);
    ctx.mouseX = x;
    const dr = ctx.drag;
    if (!dr) return hoverAt(ctx, x, y, e);
    dr.x1 = x;
    if (Math.abs(x - dr.x0) > 3 || Math.abs(y - dr.y0) > 3) dr.moved = true;
    if (!dr.moved) return;
    hideTip(ctx);
    if (dr.mode === "pan") {
      const dt = (x - dr.x0) / plotWidth(ctx) * (dr.view[1] - dr.view[0]);
      ctx.scroller.scrollTop = dr.top - (y - dr.y0);
      setWindow(ctx, dr.view[0] - dt, dr.view[1] - dt);
    } else paintOverlay(ctx);
  });
  on(ctx, window, "mouseup", (e) => {
    const dr = ctx.drag;
    if (!dr) return;
    ctx.drag = null;
    const [x, y] = pos(e);
    if (!dr.moved) { clickAt(ctx, x, y); return; }
    if (dr.mode === "range" && Math.abs(x - dr.x0) > 3) {
      const a = xToTime(ctx, Math.max(GUTTER, Math.min(dr.x0, x))), b = xToTime(ctx, Math.min(ctx.cssW, Math.max(dr.x0, x)));
      setWindow(ctx, a, b);
    } else if (dr.mode === "select" && Math.abs(x - dr.x0) > 3) {
      const a = xToTime(ctx, Math.max(GUTTER, Math.min(dr.x0, x))), b = xToTime(ctx, Math.min(ctx.cssW, Math.max(dr.x0, x)));
      paintOverlay(ctx);
      ctx.summary.show(a, b);
    } else paintOverlay(ctx);
  });
  on(ctx, c, "mouseleave", () => { ctx.mouseX = null; if (ctx.hover) { ctx.hover = null; paintOverlay(ctx); } hideTip(ctx); });
  on(ctx, c, "dblclick", (e) => {
    const [x, y] = pos(e);
    const hit = hitTest(ctx, x, y);
    if (hit && hit.index >= 0) zoomToSlice(ctx, ctx.data.s.start[hit.index], ctx.data.s.dur[hit.index]);
  });
  on(ctx, ctx.scroller, "scroll", () => draw(ctx));
  on(ctx, document, "keydown", (e) => {
    if (current !== ctx || !document.body.contains(ctx.root) || !(ctx.ready || ctx.previewing)) return;
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const tag = (e.target && e.target.tagName) || "";
    if (/^(INPUT|SELECT|TEXTAREA)$/.test(tag) || (e.target && e.target.isContentEditable)) return;
    const at = ctx.mouseX !== null && ctx.mouseX >= GUTTER ? ctx.mouseX : undefined;
    const k = e.key.toLowerCase();
    if (k === "w") zoomBy(ctx, 0.8, at);
    else if (k === "s") zoomBy(ctx, 1.25, at);
    else if (k === "a") panBy(ctx, -0.15);
    else if (k === "d") panBy(ctx, 0.15);
    else if (k === "0") resetZoom(ctx);
    else if (k === "f" && ctx.selected) zoomToSlice(ctx, ctx.selected.start, ctx.selected.dur);
    else if (k === "escape" && (ctx.selectedId || ctx.counterSel)) selectAndRecord(ctx, ""); // a slice or a counter point
    else return;
    e.preventDefault();
  });
  const ro = new ResizeObserver(() => {
    if (!ctx.data) return;
    const before = ctx.cssW;
    sizeCanvas(ctx);
    if (ctx.cssW !== before) schedule(ctx);
  });
  ro.observe(ctx.scroller);
  on(ctx, window, "resize", () => { if (ctx.data) sizeCanvas(ctx); }); // a taller window: more rows
  ctx.dispose = () => {
    ro.disconnect();
    for (const [t, type, fn, opts] of ctx.listeners) t.removeEventListener(type, fn, opts);
    clearTimeout(ctx.timer);
    if (ctx.frame) cancelAnimationFrame(ctx.frame);
    ctx.seq++;
  };
}

function clickGutter(ctx, y) {
  const row = rowAt(ctx, y);
  if (!row || row.type !== "process") return;
  if (ctx.collapsed.has(row.pid)) ctx.collapsed.delete(row.pid); else ctx.collapsed.add(row.pid);
  relayout(ctx);
}

function rowAt(ctx, y) {
  if (y < RULER_H) return null;
  const cy = y - RULER_H + ctx.scroller.scrollTop;
  let lo = 0, hi = ctx.rows.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1, r = ctx.rows[mid];
    if (cy < r.y) hi = mid - 1; else if (cy >= r.y + r.h) lo = mid + 1; else return r;
  }
  return null;
}

// What is under (x, y): a slice (index into the window's columns) or a counter sample.
function hitTest(ctx, x, y) {
  if (!ctx.data || x < GUTTER) return null;
  const row = rowAt(ctx, y);
  if (!row || row.type !== "track") return null;
  if (row.track.kind === "counter") {
    const c = ctx.data.counters.get(row.track.id);
    if (!c || !c.t.length) return null;
    const t = xToTime(ctx, x);
    let lo = 0, hi = c.t.length - 1; // last sample at or before t
    while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (c.t[mid] <= t) lo = mid; else hi = mid - 1; }
    return { counter: c, i: lo, index: -1, row };
  }
  const depth = Math.floor((y - (RULER_H + row.y - ctx.scroller.scrollTop) - TRACK_PAD) / ROW_H);
  const list = ctx.data.byRow.get(rowKey(row.track.id, depth));
  if (!list) return null;
  const s = ctx.data.s, t = xToTime(ctx, x), tol = 2 * (ctx.view[1] - ctx.view[0]) / plotWidth(ctx);
  let lo = 0, hi = list.length; // first slice starting after t + tol
  while (lo < hi) { const mid = (lo + hi) >> 1; if (s.start[list[mid]] > t + tol) hi = mid; else lo = mid + 1; }
  let best = -1, bestD = Infinity;
  for (let j = lo - 1; j >= 0 && j >= lo - 64; j--) {
    const i = list[j], a = s.start[i], b = a + s.dur[i];
    const dist = t < a ? a - t : t > b ? t - b : 0;
    if (dist <= tol && dist < bestD) { best = i; bestD = dist; if (!dist) break; }
  }
  return best >= 0 ? { index: best, row } : null;
}

function hoverAt(ctx, x, y, e) {
  if (e.target !== ctx.canvas) { if (ctx.hover) { ctx.hover = null; paintOverlay(ctx); } hideTip(ctx); return; }
  if (x < GUTTER) { // the names column: a track's full name (the column cuts long ones)
    const row = rowAt(ctx, y);
    ctx.canvas.style.cursor = row && row.type === "process" ? "pointer" : "default";
    if (ctx.hover) { ctx.hover = null; paintOverlay(ctx); }
    if (!row) return hideTip(ctx);
    return showTip(ctx, x, y, row.type === "process"
      ? [el("strong", {}, row.name), el("div", { class: "muted" }, `${row.count} tracks · click to ${row.open ? "collapse" : "expand"}`)]
      : [el("strong", {}, row.track.name), el("div", { class: "muted" }, row.track.kind === "counter" ? "counter" : `${row.track.maxDepth + 1} levels deep`)]);
  }
  const hit = hitTest(ctx, x, y);
  const same = (a, b) => (!a && !b) || (a && b && a.index === b.index && a.counter === b.counter && a.i === b.i);
  ctx.canvas.style.cursor = hit && (hit.index >= 0 || hit.counter) ? "pointer" : "default"; // a counter point opens its card
  if (!same(hit, ctx.hover)) { ctx.hover = hit; paintOverlay(ctx); }
  if (!hit) return hideTip(ctx);
  if (hit.counter) {
    const c = hit.counter;
    showTip(ctx, x, y, [el("strong", {}, c.name || hit.row.track.name), el("div", {}, fmtValue(c.v[hit.i], c.unit)),
      el("div", { class: "muted" }, `at ${fmtTime(c.t[hit.i], (ctx.view[1] - ctx.view[0]) / 1000)}`)]);
  } else {
    const s = ctx.data.s, i = hit.index;
    showTip(ctx, x, y, [el("strong", {}, ctx.data.names[s.name[i]]), el("div", {}, fmtDur(s.dur[i])),
      el("div", { class: "muted" }, `at ${fmtTime(s.start[i], exact(s.dur[i]))}`)]);
  }
}

// Fixed to the viewport (x, y are canvas px): near the bottom or right edge it flips to
// the other side of the cursor instead of being cut off.
function showTip(ctx, x, y, children) {
  ctx.tip.replaceChildren(...children);
  ctx.tip.hidden = false;
  const r = ctx.canvas.getBoundingClientRect(), cx = r.left + x, cy = r.top + y;
  const w = ctx.tip.offsetWidth, h = ctx.tip.offsetHeight;
  ctx.tip.style.left = `${cx + 14 + w > window.innerWidth - 4 ? Math.max(4, cx - 14 - w) : cx + 14}px`;
  ctx.tip.style.top = `${cy + 16 + h > window.innerHeight - 4 ? Math.max(4, cy - 10 - h) : cy + 16}px`;
}

function hideTip(ctx) { ctx.tip.hidden = true; }

function clickAt(ctx, x, y) {
  if (y < RULER_H) return;
  const hit = hitTest(ctx, x, y);
  if (hit && hit.counter) return void pickCounter(ctx, { track: hit.row.track.id, t: hit.counter.t[hit.i] });
  selectAndRecord(ctx, hit && hit.index >= 0 ? ctx.data.prefix + ctx.data.s.id[hit.index] : "");
}

// -- a counter point: its card, its peak, the memory profile at it -----------------------

// ctr (the counter's track id) and ct (the point's time, ms) in the URL; a slice's ev and
// a counter point are one selection.
function pickCounter(ctx, { track, t, peak = "" }) {
  const key = peak ? `${track}|${peak}` : `${track}|${t}`;
  if (!peak && ctx.counterSel && ctx.counterSel.key === key) return;
  if (ctx.selectedId) select(ctx, "");
  ctx.counterSel = { key, track, time: peak ? null : t, value: null };
  setUrl({ ev: "", ctr: String(track), ct: peak ? "" : String(t) }, { push: true }); // exact: the sample's own time
  showCounter(ctx, track, t, peak);
}

async function showCounter(ctx, track, t, peak = "") {
  const sel = ctx.counterSel;
  ctx.card.classList.add("loading");
  const extra = peak ? { track, peak, ...(peak === "window" ? { start_ms: ctx.view[0], end_ms: ctx.view[1] } : {}) } : { track, t };
  let p;
  try {
    p = await cachedJson(`/api/trace/counter?${apiParams(ctx, extra)}`);
  } catch (err) {
    if (ctx.counterSel !== sel) return;
    ctx.card.classList.remove("loading");
    ctx.card.replaceChildren(errorBox(err, "Cannot read the counter"));
    return;
  }
  if (ctx.counterSel !== sel || current !== ctx) return;
  sel.time = p.time;
  sel.value = p.value;
  setUrl({ ev: "", ctr: String(track), ct: String(p.time) }); // the sample's own time (a peak's too)
  sel.key = `${track}|${p.time}`;
  if (peak) { // into view when it is outside
    if (p.time < ctx.view[0] || p.time > ctx.view[1]) {
      const half = (ctx.view[1] - ctx.view[0]) / 2;
      setWindow(ctx, p.time - half, p.time + half);
    }
  }
  paintOverlay(ctx);
  ctx.card.classList.remove("loading");
  ctx.card.classList.add("selected");
  const span = () => (ctx.view[1] - ctx.view[0]) / 1000;
  ctx.card.replaceChildren(...counterCard(p, readState(), {
    fmtValue, fmtTime: (ms) => fmtTime(ms, span()),
    onPeak: (which) => pickCounter(ctx, { track, t: p.time, peak: which }),
    onZoom: () => { const w = (ctx.view[1] - ctx.view[0]) / 20; setWindow(ctx, p.time - w, p.time + w); },
  }).filter(Boolean));
}

// ctr/ct in the URL (a shared link, another tool's link, back/forward): that point's card.
function counterFromUrl(ctx, state) {
  const key = state.ctr && state.ct ? `${state.ctr}|${Number(state.ct)}` : "";
  if (key && (!ctx.counterSel || ctx.counterSel.key !== key)) {
    ctx.counterSel = { key, track: Number(state.ctr), time: Number(state.ct), value: null };
    showCounter(ctx, Number(state.ctr), Number(state.ct));
  } else if (!key && ctx.counterSel && !state.ev) dropCounter(ctx);
}

function dropCounter(ctx) {
  if (!ctx.counterSel) return;
  ctx.counterSel = null;
  paintOverlay(ctx);
}

function selectAndRecord(ctx, id) {
  if (id === ctx.selectedId && !ctx.counterSel) return;
  const had = ctx.counterSel;
  setUrl({ ev: id, ctr: "", ct: "" }, { push: true });
  dropCounter(ctx);
  if (id !== ctx.selectedId || had) select(ctx, id);
}

// -- selection and details card --------------------------------------------------------

async function select(ctx, id, { fromUrl = false } = {}) {
  ctx.selectedId = id;
  ctx.selected = null;
  if (id) dropCounter(ctx);
  draw(ctx);
  if (!id) { ctx.card.replaceChildren(el("p", { class: "muted" }, "Click a slice for its details.")); ctx.card.classList.remove("selected"); return; }
  const i = ctx.data ? ctx.data.idIndex.get(id) : undefined;
  if (i !== undefined) { // draw the highlight now; the card follows when the args come
    const s = ctx.data.s;
    ctx.selected = { id, start: s.start[i], dur: s.dur[i], track: s.track[i], depth: s.depth[i], name: ctx.data.names[s.name[i]], index: i };
    draw(ctx);
  }
  ctx.card.classList.add("loading");
  let ev;
  const fromPreview = id.startsWith("p");
  try {
    ev = fromPreview ? await getJson(`/api/trace/preview/event?${apiParams(ctx, { id: id.slice(1) })}`)
      : await cachedJson(`/api/trace/event?${apiParams(ctx, { id })}`);
  } catch (err) {
    if (ctx.selectedId !== id) return;
    ctx.card.classList.remove("loading");
    ctx.card.replaceChildren(errorBox(err, fromUrl ? `The selected event (ev=${id}) is not in this trace` : "Cannot load the event"));
    return;
  }
  if (ctx.selectedId !== id || current !== ctx) return;
  if (fromPreview && !ev.preview) { // the index landed first: the exact window finds it (remapSelection)
    ctx.card.classList.remove("loading");
    if (!ctx.selected) { // nothing to find it by: a link to a preview slice, opened after the build
      ctx.card.replaceChildren(el("p", { class: "muted", id: "tv-card-gone" },
        `The link's slice (ev=${id}) was one of the build's preview, which is gone now that the index is built: click the slice again.`));
    }
    return;
  }
  ctx.selected = { id, start: ev.start, dur: ev.dur, track: ev.track && ev.track.id, depth: ev.depth, name: ev.name, index: -1 };
  locateSelected(ctx);
  draw(ctx);
  ctx.card.classList.remove("loading");
  ctx.card.classList.add("selected");
  ctx.card.replaceChildren(...eventCard(ctx, ev).filter(Boolean));
}

function locateSelected(ctx) {
  const i = ctx.data.idIndex.get(ctx.selectedId);
  ctx.selected.index = i === undefined ? -1 : i;
}

function eventCard(ctx, ev) {
  const track = ev.track || {};
  const state = readState();
  const rows = [
    ["start", fmtTime(ev.start, exact(ev.dur)) + " since the trace start"],
    ["duration", `${fmtDur(ev.dur)}`, `${(ev.dur * 1e6).toLocaleString("en-US", { maximumFractionDigits: 3 })} ns`],
    ["end", fmtTime(ev.start + ev.dur, exact(ev.dur))],
    ["track", [track.process ? `${track.process} › ` : "", track.name || ""].join("")],
  ];
  if (ev.hloOp) rows.push(["HLO op", el("code", {}, ev.hloOp)]);
  if (ev.hloModule) rows.push(["HLO module", el("code", {}, ev.hloModule)]);
  const args = Object.entries(ev.args || {});
  const tail = ev.preview
    ? [el("p", { class: "muted", id: "tv-card-pending" }, "Args and links to the other tools arrive with the index (this slice is from the preview).")]
    : [eventLinks(ev, state), // HLO view, memory viewer, memory profile: only the targets the server found (app/trace_viewer_links.py)
      el("h4", {}, `Args (${args.length})`),
      args.length
        ? el("table", { class: "tv-args", id: "tv-args" }, el("tbody", {}, args.map(([k, v]) => el("tr", {},
          el("th", {}, k), el("td", {}, argValue(v))))))
        : el("p", { class: "muted" }, "No args."),
      el("p", { class: "muted small" }, `event id ${ev.id}`)];
  return [
    el("div", { class: "tv-card-head" },
      el("h3", { class: "tv-card-name", title: ev.name }, ev.name),
      el("button", { type: "button", id: "tv-card-zoom", title: "Zoom to this slice (F)", onclick: () => zoomToSlice(ctx, ev.start, ev.dur) }, "Zoom to slice")),
    el("dl", { class: "kv tv-kv" }, rows.flatMap(([k, v, title]) => [el("dt", {}, k), el("dd", title ? { title } : {}, v)])),
    ...tail,
  ];
}

function argValue(v) {
  const text = typeof v === "string" ? v : JSON.stringify(v);
  if (text.length <= 400) return text;
  return el("details", {}, el("summary", {}, `${text.slice(0, 120)}… (${text.length.toLocaleString("en-US")} characters)`), el("pre", {}, text.slice(0, 20000)));
}

// -- search ----------------------------------------------------------------------------

function searchTyped(ctx) {
  const q = ctx.search.value.trim();
  setUrl({ q });
  runSearch(ctx, q);
}

async function runSearch(ctx, q) {
  const seq = ++ctx.searchSeq;
  ctx.searchQ = q;
  draw(ctx);
  ctx.hits = null;
  ctx.searchNav.hidden = true;
  if (!q) { ctx.results.replaceChildren(); ctx.results.classList.remove("on"); return; }
  ctx.results.classList.add("on");
  ctx.results.replaceChildren(el("p", { class: "muted" }, `Searching “${q}”…`));
  let data;
  try {
    data = await searchPage(ctx, q, 0);
  } catch (err) {
    if (seq === ctx.searchSeq) ctx.results.replaceChildren(errorBox(err, "Search failed"));
    return;
  }
  if (seq !== ctx.searchSeq || current !== ctx) return;
  if (data.preview === false) return; // the index landed meanwhile: indexLanded asks again
  // The answer's total counts every match; the pages of SEARCH_PAGE come as the user steps.
  ctx.hits = { q, query: data.query ?? q, total: data.total ?? (data.matches || []).length, page: 0, matches: data.matches || [], cursor: -1,
    preview: data.preview ? { of: data.previewEventsSize, all: data.totalEventsSize } : null, prefix: data.preview ? "p" : "" };
  showResults(ctx);
}

function searchPage(ctx, q, page) {
  const params = apiParams(ctx, { q, limit: SEARCH_PAGE, offset: page * SEARCH_PAGE });
  return ctx.previewing ? getJson(`/api/trace/preview/search?${params}`) : cachedJson(`/api/trace/search?${params}`);
}

// The table holds the page of matches around the cursor; its head says how many in all.
function showResults(ctx) {
  const h = ctx.hits, matches = h.matches, total = h.total, base = h.page * SEARCH_PAGE;
  const trackName = new Map((ctx.data ? ctx.data.tracks : []).map((t) => [t.id, t.name]));
  ctx.searchNav.hidden = !total;
  showMatchPos(ctx);
  ctx.results.replaceChildren(
    ...(h.preview ? [el("p", { class: "tv-note", id: "tv-results-preview" },
      `Searched the preview only (${h.preview.of.toLocaleString("en-US")} of the trace's ${h.preview.all.toLocaleString("en-US")} slices): the index's answer replaces this when it lands.`)] : []),
    el("h4", { id: "tv-results-head" }, matches.length
      ? `${total.toLocaleString("en-US")} slices match “${h.query}”${total > matches.length ? ` (${(base + 1).toLocaleString("en-US")}–${(base + matches.length).toLocaleString("en-US")} listed; ‹ › or Enter / Shift+Enter step through all)` : ""}`
      : total ? `No more matches of “${h.query}”.` : `No slice matches “${h.query}”.`),
    matches.length ? el("table", { class: "tv-matches" },
      el("thead", {}, el("tr", {}, el("th", {}, "name"), el("th", { class: "num" }, "start"), el("th", { class: "num" }, "duration"), el("th", {}, "track"))),
      el("tbody", {}, matches.map((m, j) => el("tr", { class: "tv-match" + (base + j === h.cursor ? " on" : ""), "data-id": h.prefix + m.id, tabindex: "0",
        onclick: () => openMatch(ctx, m, base + j), onkeydown: (e) => { if (e.key === "Enter") openMatch(ctx, m, base + j); } },
      el("td", { class: "tv-match-name", title: m.name }, m.name),
      el("td", { class: "num", title: fmtTime(m.start, exact(m.dur)) }, fmtTime(m.start, 1e-3)),
      el("td", { class: "num" }, fmtDur(m.dur)),
      el("td", { class: "tv-match-track" }, trackName.get(m.track) || String(m.track)))))) : null);
}

function showMatchPos(ctx) {
  const h = ctx.hits;
  const n = (v) => v.toLocaleString("en-US");
  ctx.matchPos.textContent = !h || !h.total ? "" : h.cursor < 0 ? `${n(h.total)} matches` : `match ${n(h.cursor + 1)} of ${n(h.total)}`;
}

// Next / previous match over all of them (wrapping), fetching the page it is on.
async function stepMatch(ctx, dir) {
  const h = ctx.hits;
  if (!h || !h.total) return;
  // From the match last asked for, so keys pressed while a page loads all count.
  const from = h.want ?? h.cursor;
  const i = from < 0 ? (dir > 0 ? 0 : h.total - 1) : (from + dir + h.total) % h.total;
  h.want = i;
  const page = Math.floor(i / SEARCH_PAGE);
  if (page !== h.page) {
    const seq = ctx.searchSeq;
    let data;
    try {
      data = await searchPage(ctx, h.q, page);
    } catch (err) {
      if (seq === ctx.searchSeq) ctx.results.replaceChildren(errorBox(err, "Search failed"));
      return;
    }
    if (seq !== ctx.searchSeq || current !== ctx || ctx.hits !== h || h.want !== i) return;
    h.page = page;
    h.matches = data.matches || [];
    h.total = data.total ?? h.total;
    h.cursor = i;
    showResults(ctx);
  }
  const m = h.matches[i - page * SEARCH_PAGE];
  if (m) openMatch(ctx, m, i);
}

function openMatch(ctx, m, index) {
  if (ctx.hits && index !== undefined) { ctx.hits.cursor = ctx.hits.want = index; showMatchPos(ctx); }
  const id = ((ctx.hits && ctx.hits.prefix) || "") + m.id; // a preview match: the preview's id
  for (const r of ctx.results.querySelectorAll(".tv-match")) r.classList.toggle("on", r.dataset.id === id);
  const span = Math.max(m.dur * 1.6, MIN_SPAN_MS * 20, (ctx.full[1] - ctx.full[0]) * 1e-7);
  const mid = m.start + m.dur / 2;
  ctx.view = clampWindow(ctx, mid - span / 2, mid + span / 2);
  const vs = ctx.view[1] - ctx.view[0];
  setUrl({ ev: id, ctr: "", ct: "", start_ms: fmtNum(ctx.view[0], vs), end_ms: fmtNum(ctx.view[1], vs) }, { push: true });
  const row = ctx.trackRow.get(m.track);
  if (row) { // bring its track into view
    const top = ctx.scroller.scrollTop, h = ctx.cssH - RULER_H;
    if (row.y < top || row.y + Math.min(row.h, h) > top + h) ctx.scroller.scrollTop = Math.max(0, row.y - 20);
  }
  select(ctx, id);
  schedule(ctx);
}

// A process header's text as drawGutter writes it (in its font), whether on screen now or not.
function headerText(ctx, row) {
  const g = ctx.g, font = g.font;
  g.font = BOLD;
  const text = processLabel(g, row, GUTTER - 12);
  g.font = font;
  return text;
}

// -- test hook -------------------------------------------------------------------------
// For the browser test and for debugging from the console: what is drawn where (page
// coordinates), so a test can click a slice it found through the API.
window.__traceViewer = {
  ready: () => Boolean(current && current.ready && current.data && !current.root.dataset.busy && !current.frame && !current.timerActive),
  window: () => current ? [...current.view] : null,
  dataWindow: () => current && current.dataWindow ? [...current.dataWindow] : null,
  resolution: () => current ? resolution(current) : null,
  selected: () => current ? current.selectedId : "",
  previewing: () => Boolean(current && current.previewing),
  // drawn and quiet (no fetch, frame or timer pending), the preview's answers too
  settled: () => Boolean(current && current.data && !current.root.dataset.busy && !current.frame && !current.timerActive),
  searchPos: () => current && current.hits ? { cursor: current.hits.cursor, total: current.hits.total, page: current.hits.page } : null,
  paintMs: () => current ? current.paintMs : null,
  flows: () => current && current.data ? { inWindow: current.data.raw.flows ? current.data.raw.flows.from.length : 0, drawn: current.flowsDrawn || 0 } : null,
  // One full repaint now, rasterised (reading a pixel waits for it): ms.
  benchPaint: () => {
    const ctx = current;
    if (ctx.frame) { cancelAnimationFrame(ctx.frame); ctx.frame = 0; }
    const t0 = performance.now();
    paint(ctx);
    ctx.g.getImageData(0, 0, 1, 1);
    return performance.now() - t0;
  },
  visibleSlices: () => {
    const ctx = current;
    if (!ctx || !ctx.data) return [];
    if (ctx.frame) { cancelAnimationFrame(ctx.frame); ctx.frame = 0; paint(ctx); } // what the next frame shows
    const r = ctx.canvas.getBoundingClientRect(), s = ctx.data.s, out = [];
    for (let j = 0; j < ctx.drawn.n; j++) {
      const i = ctx.drawn.idx[j], box = sliceBox(ctx, i);
      if (!box || box.y < RULER_H || box.y + box.h > ctx.cssH) continue;
      out.push({ id: s.id[i], name: ctx.data.names[s.name[i]], track: s.track[i], depth: s.depth[i], start: s.start[i], dur: s.dur[i],
        x: r.left + box.x, y: r.top + box.y, w: box.w, h: box.h });
    }
    return out;
  },
  rows: () => current ? current.rows.map((row) => ({ type: row.type, name: row.type === "process" ? row.name : row.track.name,
    label: row.type === "process" ? headerText(current, row) : undefined, // the header's text as drawn
    kind: row.type === "track" ? row.track.kind : "process", id: row.type === "track" ? row.track.id : null, y: row.y, h: row.h })) : [],
  pixel: (x, y) => { // RGB of the canvas at page coordinates
    const ctx = current, r = ctx.canvas.getBoundingClientRect();
    return [...ctx.g.getImageData(Math.round((x - r.left) * ctx.dpr), Math.round((y - r.top) * ctx.dpr), 1, 1).data.slice(0, 3)];
  },
  setWindow: (s, e) => current && setWindow(current, s, e),
  xOf: (t) => current ? current.canvas.getBoundingClientRect().left + timeToX(current, t) : null, // page x of a time
  // where the samples of counter `track` (in the window's data) are drawn, at page
  // coordinates: a click there picks one (the last sample at or before the clicked time);
  // [] when its row is out of view
  counterPoints: (track) => {
    const ctx = current, c = ctx && ctx.data && ctx.data.counters.get(track);
    const row = c && ctx.rows.find((r) => r.type === "track" && r.track.id === track);
    const y = row ? RULER_H + row.y - ctx.scroller.scrollTop + row.h / 2 : -1;
    if (!row || y < RULER_H || y > ctx.cssH) return [];
    const r = ctx.canvas.getBoundingClientRect();
    return Array.from(c.t, (t, i) => ({ x: r.left + timeToX(ctx, t), y: r.top + y, t, v: c.v[i], next: i + 1 < c.t.length ? c.t[i + 1] : null }))
      .filter((p) => p.x >= r.left + GUTTER && p.x <= r.left + ctx.cssW);
  },
  scrollToTrack: (track) => { // bring a track's row into view
    const ctx = current, row = ctx && ctx.rows.find((r) => r.type === "track" && r.track.id === track);
    if (!row) return false;
    ctx.scroller.scrollTop = Math.max(0, row.y - 80);
    if (ctx.frame) { cancelAnimationFrame(ctx.frame); ctx.frame = 0; }
    paint(ctx);
    return true;
  },
  counterValues: (track) => { const c = current && current.data && current.data.counters.get(track); return c ? [...c.v] : []; },
  counterSelected: () => current && current.counterSel ? { track: current.counterSel.track, time: current.counterSel.time, value: current.counterSel.value } : null,
  // the sample dots of sparse counters (drawCounters), at page coordinates
  counterDots: () => {
    if (!current) return [];
    const r = current.canvas.getBoundingClientRect();
    return (current.counterDots || []).map((d) => ({ track: d.track, x: r.left + d.x, y: r.top + d.y }));
  },
};

export default {
  tool: "trace_viewer",
  css: ["pages/trace_viewer.css"],
  keys: {
    hosts: { resetOn: ["run", "host"] },
    start_ms: { resetOn: ["run", "tool", "host"] },
    end_ms: { resetOn: ["run", "tool", "host"] },
    ev: { resetOn: ["run", "tool", "host"] },
    q: { resetOn: ["run", "tool", "host"] },
    flows: {},
    ctr: { resetOn: ["run", "tool", "host"] }, // a counter point: its track id,
    ct: { resetOn: ["run", "tool", "host"] }, // and its time (ms)
  },
  render: renderTraceViewer,
};
