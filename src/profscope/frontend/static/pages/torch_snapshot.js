// PyTorch CUDA memory snapshot page: one snapshot file (a run), one device (the host
// picker, cuda:N); the memory_profile tool of a snapshot run. Data:
// /api/snapshot/{overview,timeline,segments,events,state,stack,stacks,compare} (the JSON
// contract is tools/memory_profile_snapshot.py's module docstring). URL keys: t (the
// selected event index; empty = the peak), tl (the timeline shows allocations or, with
// "segments", reserved segments), detail (how many are drawn individually), x (index or
// time axis), win (the timeline's zoom window), find (the event search), q (the compare
// sites filter), other (the snapshot compared with; base, the name every tool's compare
// takes, docs/compare.md, is read the same, and wins).
//
// The timeline's polygons (up to 15,000, as memory_viz draws) are painted on a canvas
// under a transparent Plotly chart that keeps the axes, lines, legend and zoom: as SVG
// they would be hundreds of thousands of path vertices. Hit-testing is ours too (a
// bisection per polygon). Stepping through events touches neither Plotly nor the DOM
// beyond a few text nodes: the selected event's line is on an overlay canvas, the
// allocator's segment map is a canvas, states are prefetched around the selection and
// the icicle follows once the stepping pauses.
import { el } from "../lib/dom.js";
import { go, readState, setUrl, stateUrl } from "../lib/state.js";
import { cachedJson, errorBox, getJson } from "../lib/api.js";
import { byteTicks, fmtBytes, fmtCount as n, fmtHex as hex, fmtMsFixed } from "../lib/format.js";
import { BLOCK as BLOCK_COLORS, P, SERIES as PALETTE, rgba } from "../lib/colors.js";
import { bytesAxis, purge, react as plotReact } from "../lib/plotly.js";
import { sortableTable } from "../lib/table.js";
import { COMPARE_KEYS, comparePicker } from "../lib/compare.js";
import { hostsSection, showsHosts } from "./memory_profile_hosts.js";
import { drawIcicle } from "../lib/icicle.js";

const ZOOM_DEBOUNCE_MS = 300;
const STACKS_AFTER_STEP_MS = 350; // the icicle waits until the stepping pauses
const DETAILS = [100, 500, 1000, 2000, 5000, 15000]; // memory_viz's default is its maximum, 15,000
const EVENT_ROW_PX = 18;
const EVENT_PAGE = 2000; // rows per /api/snapshot/events answer (tools' EVENTS_PAGE)
const SEG_ROW_PX = 14;
const STATES_KEPT = 64;
const PALE = PALETTE.map((c) => rgba(c, 0.45));

let current = null; // the view on screen; the selected event changes in place
const stacks = new Map(); // "run\0stackId\0filtered" -> promise of /api/snapshot/stack

const bytes = (v) => (v === null || v === undefined ? "—" : `${fmtBytes(v)} (${n(v)} bytes)`);
const fmtMs = (us) => fmtMsFixed(us / 1000); // event times are µs
const isTyping = (t) => t && (t.tagName === "INPUT" || t.tagName === "SELECT" || t.tagName === "TEXTAREA" || t.isContentEditable);

function api(view, ctx, params = {}, run = ctx.run.name) {
  const q = new URLSearchParams({ run, host: ctx.host });
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== "") q.set(k, v);
  return `/api/snapshot/${view}?${q}`;
}

function stackOf(ctx, stackId, { run = ctx.run.name, filtered = true } = {}) {
  const key = `${run}\u0000${stackId}\u0000${filtered}`;
  if (!stacks.has(key)) {
    const p = getJson(api("stack", ctx, { stack: stackId, filtered: filtered ? null : "0" }, run));
    p.catch(() => stacks.delete(key));
    stacks.set(key, p);
  }
  return stacks.get(key);
}

// -- entry point ---------------------------------------------------------------------

async function renderSnapshot(view, state, run, details) {
  const host = state.host || (details && details.hosts && details.hosts[0]) || "cuda:0";
  const key = [run.name, host].join("\u0000");
  if (current && current.key === key && view.contains(current.root)) return update(current, state);
  leave();
  const picker = comparePicker(state, run, { tool: "memory_profile" }); // every tool's "Compare with…" (base=)
  const root = el("div", { class: "ts" },
    el("div", { class: "ts-head" }, el("h1", {}, "Memory snapshot"),
      el("span", { class: "muted" }, `${run.name} · ${host}`)), picker,
    showsHosts(run) ? hostsSection(run, host) : null, // a distributed job: every rank's peak
    el("p", { class: "muted", id: "ts-loading" }, "Reading the snapshot…"));
  view.replaceChildren(root);
  const ctx = { key, root, run, host, picker, charts: [], t: null, states: new Map(), evPages: new Map() };
  let ov;
  try { ov = await cachedJson(api("overview", ctx)); } catch (err) {
    if (current !== null || !view.contains(root)) return;
    root.lastChild.replaceWith(errorBox(err, "Cannot read this snapshot"));
    return;
  }
  if (!view.contains(root)) return; // the user moved on
  root.lastChild.remove();
  ctx.ov = ov;
  current = ctx;
  ctx.traceSpot = el("span", { id: "ts-trace-spot" });
  loadClock(ctx);
  ctx.xMode = xModeOf(ctx, state);
  ctx.kind = kindOf(state);
  ctx.detail = detailOf(state);
  ctx.win = state.win || "";
  ctx.card = el("div", { class: "ts-card", id: "ts-card" }, el("p", { class: "muted" }, "Hover a polygon on the timeline to see the allocation (or segment) and its stack."));
  ctx.plotBox = el("div", { class: "ts-plotbox" });
  ctx.canvas = el("canvas", { class: "ts-canvas", id: "ts-polygons" });
  ctx.overlay = el("canvas", { class: "ts-overlay", id: "ts-overlay" });
  ctx.plot = el("div", { class: "ts-chart", id: "ts-timeline" });
  ctx.plotBox.append(ctx.canvas, ctx.plot, ctx.overlay);
  ctx.timelineNote = el("div", { class: "muted small", id: "ts-timeline-note" });
  ctx.statePanel = el("div", { id: "ts-state", class: "ts-state" });
  ctx.eventsPanel = el("div", { id: "ts-events-panel", class: "ts-events-panel" });
  ctx.stacksPanel = el("div", { id: "ts-stacks" });
  ctx.comparePanel = el("div", { id: "ts-compare" });
  ctx.hint = el("p", { class: "ts-hint", id: "ts-hint" });
  root.append(
    overviewStrip(ctx, ov),
    el("div", { class: "ts-section-head" }, el("h2", { id: "ts-timeline-title" }, ""), timelineControls(ctx)),
    ctx.hint,
    el("div", { class: "ts-layout" }, el("div", {}, ctx.plotBox, ctx.timelineNote), el("aside", { class: "ts-aside" }, ctx.card)),
    el("h2", {}, "Allocator state"),
    el("p", { class: "ts-hint" }, "The trace's events, as memory_viz lists them; click one or step with the arrow keys (↑ ↓ or ← →). Find an address (0x…, or memory_viz's b…_N) or a stack frame (a file or function name)."),
    el("div", { class: "ts-state-layout" }, ctx.eventsPanel, ctx.statePanel),
    el("h2", {}, "Live memory by stack"), ctx.stacksPanel,
    el("h2", {}, "Compare with another snapshot"), ctx.comparePanel);
  setupEvents(ctx, state);
  setupState(ctx);
  setupCompare(ctx, state);
  ctx.onKey = (e) => onKey(ctx, e);
  document.addEventListener("keydown", ctx.onKey);
  titleTimeline(ctx);
  await loadTimeline(ctx, ...windowOf(ctx.win));
  update(ctx, state);
}

// The x axis (x=index|time) and the zoomed window (win=<start>,<end>: event indices,
// or time_us with x=time, as the timeline API takes them) live in the URL, like the
// selected event (t=), what the timeline stacks (tl=), its detail and the compared run.
// Time needs two events: the last one's state has no later time to end at (one-event
// snapshots, as the 2023 flexgen ones, are drawn by index: one event wide).
function hasTimeAxis(ctx) { return ctx.ov.summary.hasTime && ctx.ov.summary.traceEntries > 1; }
function xModeOf(ctx, state) { return state.x === "time" && hasTimeAxis(ctx) ? "time" : "index"; }
function kindOf(state) { return state.tl === "segments" ? "segments" : "allocations"; }
function detailOf(state) {
  const d = Math.trunc(Number(state.detail));
  return Number.isFinite(d) && d >= 0 && d <= DETAILS[DETAILS.length - 1] && state.detail !== "" ? d : DETAILS[DETAILS.length - 1];
}
function windowOf(win) {
  const m = /^(\d+),(\d+)$/.exec(win || "");
  return m && Number(m[2]) - Number(m[1]) >= 2 ? [Number(m[1]), Number(m[2])] : [null, null];
}

function leave() {
  if (!current) return;
  purge(current.charts);
  clearTimeout(current.zoomTimer);
  clearTimeout(current.stacksTimer);
  document.removeEventListener("keydown", current.onKey);
  if (current.resizeObs) current.resizeObs.disconnect();
  current = null;
}

function update(ctx, state) {
  if (comparedWith(state) !== ctx.otherShown) { // the picker's "Stop comparing" follows the URL
    const picker = comparePicker(state, ctx.run, { tool: "memory_profile" });
    ctx.picker.replaceWith(picker);
    ctx.picker = picker;
  }
  const peak = ctx.ov.summary.peak.event;
  const t = state.t !== "" && Number.isFinite(Number(state.t)) ? Math.trunc(Number(state.t)) : null;
  const event = t === null ? peak : t;
  if (event !== ctx.t || (t === null) !== ctx.tIsPeak) {
    ctx.t = event;
    ctx.tIsPeak = t === null;
    drawOverlay(ctx);
    renderState(ctx);
    if (ctx.events) ctx.events.show(event);
    clearTimeout(ctx.stacksTimer);
    ctx.stacksTimer = setTimeout(() => renderStacks(ctx), ctx.stepping ? STACKS_AFTER_STEP_MS : 0);
    ctx.stepping = false;
  }
  if (ctx.sites && (state.q || "") !== ctx.sites.filter()) ctx.sites.setFilter(state.q || "");
  if (ctx.events && (state.find || "") !== ctx.findShown) runFind(ctx, state.find || "");
  const x = xModeOf(ctx, state), kind = kindOf(state), detail = detailOf(state);
  if (x !== ctx.xMode || kind !== ctx.kind || detail !== ctx.detail || (state.win || "") !== ctx.win) {
    ctx.xMode = x;
    ctx.kind = kind;
    ctx.detail = detail;
    ctx.win = state.win || "";
    ctx.range = null;
    syncControls(ctx);
    titleTimeline(ctx);
    loadTimeline(ctx, ...windowOf(ctx.win));
  }
  if (ctx.comparePick && comparedWith(state) !== ctx.otherShown) showCompare(ctx, comparedWith(state));
}

function select(event) {
  go({ ...readState(), t: event === null || event === undefined ? "" : String(event) });
}

// Arrow-key stepping (memory_viz: ↑ ↓ in its event list; ← → too): the URL follows
// without a history entry per step, and the page updates itself without the shell.
function step(ctx, d) {
  const total = ctx.ov.summary.traceEntries;
  if (!total) return;
  const next = Math.max(0, Math.min(total - 1, (ctx.t ?? 0) + d));
  if (next === ctx.t && !ctx.tIsPeak) return;
  ctx.stepStart = performance.now();
  ctx.stepping = true;
  setUrl({ ...readState(), t: String(next) });
  update(ctx, readState());
}

function onKey(ctx, e) {
  if (current !== ctx || isTyping(e.target) || e.altKey || e.ctrlKey || e.metaKey) return;
  const d = { ArrowDown: 1, ArrowRight: 1, ArrowUp: -1, ArrowLeft: -1, PageDown: 20, PageUp: -20 }[e.key];
  if (!d) return;
  e.preventDefault();
  step(ctx, d);
}

// -- 1. overview strip -----------------------------------------------------------------

function overviewStrip(ctx, ov) {
  const s = ov.summary;
  const f = ov.format || {};
  const overflow = ov.warnings.filter((w) => w.code === "trace_overflow");
  const others = ov.warnings.filter((w) => w.code !== "trace_overflow");
  const tile = (label, value, sub, id) => el("div", { class: "ts-tile", id }, el("div", { class: "label" }, label), el("div", { class: "value" }, value), sub ? el("div", { class: "sub muted" }, sub) : null);
  const link = (ev) => (ev === null || ev === undefined ? "—" : el("a", { href: "#", onclick: (e) => { e.preventDefault(); select(ev); } }, `event ${n(ev)}`));
  const at = (p) => (p.timeUs !== null && p.timeUs !== undefined && s.hasTime ? ` · +${fmtMs(p.timeUs - s.firstTimeUs)}` : "");
  const pr = s.peakReserved || { bytes: s.finalReservedBytes, event: null, timeUs: null };
  const segEvents = ["segment_alloc", "segment_free", "segment_map", "segment_unmap"].some((k) => (s.actions || {})[k]);
  const actions = Object.entries(s.actions || {}).map(([k, v]) => `${k} ${n(v)}`).join(" · ");
  return el("section", { class: "ts-overview", id: "ts-overview" },
    overflow.map((w) => el("div", { class: "ts-overflow", role: "alert", id: "ts-overflow" }, el("strong", {}, "Events may be missing: "), w.message)),
    el("div", { class: "ts-tiles" },
      tile("Peak allocated", el("span", { id: "ts-peak", "data-bytes": String(s.peak.bytes) }, fmtBytes(s.peak.bytes)),
        el("span", { title: "the most bytes in live allocations at once (their requested sizes, as the trace records them)" }, `${n(s.peak.bytes)} bytes · `, link(s.peak.event), at(s.peak))),
      tile("Peak reserved", el("span", { id: "ts-peak-reserved", "data-bytes": String(pr.bytes) }, fmtBytes(pr.bytes)),
        el("span", { title: "the most bytes in the allocator's segments at once (PyTorch's reserved, cached memory)" }, `${n(pr.bytes)} bytes · `,
          segEvents ? [link(pr.event), at(pr)] : "the same all along (no segment events)")),
      tile("Final allocated", fmtBytes(s.finalActiveBytes), `${n(s.finalActiveBytes)} bytes in blocks (requested ${fmtBytes(s.finalRequestedBytes)})`),
      tile("Final reserved", fmtBytes(s.finalReservedBytes), `${n(ov.segments.count)} segments${ov.segments.expandableCount ? `, ${ov.segments.expandableCount} expandable` : ""}`),
      tile("Trace", `${n(s.traceEntries)} events`, actions),
      tile("Allocations", n(s.allocations), `before recording: ${n(s.preexisting.count)} (${fmtBytes(s.preexisting.bytes)})`),
      tile("Format", `${f.format || "?"}${f.pickleProtocol ? ` (protocol ${f.pickleProtocol})` : ""}`, `era ${f.era || "unknown"}${s.hasTime ? "" : " · no timestamps"}`)),
    others.length ? el("ul", { class: "ts-warnings", id: "ts-warnings" }, others.map((w) => el("li", { "data-code": w.code }, w.message))) : null,
    ov.ooms.length ? el("div", { class: "ts-ooms", id: "ts-ooms" }, el("h3", {}, `Out-of-memory events (${ov.ooms.length})`),
      el("table", {}, el("thead", {}, el("tr", {}, ["event", "requested", "device free", "allocated", "reserved", "largest free block"].map((h, i) => el("th", { class: i ? "num" : "" }, h)))),
        el("tbody", {}, ov.ooms.map((o) => el("tr", { class: "ts-clickable", "data-event": String(o.event), onclick: () => select(o.event) },
          el("td", {}, el("a", { href: "#", onclick: (e) => e.preventDefault() }, `event ${n(o.event)}`)),
          el("td", { class: "num" }, fmtBytes(o.requestedBytes)), el("td", { class: "num" }, fmtBytes(o.deviceFreeBytes)),
          el("td", { class: "num" }, fmtBytes(o.liveBytes)), el("td", { class: "num" }, fmtBytes(o.reservedBytes)),
          el("td", { class: "num" }, fmtBytes(o.largestFreeBlock))))))) : null,
    el("details", { class: "ts-settings", id: "ts-settings" }, el("summary", {}, "Allocator settings"),
      ov.allocatorSettings ? el("pre", {}, JSON.stringify(ov.allocatorSettings, null, 1)) : el("p", { class: "muted" }, "Not recorded in this snapshot (older PyTorch).")));
}

// -- 2. timeline -----------------------------------------------------------------------

function timelineControls(ctx) {
  const hasTime = hasTimeAxis(ctx);
  const pick = el("select", { id: "ts-xmode", "aria-label": "x axis", disabled: !hasTime,
    onchange: (e) => go({ ...readState(), x: e.target.value === "time" ? "time" : "", win: "" }) },
  el("option", { value: "index" }, "event index"), hasTime ? el("option", { value: "time" }, "time") : null);
  const kind = el("select", { id: "ts-kind", "aria-label": "what the timeline stacks",
    onchange: (e) => go({ ...readState(), tl: e.target.value === "segments" ? "segments" : "" }) },
  el("option", { value: "allocations" }, "allocations (active memory)"), el("option", { value: "segments" }, "segments (reserved memory)"));
  const detail = el("select", { id: "ts-detail", "aria-label": "how many are drawn individually",
    onchange: (e) => go({ ...readState(), detail: Number(e.target.value) === DETAILS[DETAILS.length - 1] ? "" : e.target.value }) },
  DETAILS.map((d) => el("option", { value: String(d) }, `up to ${n(d)}`)));
  ctx.pickX = pick;
  ctx.pickKind = kind;
  ctx.pickDetail = detail;
  syncControls(ctx);
  return el("div", { class: "ts-controls" },
    el("label", { class: "ts-picker" }, "show ", kind),
    el("label", { class: "ts-picker", title: "memory_viz's detail slider: how many allocations get a polygon of their own; the rest are the grey band" }, "detail ", detail),
    el("label", { class: "ts-picker" }, "x axis ", pick, hasTime ? null : el("span", { class: "muted" }, ctx.ov.summary.hasTime ? " (one event)" : " (no timestamps)")));
}

function syncControls(ctx) {
  ctx.pickX.value = ctx.xMode;
  ctx.pickKind.value = ctx.kind;
  if (!DETAILS.includes(ctx.detail)) ctx.pickDetail.append(el("option", { value: String(ctx.detail) }, `up to ${n(ctx.detail)}`));
  ctx.pickDetail.value = String(ctx.detail);
}

function titleTimeline(ctx) {
  const seg = ctx.kind === "segments";
  ctx.root.querySelector("#ts-timeline-title").textContent = seg ? "Reserved memory timeline (segments)" : "Active memory timeline";
  ctx.hint.textContent = seg
    ? "Each polygon is one segment the allocator reserved from CUDA (memory_viz's active cached segment timeline); the dashed line is the reserved total. Drag to zoom, click to select an event."
    : "Each polygon is one allocation, stacked as memory_viz stacks them; the grey band holds what the detail setting leaves out. Drag to zoom: the server sends detail for the window. Click to select an event.";
}

// x values: event indices, or ms since the first event (the server speaks time_us).
function toX(ctx, v) { return ctx.xMode === "time" ? (v - ctx.ov.summary.firstTimeUs) / 1000 : v; }
function xs(ctx, arr) { return ctx.xMode === "time" ? arr.map((v) => toX(ctx, v)) : arr; }

// The event index at an x value (time mode maps through the full view's line).
function eventAt(ctx, x) {
  const total = ctx.fullLine;
  if (ctx.xMode !== "time" || !total) return Math.round(x);
  let lo = 0, hi = total.x.length - 1;
  while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (toX(ctx, total.x[mid]) <= x) lo = mid; else hi = mid - 1; }
  return total.index[lo];
}

function columnsFor(ctx) {
  // About one column per pixel of the plot: a finer grid is not visible, only heavier.
  const w = ctx.plotBox.clientWidth || 1000;
  return Math.max(400, Math.min(2000, Math.round(w * 1.5)));
}

async function loadTimeline(ctx, start, end) {
  const seq = (ctx.tlSeq = (ctx.tlSeq || 0) + 1);
  const view = ctx.kind === "segments" ? "segments" : "timeline";
  let tl;
  const t0 = performance.now();
  try { tl = await cachedJson(api(view, ctx, { x: ctx.xMode, start, end, top: ctx.detail, max_points: columnsFor(ctx) })); } catch (err) {
    if (seq === ctx.tlSeq) ctx.timelineNote.replaceChildren(errorBox(err, "Timeline"));
    return;
  }
  if (seq !== ctx.tlSeq || current !== ctx) return;
  ctx.fetchMs = performance.now() - t0;
  const line = tl.total || tl.reserved;
  if (start === null) ctx.fullLine = line;
  ctx.tl = tl;
  await drawTimeline(ctx, tl, start === null ? null : ctx.range);
}

// Polygons in plot units, for painting and hit-testing: x (left edges of the steps),
// y0/y1 (bottom/top of each step), xEnd (where the last step ends).
function layersOf(ctx, tl) {
  const items = tl.allocations || tl.segments || [];
  // memory_viz colours by element; ours too, paler for what predates the recording
  return items.map((a) => ({ a, x: xs(ctx, a.polygon.x), y0: a.polygon.y0, y1: a.polygon.y1, xEnd: toX(ctx, a.polygon.xEnd),
    color: a.preexisting ? PALE[a.id % PALE.length] : PALETTE[a.id % PALETTE.length] }));
}

async function drawTimeline(ctx, tl, range) {
  const t0 = performance.now();
  const seg = ctx.kind === "segments";
  ctx.layers = layersOf(ctx, tl);
  const traces = [];
  const items = seg ? tl.segments : tl.allocations;
  // legend entries for what the canvas paints
  traces.push({ type: "scatter", mode: "markers", x: [null], y: [null], marker: { symbol: "square", size: 10, color: PALETTE[0] },
    name: `${seg ? "segments" : "allocations"} (${n(items.length)} drawn)`, hoverinfo: "skip" });
  if (tl.others && tl.others.x.length && tl.drawn < tl.visibleInWindow) {
    const poly = stepPolygon(ctx, tl.others, toX(ctx, tl.windowX[1]));
    traces.push({ type: "scatter", mode: "lines", x: poly.x, y: poly.y, fill: "toself", fillcolor: "rgba(150,150,150,0.35)",
      line: { width: 0 }, hoverinfo: "skip", name: `others (${n((seg ? tl.segmentsInWindow : tl.allocationsInWindow) - tl.drawn)})` });
  }
  // The last event's value holds to the window's end (windowX[1]), as the polygons do:
  // a one-event window is then a line, not a lone point Plotly draws nothing for.
  const end = toX(ctx, tl.windowX[1]);
  const line = (data, values, name, color, dash) => ({ type: "scatter", mode: "lines", x: [...xs(ctx, data.x), end], y: [...values, values[values.length - 1]],
    customdata: [...data.index, data.index[data.index.length - 1]], text: [...values, values[values.length - 1]].map((v) => fmtBytes(v)), line: { color, width: 1.5, dash, shape: "hv" }, name,
    hovertemplate: `event %{customdata}<br>${name} %{text} (%{y:,} bytes)<extra></extra>` });
  if (!seg) traces.push(line(tl.total, tl.total.bytes, "allocated", P.fg));
  traces.push(line(tl.reserved, tl.reserved.reservedBytes, "reserved", P.brown, "dash"));
  const peakName = seg ? "peak reserved in view" : "peak allocated in view";
  traces.push({ type: "scatter", mode: "markers", x: [toX(ctx, tl.peak.x)], y: [tl.peak.bytes], customdata: [tl.peak.event], text: [fmtBytes(tl.peak.bytes)],
    marker: { color: P.bad, size: 9, symbol: "diamond" }, name: peakName,
    hovertemplate: `${peakName}: event %{customdata}<br>%{text} (%{y:,} bytes)<extra></extra>` });
  const maxY = Math.max(tl.peak.bytes, ...tl.reserved.reservedBytes, 1);
  const xr = range || [toX(ctx, tl.windowX[0]), toX(ctx, tl.windowX[1])];
  const layout = {
    margin: { l: 76, r: 10, t: 10, b: 40 }, height: 420, hovermode: "closest", hoverdistance: 8, dragmode: "zoom",
    paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
    xaxis: { title: { text: ctx.xMode === "time" ? "time since first event (ms)" : "event index" }, zeroline: false,
      range: xr[0] === xr[1] ? [xr[0] - 0.5, xr[1] + 0.5] : xr, autorange: false },
    // y follows the window (memory_viz's select_window scales to the window's max): only x zooms
    yaxis: bytesAxis(maxY, 1, { title: { text: seg ? "reserved" : "allocated" }, fixedrange: true, range: [0, maxY * 1.04], autorange: false, zeroline: false }),
    legend: { orientation: "h", y: 1.08, x: 0 }, shapes: bandShapes(ctx), annotations: bandLabels(ctx),
  };
  ctx.drawing = true;
  const fresh = !ctx.plot.data;
  await plotReact(ctx.plot, traces, layout);
  ctx.drawing = false;
  if (!ctx.charts.includes(ctx.plot)) ctx.charts.push(ctx.plot);
  if (fresh) wireTimeline(ctx);
  paintLayers(ctx);
  drawOverlay(ctx);
  const ms = performance.now() - t0;
  ctx.plot.dataset.drawMs = ms.toFixed(1);
  ctx.plot.dataset.drawn = String(tl.drawn);
  noteTimeline(ctx, tl);
}

function noteTimeline(ctx, tl) {
  const seg = ctx.kind === "segments";
  const inWin = seg ? tl.segmentsInWindow : tl.allocationsInWindow;
  const share = tl.peak.bytes ? tl.peak.drawnBytes / tl.peak.bytes : 1;
  const what = seg ? "segments" : "allocations";
  ctx.timelineNote.dataset.peakShare = share.toFixed(4);
  ctx.timelineNote.textContent = `events ${n(tl.window.start)}–${n(tl.window.end - 1)} of ${n(tl.totalEvents)} · ${n(tl.drawn)} of ${n(inWin)} ${what} drawn individually`
    + ` (${(100 * share).toFixed(1)} % of the ${seg ? "reserved" : "allocated"} bytes at the window's peak)`
    + (inWin > tl.visibleInWindow ? ` · ${n(inWin - tl.visibleInWindow)} too short to see at this zoom` : "")
    + (tl.detailCapped ? ` · detail lowered to ${n(tl.detailCapped)} to keep the drawing light; zoom in for more` : "")
    + (tl.decimated ? " · sampled at the window's bucket maxima; zoom in for every event" : "");
}

// A left-step band (a point's value holds until the next point, the last one's until
// `end`) as one closed path.
function stepPolygon(ctx, p, end) {
  const x = xs(ctx, p.x), px = [], py = [];
  const k = x.length;
  const right = (i) => (i + 1 < k ? x[i + 1] : end);
  for (let i = 0; i < k; i++) { px.push(x[i], right(i)); py.push(p.y1[i], p.y1[i]); }
  for (let i = k - 1; i >= 0; i--) { px.push(right(i), x[i]); py.push(p.y0[i], p.y0[i]); }
  return { x: px, y: py };
}

// The plot area in CSS pixels and the axes' data -> pixel maps (Plotly's l2p is relative
// to the plot area).
function plotArea(ctx) {
  const fl = ctx.plot._fullLayout;
  if (!fl || !fl.xaxis || !fl._size) return null;
  const s = fl._size, xa = fl.xaxis, ya = fl.yaxis;
  // linear axes: l2p(v) = _b + v * _m (Plotly's axis transform, without its call per vertex)
  const mx = xa._m, bx = xa._b, my = ya._m, by = ya._b;
  const lin = Number.isFinite(mx) && Number.isFinite(bx) && Number.isFinite(my) && Number.isFinite(by);
  return { l: s.l, t: s.t, w: s.w, h: s.h, xa, ya,
    X: lin ? (v) => bx + v * mx : (v) => xa.l2p(v), Y: lin ? (v) => by + v * my : (v) => ya.l2p(v) };
}

function sizeCanvas(canvas, area) {
  const dpr = window.devicePixelRatio || 1;
  canvas.style.left = `${area.l}px`;
  canvas.style.top = `${area.t}px`;
  canvas.style.width = `${area.w}px`;
  canvas.style.height = `${area.h}px`;
  if (canvas.width !== Math.round(area.w * dpr) || canvas.height !== Math.round(area.h * dpr)) {
    canvas.width = Math.round(area.w * dpr);
    canvas.height = Math.round(area.h * dpr);
  }
  const g = canvas.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, area.w, area.h);
  return g;
}

// The step polygon of one layer, on a 2D context (upper edge left to right, lower edge back).
function tracePolygon(g, L, X, Y) {
  const k = L.x.length;
  const right = (i) => X(i + 1 < k ? L.x[i + 1] : L.xEnd);
  g.moveTo(X(L.x[0]), Y(L.y1[0]));
  for (let i = 0; i < k; i++) { g.lineTo(X(L.x[i]), Y(L.y1[i])); g.lineTo(right(i), Y(L.y1[i])); }
  for (let i = k - 1; i >= 0; i--) { g.lineTo(right(i), Y(L.y0[i])); g.lineTo(X(L.x[i]), Y(L.y0[i])); }
  g.closePath();
}

function paintLayers(ctx) {
  const area = plotArea(ctx);
  if (!area || !ctx.layers) return;
  const t0 = performance.now();
  const g = sizeCanvas(ctx.canvas, area);
  // One fill per polygon: Skia fills thousands of small paths ~9x faster than a dozen
  // paths of thousands of subpaths each (measured in Chromium on the training fixture).
  const { X, Y } = area;
  for (const L of ctx.layers) {
    g.beginPath();
    tracePolygon(g, L, X, Y);
    g.fillStyle = L.color;
    g.fill();
  }
  const ms = performance.now() - t0;
  ctx.plot.dataset.paintMs = ms.toFixed(1);
}

// The hovered polygon's outline and the selected event's line, over the chart.
function drawOverlay(ctx) {
  const area = plotArea(ctx);
  if (!area) return;
  const g = sizeCanvas(ctx.overlay, area);
  if (ctx.hovered) {
    g.beginPath();
    tracePolygon(g, ctx.hovered, area.X, area.Y);
    g.lineWidth = 2;
    g.strokeStyle = "#000";
    g.stroke();
  }
  const x = selectedX(ctx);
  if (x !== null) {
    const px = area.X(x);
    g.beginPath();
    g.setLineDash([3, 3]);
    g.moveTo(px, 0);
    g.lineTo(px, area.h);
    g.lineWidth = 1.5;
    g.strokeStyle = P.fg;
    g.stroke();
    g.setLineDash([]);
  }
}

function selectedX(ctx) {
  if (ctx.t === null || ctx.t === undefined) return null;
  if (ctx.xMode !== "time") return ctx.t;
  const st = ctx.states.get(ctx.t);
  if (st && !(st instanceof Promise) && st.timeUs !== null) return toX(ctx, st.timeUs);
  return null;
}

// The polygon under a point in data units (bisection in each layer whose span holds x).
function layerAt(ctx, x, y) {
  for (const L of ctx.layers || []) {
    if (x < L.x[0] || x >= L.xEnd) continue;
    let lo = 0, hi = L.x.length - 1;
    while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (L.x[mid] <= x) lo = mid; else hi = mid - 1; }
    if (L.y0[lo] <= y && y < L.y1[lo]) return L;
  }
  return null;
}

function bandShapes(ctx) {
  return (ctx.ov.annotationBands || []).map((b) => ({ type: "rect", xref: "x", yref: "paper", y0: 0, y1: 1, layer: "below",
    x0: ctx.xMode === "time" ? toX(ctx, b.startUs) : b.startEvent, x1: ctx.xMode === "time" ? toX(ctx, b.endUs) : b.endEvent,
    fillcolor: "rgba(237,201,72,0.18)", line: { width: 0 } }));
}

function bandLabels(ctx) {
  // staggered over three rows: an optimizer's step and zero_grad bands start close together
  return (ctx.ov.annotationBands || []).map((b, i) => ({ xref: "x", yref: "paper", y: 1 - (i % 3) * 0.045, yanchor: "top", showarrow: false,
    x: ctx.xMode === "time" ? toX(ctx, b.startUs) : b.startEvent, xanchor: "left", text: b.name, font: { size: 10, color: "#8a6d00" } }));
}

function wireTimeline(ctx) {
  const gd = ctx.plot;
  let down = null, raf = 0, lastMove = null;
  const dataAt = (e) => {
    const area = plotArea(ctx);
    if (!area) return null;
    const r = gd.getBoundingClientRect();
    const px = e.clientX - r.left - area.l, py = e.clientY - r.top - area.t;
    if (px < 0 || py < 0 || px > area.w || py > area.h) return null;
    return { x: area.xa.p2l(px), y: area.ya.p2l(py) };
  };
  gd.addEventListener("mousemove", (e) => {
    lastMove = e;
    if (raf) return;
    raf = requestAnimationFrame(() => {
      raf = 0;
      const p = dataAt(lastMove);
      const L = p ? layerAt(ctx, p.x, p.y) : null;
      if (L !== ctx.hovered) {
        ctx.hovered = L;
        drawOverlay(ctx);
        if (L) showItem(ctx, L.a);
      }
    });
  });
  gd.addEventListener("mouseleave", () => { if (ctx.hovered) { ctx.hovered = null; drawOverlay(ctx); } });
  gd.addEventListener("mousedown", (e) => { down = [e.clientX, e.clientY]; });
  gd.addEventListener("click", (e) => {
    if (!down || Math.hypot(e.clientX - down[0], e.clientY - down[1]) > 4) return; // a zoom drag
    const p = dataAt(e);
    if (!p) return;
    select(Math.max(0, Math.min(ctx.ov.summary.traceEntries - 1, eventAt(ctx, p.x))));
  });
  gd.on("plotly_afterplot", () => { if (!ctx.drawing) { paintLayers(ctx); drawOverlay(ctx); } });
  gd.on("plotly_relayout", (ev) => {
    if (ctx.drawing || !ev || ev.shapes) return;
    let range = null;
    if (ev["xaxis.autorange"]) range = null;
    else if (ev["xaxis.range[0]"] !== undefined) range = [ev["xaxis.range[0]"], ev["xaxis.range[1]"]];
    else if (Array.isArray(ev["xaxis.range"])) range = ev["xaxis.range"];
    else return;
    clearTimeout(ctx.zoomTimer);
    ctx.zoomTimer = setTimeout(() => {
      ctx.range = range;
      let a = null, b = null;
      if (range && ctx.xMode === "time") { // the server takes a time window in time_us
        a = Math.max(0, Math.floor(ctx.ov.summary.firstTimeUs + range[0] * 1000));
        b = Math.ceil(ctx.ov.summary.firstTimeUs + range[1] * 1000);
        if (b - a < 2) return;
      } else if (range) {
        const total = ctx.ov.summary.traceEntries;
        a = Math.max(0, eventAt(ctx, range[0]) - 1);
        b = Math.min(total, eventAt(ctx, range[1]) + 2);
        if (b - a < 2) return;
      }
      ctx.win = range ? `${a},${b}` : "";
      go({ ...readState(), win: ctx.win }, { replace: true });
      loadTimeline(ctx, a, b);
    }, ZOOM_DEBOUNCE_MS);
  });
  ctx.resizeObs = new ResizeObserver(() => { paintLayers(ctx); drawOverlay(ctx); });
  ctx.resizeObs.observe(ctx.plotBox);
  // For tests and the curious: the payload on screen, and where a drawn item is.
  gd.tsTimeline = () => ctx.tl;
  gd.tsItemAt = (clientX, clientY) => { const p = dataAt({ clientX, clientY }); const L = p && layerAt(ctx, p.x, p.y); return L ? L.a.id : null; };
  gd.tsPointOf = (id) => {
    const L = (ctx.layers || []).find((l) => l.a.id === id);
    const area = plotArea(ctx);
    if (!L || !area) return null;
    let best = 0, bi = 0;
    for (let i = 0; i < L.x.length; i++) {
      const w = area.X(i + 1 < L.x.length ? L.x[i + 1] : L.xEnd) - area.X(L.x[i]), h = area.Y(L.y0[i]) - area.Y(L.y1[i]);
      if (Math.min(w, h) > best) { best = Math.min(w, h); bi = i; }
    }
    const r = gd.getBoundingClientRect();
    const x0 = L.x[bi], x1 = bi + 1 < L.x.length ? L.x[bi + 1] : L.xEnd;
    // whole pixels: the browser delivers mouse events at integer positions
    return [Math.round(r.left + area.l + (area.X(x0) + area.X(x1)) / 2), Math.round(r.top + area.t + (area.Y(L.y0[bi]) + area.Y(L.y1[bi])) / 2)];
  };
}

// The card beside the timeline: the hovered allocation (or segment) and its stack.
function showItem(ctx, a) {
  const segment = ctx.kind === "segments";
  const key = `${ctx.kind}:${a.id}`;
  if (ctx.cardId === key) return;
  ctx.cardId = key;
  const frames = el("div", { class: "ts-frames", id: "ts-card-frames" }, el("p", { class: "muted" }, "Loading the stack…"));
  ctx.card.dataset.alloc = String(a.id);
  ctx.card.dataset.kind = ctx.kind;
  const evLink = (i) => el("a", { href: "#", onclick: (e) => { e.preventDefault(); select(i); } }, `event ${n(i)}`);
  const what = segment ? "Segment" : "Allocation";
  ctx.card.replaceChildren(
    el("h3", {}, `${what} ${a.id}${a.preexisting ? (segment ? " (reserved before recording)" : " (allocated before recording)") : ""}`),
    el("dl", { class: "kv" },
      el("dt", {}, "size"), el("dd", { id: "ts-card-size" }, bytes(a.size)),
      el("dt", {}, "address"), el("dd", {}, el("code", {}, hex(a.addr))),
      el("dt", {}, "stream"), el("dd", {}, String(a.stream)),
      segment && a.action ? [el("dt", {}, "reserved by"), el("dd", {}, a.action)] : null,
      el("dt", {}, segment ? "reserved" : "allocated"), el("dd", {}, a.allocIndex === null ? "before recording" : evLink(a.allocIndex)),
      el("dt", {}, segment ? "released" : "freed"), el("dd", {}, a.freeIndex === null ? "never (alive at the end)" : evLink(a.freeIndex))),
    el("h4", {}, "Stack (innermost first)"), frames);
  fillFrames(ctx, frames, a.stackId, { preexisting: a.preexisting, freed: a.freeIndex !== null, segment, fromUser: true }, () => ctx.cardId === key);
}

// The frames of a stack into `box`, or why there are none (memory_viz: "<block was
// allocated before _record_history was enabled>"; "alloc not recorded, stack trace for free").
function fillFrames(ctx, box, stackId, item, still, run = ctx.run.name) {
  stackOf(ctx, stackId, { run }).then((s) => {
    if (!still()) return;
    const out = [];
    if (item.preexisting && s.frames.length) out.push(el("p", { class: "ts-why" }, item.segment
      ? "Reserved before recording began: this is the stack of its release."
      : "Allocated before recording began: its allocation was not recorded; this is the stack of its free."));
    if (s.frames.length) {
      if (!s.frames.some((f) => f.filename.endsWith(".py"))) out.push(el("p", { class: "ts-why", id: "ts-why-cpp" },
        "Only C++ frames: made on a thread that runs no Python (the autograd engine runs backward on its own C++ thread), so the Python line that started it is not in this stack."));
      out.push(...framesFromUser(s, item.fromUser));
    } else {
      const why = whyNoStack(ctx, s, item);
      out.push(el("p", { class: "ts-why", id: "ts-why" }, why));
      if (s.unfilteredCount) out.push(el("button", { type: "button", class: "ts-unfiltered", onclick: () => {
        stackOf(ctx, stackId, { run, filtered: false }).then((u) => { if (still()) box.replaceChildren(...u.frames.map((f) => frameLine(f))); });
      } }, `show the ${n(s.unfilteredCount)} filtered frames`));
    }
    box.replaceChildren(...out);
    box.dataset.loaded = "1";
  }, (err) => { if (still()) box.replaceChildren(errorBox(err, "Stack")); });
}

// A stack from its first user frame (the server's userFrame: the rule that names the
// compare view's sites), with the allocator, dispatcher and ATen frames inside it one
// click away; the whole stack where the first user frame is the innermost, or unknown.
function framesFromUser(s, fromUser) {
  const k = fromUser && s.userFrame ? s.userFrame : 0;
  const lines = s.frames.map((f, i) => frameLine(f, i === s.userFrame && s.userFrameKind !== "runtime"));
  if (!k) return lines;
  const more = el("button", { type: "button", class: "ts-inner-frames", id: "ts-inner-frames", title: "show the whole stack",
    onclick: () => more.replaceWith(...lines.slice(0, k)) },
  `▸ ${n(k)} inner frames (allocator, dispatcher, ATen) before ${s.userFrameKind === "python" ? "your code" : "the first frame past them"}`);
  return [more, ...lines.slice(k)];
}

function whyNoStack(ctx, s, item) {
  const rec = ctx.ov.summary.stacks || {};
  if (s.unfilteredCount) return "Only interpreter and allocator frames were recorded for it (memory_viz's frame filter drops them).";
  if (item.finalBlocks) return rec.traceEntriesWithStack
    ? "These blocks of the final state have no frames: they were allocated before recording began (memory_viz: the block was allocated before _record_history was enabled)."
    : "These blocks of the final state have no frames: allocated before recording began, or the snapshot was recorded without stacks (_record_memory_history(context=None)).";
  if (item.preexisting) return item.segment
    ? "Reserved before recording began: the snapshot has no stack for it."
    : "Allocated before recording began (before _record_memory_history was enabled): the snapshot has no stack for it.";
  if (!rec.traceEntriesWithStack) return "This snapshot was recorded without stacks: _record_memory_history(context=None), or a PyTorch before 2.1 whose trace entries have no frames. Record with context=\"all\" (and stacks=\"all\" for C++ frames).";
  if (item.freed === false && !item.segment) return "No stack was recorded for this allocation: _record_memory_history's context setting decides which events get one (\"state\": live blocks only, \"alloc\": allocations, \"all\": allocations and frees).";
  return "No stack was recorded for this event: _record_memory_history's context setting decides which events get one (\"state\": live blocks only, \"alloc\": allocations, \"all\": allocations and frees).";
}

function frameLine(f, user = false) {
  const file = f.filename ? f.filename.split("/").slice(-2).join("/") : "??";
  const row = el("div", { class: user ? "ts-frame user" : "ts-frame", title: `${f.filename}:${f.line}` },
    el("span", { class: "fn" }, f.name || "??"), " ", sourceLink(f, `${file}:${f.line}`, () => row),
    f.repeats > 1 ? el("span", { class: "muted" }, ` ×${f.repeats}`) : null);
  return row;
}

// A frame whose file the server found under a source root (the stack answer's `source`,
// app/snapshots.py) links to its lines (GET /api/source: the href is that answer, a click
// shows them under the frame); any other frame is plain text, never a dead link.
function sourceLink(f, text, rowOf) {
  if (!f.source) return el("span", { class: "muted" }, text);
  const url = `/api/source?${new URLSearchParams({ run: readState().run, file: f.source.file, line: String(f.line), context: "3" })}`;
  return el("a", { class: "ts-src-link", href: url, title: `${f.source.path} (under a source root): show the lines`,
    onclick: (e) => {
      e.preventDefault();
      const row = rowOf();
      const open = row.nextSibling && row.nextSibling.classList && row.nextSibling.classList.contains("ts-source");
      if (open) { row.nextSibling.remove(); return; }
      const box = el("pre", { class: "ts-source", id: "ts-source" }, "Reading the source…");
      row.after(box);
      getJson(url).then((a) => box.replaceChildren(el("div", { class: "muted" }, a.path),
        ...a.lines.map((l, i) => el("div", { class: a.first_line + i === a.line ? "ts-src-line hit" : "ts-src-line" },
          `${String(a.first_line + i).padStart(5)}  ${l}`))),
      (err) => box.replaceChildren(errorBox(err, "Cannot read the source")));
    } }, text);
}

// -- 3. event list (memory_viz's "Allocator State History") -------------------------------

function fmtEvent(names, r, i) {
  const action = names[r.action[i]] || "?";
  const size = r.size[i];
  if (action === "oom") return `OOM (requested ${fmtBytes(size)})`;
  if (action === "snapshot") return "snapshot";
  const addr = `${action.startsWith("segment") ? "s" : "b"}${r.addr[i].toString(16)}_${r.version[i]}`;
  return `${action.padEnd(14)} ${addr.padEnd(18)} ${fmtBytes(size)}${r.stream[i] ? ` (stream ${r.stream[i]})` : ""}`;
}

function setupEvents(ctx, state) {
  const total = ctx.ov.summary.traceEntries;
  const find = el("input", { type: "search", id: "ts-find", placeholder: "find an address or a frame…", "aria-label": "find an address or a stack frame", value: state.find || null,
    onkeydown: (e) => { if (e.key === "Enter") { e.preventDefault(); ctx.findTyped = true; go({ ...readState(), find: find.value.trim() }, { replace: true }); } } });
  const count = el("span", { class: "muted small", id: "ts-find-count" });
  const prev = el("button", { type: "button", id: "ts-find-prev", disabled: true, onclick: () => jumpMatch(ctx, -1) }, "◀");
  const next = el("button", { type: "button", id: "ts-find-next", disabled: true, onclick: () => jumpMatch(ctx, 1) }, "▶");
  const box = el("div", { class: "ts-events", id: "ts-events", tabindex: "0", "aria-label": "trace events" });
  const spacer = el("div", { class: "ts-events-spacer", style: `height:${total * EVENT_ROW_PX}px` });
  const rows = el("div", { class: "ts-events-rows" });
  spacer.append(rows);
  box.append(spacer);
  ctx.eventsPanel.replaceChildren(el("div", { class: "ts-find" }, find, prev, next, count), total ? box : el("p", { class: "muted" }, "No trace: only the final allocator state was recorded."));
  ctx.findUi = { find, count, prev, next };
  ctx.matches = [];
  ctx.matchSet = new Set();
  let raf = 0;
  const render = () => {
    raf = 0;
    if (!total) return;
    const first = Math.max(0, Math.floor(box.scrollTop / EVENT_ROW_PX) - 4);
    const last = Math.min(total, first + Math.ceil((box.clientHeight || 440) / EVENT_ROW_PX) + 8);
    const out = [];
    for (let i = first; i < last; i++) {
      const page = eventPage(ctx, Math.floor(i / EVENT_PAGE), () => { if (!raf) raf = requestAnimationFrame(render); });
      const cls = `ts-ev${i === ctx.t ? " sel" : ""}${ctx.matchSet.has(i) ? " hit" : ""}`;
      let text = "…";
      if (page) text = fmtEvent(page.actionNames, page.rows, i - page.start);
      out.push(el("div", { class: cls, "data-event": String(i), style: `top:${i * EVENT_ROW_PX}px`, onclick: () => select(i) },
        el("span", { class: "ix" }, String(i)), text));
    }
    rows.replaceChildren(...out);
  };
  box.addEventListener("scroll", () => { if (!raf) raf = requestAnimationFrame(render); });
  ctx.events = {
    show(i) {
      if (!total || i === null || i === undefined) return;
      const top = i * EVENT_ROW_PX, h = box.clientHeight || 440;
      if (top < box.scrollTop || top + EVENT_ROW_PX > box.scrollTop + h) box.scrollTop = Math.max(0, top - h / 2);
      render();
    },
    render,
  };
  ctx.findShown = null;
}

// One page of rows (EVENT_PAGE events), fetched once; null until it is here.
function eventPage(ctx, p, onLoad) {
  const got = ctx.evPages.get(p);
  if (got && !(got instanceof Promise)) return got;
  if (!got) {
    const start = p * EVENT_PAGE, end = Math.min(ctx.ov.summary.traceEntries, start + EVENT_PAGE);
    const pr = getJson(api("events", ctx, { start, end })).then((d) => { ctx.evPages.set(p, d); onLoad(); return d; },
      () => { ctx.evPages.delete(p); });
    ctx.evPages.set(p, pr);
  }
  return null;
}

async function runFind(ctx, text) {
  ctx.findShown = text;
  const ui = ctx.findUi;
  if (ui.find.value.trim() !== text) ui.find.value = text;
  ctx.matches = [];
  ctx.matchSet = new Set();
  ui.prev.disabled = ui.next.disabled = true;
  if (!text) { ui.count.textContent = ""; ctx.events.render(); return; }
  ui.count.textContent = "searching…";
  let d;
  try { d = await cachedJson(api("events", ctx, { start: 0, end: 0, q: text })); } catch (err) { ui.count.replaceChildren(errorBox(err, "Find")); return; }
  if (current !== ctx || ctx.findShown !== text) return;
  ctx.matches = d.matches;
  ctx.matchSet = new Set(d.matches);
  ui.count.dataset.count = String(d.matchCount);
  ui.count.textContent = d.matchCount
    ? `${n(d.matchCount)} events ${d.queryKind === "address" ? "at or containing this address" : "with a matching frame"}${d.matchCount > d.matches.length ? ` (first ${n(d.matches.length)})` : ""}`
    : `nothing ${d.queryKind === "address" ? "at this address" : "has a frame matching it"}`;
  ui.prev.disabled = ui.next.disabled = !d.matches.length;
  // a search the user just ran jumps to its first match after the selection; one in a
  // link only marks its matches (the link's t= stays)
  const typed = ctx.findTyped;
  ctx.findTyped = false;
  if (typed && d.matches.length && !ctx.matchSet.has(ctx.t)) jumpMatch(ctx, 1);
  else ctx.events.render();
}

function jumpMatch(ctx, d) {
  const m = ctx.matches;
  if (!m.length) return;
  const t = ctx.t ?? -1;
  let i;
  if (d > 0) { i = m.findIndex((v) => v > t); if (i < 0) i = 0; } else { i = -1; for (let k = m.length - 1; k >= 0; k--) if (m[k] < t) { i = k; break; } if (i < 0) i = m.length - 1; }
  select(m[i]);
}

// -- 4. allocator state ----------------------------------------------------------------

function setupState(ctx) {
  const total = ctx.ov.summary.traceEntries;
  const box = el("input", { type: "number", id: "ts-event", min: "0", max: String(Math.max(0, total - 1)), "aria-label": "event index",
    onchange: (e) => { const v = Math.trunc(Number(e.target.value)); if (Number.isFinite(v)) select(Math.max(0, Math.min(total - 1, v))); } });
  const prev = el("button", { type: "button", id: "ts-prev", onclick: () => step(ctx, -1) }, "◀ prev");
  const next = el("button", { type: "button", id: "ts-next", onclick: () => step(ctx, 1) }, "next ▶");
  const bar = el("div", { class: "ts-stepper" }, prev,
    el("label", { class: "ts-picker" }, "event ", box, el("span", { class: "muted" }, ` of ${n(total)}`)), next,
    el("button", { type: "button", id: "ts-to-peak", onclick: () => select(null) }, "peak allocated"));
  const title = el("p", { id: "ts-state-title" });
  const tiles = {};
  const tile = (k, label, tip) => { const v = el("div", { class: "value" }), sub = el("div", { class: "sub muted" }); tiles[k] = { v, sub }; return el("div", { class: "ts-tile", title: tip }, el("div", { class: "label" }, label), v, sub); };
  const totals = el("div", { class: "ts-tiles small-tiles", id: "ts-state-totals" },
    tile("reservedBytes", "reserved", "Σ segment sizes: what the allocator holds from CUDA"),
    tile("activeBytes", "allocated", "Σ live block sizes (rounded)"),
    tile("requestedBytes", "requested", "Σ sizes the program asked for"),
    tile("internalFragmentation", "internal fragmentation", "rounding: allocated − requested"),
    tile("externalFragmentation", "external fragmentation", "free bytes inside segments"),
    tile("largestFreeBlock", "largest free block", "the largest request that fits without a new segment"),
    tile("blocks", "segments / blocks", ""));
  const warn = el("p", { class: "mp-warn", hidden: true });
  ctx.segMap = segmentMap(ctx);
  const body = el("div", { id: "ts-state-body" }, title, totals, warn, ctx.segMap.node);
  ctx.statePanel.replaceChildren(bar, body);
  ctx.stateUi = { box, prev, next, title, tiles, warn, total };
}

function stateFor(ctx, event) {
  const got = ctx.states.get(event);
  if (got) { ctx.states.delete(event); ctx.states.set(event, got); return Promise.resolve(got); }
  const p = getJson(api("state", ctx, { event })).then((st) => {
    if (ctx.states.get(event) === p) ctx.states.set(event, st);
    return st;
  }, (err) => { ctx.states.delete(event); throw err; });
  ctx.states.set(event, p);
  while (ctx.states.size > STATES_KEPT) ctx.states.delete(ctx.states.keys().next().value);
  return p;
}

// Fetch the neighbours of the selection while the user looks at it: a step is then a draw.
function prefetchAround(ctx, event) {
  const total = ctx.ov.summary.traceEntries;
  setTimeout(() => {
    if (current !== ctx || ctx.t !== event) return;
    for (const d of [1, -1, 2, 3, -2]) { const e = event + d; if (e >= 0 && e < total && !ctx.states.has(e)) stateFor(ctx, e).catch(() => {}); }
  }, 0);
}

async function renderState(ctx) {
  const event = ctx.t;
  const ui = ctx.stateUi;
  ui.box.value = event === null ? "" : String(event);
  ui.prev.disabled = event === null || event <= 0;
  ui.next.disabled = event === null || event >= ui.total - 1;
  if (event === null) { ui.title.textContent = "No trace: the final state"; }
  let st;
  try { st = await stateFor(ctx, event === null ? undefined : event); } catch (err) { ui.title.replaceChildren(errorBox(err, "Allocator state")); return; }
  if (current !== ctx || ctx.t !== event) return;
  if (ctx.xMode === "time") drawOverlay(ctx);
  const tt = st.totals;
  // "" where there is no time: replaceChildren writes a null child as the text "null".
  ui.title.replaceChildren(el("strong", {}, st.event === null ? "Final state" : `After event ${n(st.event)}`), ctx.tIsPeak ? " (the peak allocated)" : "",
    st.timeUs !== null && ctx.ov.summary.hasTime ? el("span", { class: "muted" }, ` · +${fmtMs(st.timeUs - ctx.ov.summary.firstTimeUs)}`) : "",
    ctx.traceSpot);
  ctx.stateTimeUs = st.event === null ? null : st.timeUs;
  fillTraceSpot(ctx);
  for (const k of ["reservedBytes", "activeBytes", "requestedBytes", "internalFragmentation", "externalFragmentation", "largestFreeBlock"]) {
    ui.tiles[k].v.textContent = fmtBytes(tt[k]);
    ui.tiles[k].sub.textContent = `${n(tt[k])} B`;
  }
  ui.tiles.blocks.v.textContent = `${n(tt.segments)} / ${n(tt.activeBlocks + tt.inactiveBlocks)}`;
  ui.tiles.blocks.sub.textContent = `${n(tt.activeBlocks)} active, ${n(tt.inactiveBlocks)} free${tt.orphanBlocks ? `, ${n(tt.orphanBlocks)} outside segments` : ""}`;
  ui.warn.hidden = !st.blocksOmitted;
  ui.warn.textContent = st.blocksOmitted ? `${n(st.blocksOmitted)} blocks not shown.` : "";
  ctx.segMap.draw(st);
  ctx.statePanel.dataset.event = String(st.event);
  if (ctx.stepStart) { ctx.statePanel.dataset.stepMs = (performance.now() - ctx.stepStart).toFixed(1); ctx.stepStart = 0; }
  if (event !== null) prefetchAround(ctx, event);
}

// -- the trace viewer at an event's time (issue 37) -------------------------------------

const TRACE_PAD_MS = 0.05; // the window either side, as the memory profile's and Steps & ops' links

// GET /api/trace_clock (app/memory_trace_clock.py): the PyTorch trace recorded beside this
// snapshot by the same run, and the offset that puts its times on that trace's clock
// (trace ms = (time_us - sinceUs) / 1000 + offsetMs), or why there is none. Asked with
// index=built on load (opening the snapshot must not index the trace); when that is
// pending, the link asks the full clock when clicked (ctx.askClock).
function loadClock(ctx) {
  const q = new URLSearchParams({ run: ctx.run.name, host: ctx.host });
  const failed = (err) => ({ trace: null, clocks: {}, why: `the clock could not be read (${err.message || err})` });
  // not cached: a pending answer is stale once the trace is indexed
  getJson(`/api/trace_clock?${new URLSearchParams({ ...Object.fromEntries(q), index: "built" })}`)
    .then((c) => { ctx.clock = c; }, (err) => { ctx.clock = failed(err); })
    .then(() => { if (current === ctx) fillTraceSpot(ctx); });
  ctx.askClock = () => cachedJson(`/api/trace_clock?${q}`).then((c) => { ctx.clock = c; }, (err) => { ctx.clock = failed(err); });
}

// The trace viewer's state at the shown event's time, or { why } when it has no place.
function traceTarget(ctx) {
  const c = ctx.clock, t = ctx.stateTimeUs;
  const mine = (c.clocks || {})[ctx.host];
  if (!c.trace || !mine || mine.offsetMs === null || mine.offsetMs === undefined) {
    return { why: (mine && mine.why) || c.why || "this run has no trace of the same process" };
  }
  const ms = (t - mine.sinceUs) / 1000 + mine.offsetMs;
  const fix = (v) => String(Number(v.toFixed(6)));
  return { ms, fixed: fix(ms), target: { run: c.trace.run, tool: "trace_viewer@", host: c.trace.host, start_ms: fix(ms - TRACE_PAD_MS), end_ms: fix(ms + TRACE_PAD_MS),
    ...(mine.counter !== null && mine.counter !== undefined ? { ctr: String(mine.counter), ct: fix(ms) } : {}) } }; // its [memory] sample selected
}

function fillTraceSpot(ctx) {
  const spot = ctx.traceSpot, c = ctx.clock, t = ctx.stateTimeUs;
  if (!spot || !c || t === null || t === undefined) { if (spot) spot.replaceChildren(); return; }
  if (ctx.clockAsking) { spot.replaceChildren(" · ", el("span", { class: "muted", id: "ts-trace-indexing" }, "indexing the trace…")); return; }
  if (c.pending) { spot.replaceChildren(" · ", pendingTraceLink(ctx)); return; }
  const { ms, fixed, target, why } = traceTarget(ctx);
  if (!target) {
    spot.replaceChildren(" · ", el("span", { class: "muted ts-trace-none", id: "ts-trace-none", title: why }, "no trace link (hover: why)"));
    return;
  }
  spot.replaceChildren(" · ", el("a", { id: "ts-trace-link", href: stateUrl(target), "data-trace-ms": String(ms),
    title: `${c.trace.run}, ${TRACE_PAD_MS * 1e3} µs either side of ${fixed} ms on its clock`,
    onclick: (e) => { e.preventDefault(); go(target); } }, "open in the trace viewer"));
}

// The trace is not indexed yet: an action that asks the full clock (indexing the trace,
// once), then goes where the eager link would at the event shown then, or shows the why.
function pendingTraceLink(ctx) {
  const open = () => {
    if (ctx.clockAsking) return;
    ctx.clockAsking = true;
    fillTraceSpot(ctx);
    ctx.askClock().then(() => {
      ctx.clockAsking = false;
      if (current !== ctx) return;
      const t = ctx.stateTimeUs;
      const place = ctx.clock.pending || t === null || t === undefined ? {} : traceTarget(ctx);
      if (place.target) go(place.target);
      else fillTraceSpot(ctx);
    });
  };
  return el("a", { id: "ts-trace-link", role: "button", tabindex: "0",
    title: "indexes the PyTorch trace first (once per trace; seconds on a large one), then opens the trace viewer at this event's time",
    onclick: (e) => { e.preventDefault(); open(); },
    onkeydown: (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); open(); } } }, "open in the trace viewer");
}

// The segment map: one row per segment (by address), its blocks along it, offsets in a
// shared scale whose end is the largest segment. Labels get the room they measure; the
// legend sits above the axis, not on it.
function segmentMap(ctx) {
  const legend = el("div", { class: "ts-seg-legend", id: "ts-seg-legend" },
    [["active_allocated", "allocated"], ["active_pending_free", "pending free (freed, waiting for its stream)"], ["inactive", "free (inside a segment)"]].map(([k, label]) =>
      el("span", {}, el("i", { style: `background:${BLOCK_COLORS[k]}` }), label)));
  const axis = el("canvas", { class: "ts-seg-axis", id: "ts-seg-axis" });
  const canvas = el("canvas", { class: "ts-seg-canvas", id: "ts-seg-canvas" });
  const scroll = el("div", { class: "ts-segments", id: "ts-segments" }, canvas);
  const info = el("div", { class: "ts-seg-info muted small", id: "ts-seg-info" }, "Hover a block to see it; click to select its allocation event.");
  const node = el("div", { class: "ts-segmap" }, legend, el("div", { class: "ts-seg-axis-wrap" }, axis), scroll, info);
  let geo = null;
  const font = "11px ui-monospace, SFMono-Regular, Menlo, monospace";

  function draw(st) {
    const t0 = performance.now();
    const segs = st.segments;
    const width = Math.max(320, scroll.clientWidth || node.clientWidth || 900);
    const dpr = window.devicePixelRatio || 1;
    const g = canvas.getContext("2d");
    g.font = font;
    const labels = segs.map((s) => `${hex(s.address)} ${fmtBytes(s.size)}`);
    let labelW = 0;
    for (const l of labels) labelW = Math.max(labelW, g.measureText(l).width);
    labelW = Math.ceil(labelW) + 10;
    const maxSeg = Math.max(1, ...segs.map((s) => s.size));
    const plotW = Math.max(50, width - labelW - 14);
    const X = (off) => labelW + (off / maxSeg) * plotW;
    const h = Math.max(SEG_ROW_PX, segs.length * SEG_ROW_PX);
    canvas.style.width = `${width}px`;
    canvas.style.height = `${h}px`;
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(h * dpr);
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.font = font;
    g.textBaseline = "middle";
    g.clearRect(0, 0, width, h);
    segs.forEach((s, i) => {
      const y = i * SEG_ROW_PX;
      g.fillStyle = P.fg;
      g.fillText(labels[i], 2, y + SEG_ROW_PX / 2);
      g.fillStyle = "#f3f4f7";
      g.fillRect(X(0), y + 1, X(s.size) - X(0), SEG_ROW_PX - 2);
      for (const b of s.blocks) {
        const k = b.state.startsWith("active") ? (b.state === "active_allocated" ? "active_allocated" : "active_pending_free") : "inactive";
        g.fillStyle = BLOCK_COLORS[k];
        const x0 = X(b.address - s.address), x1 = X(b.address - s.address + b.size);
        g.fillRect(x0, y + 1, Math.max(1, x1 - x0 - 0.5), SEG_ROW_PX - 2);
      }
    });
    // axis: 0 .. the largest segment, in binary units
    const ticks = byteTicks(maxSeg);
    const aw = width, ah = 22;
    axis.style.width = `${aw}px`;
    axis.style.height = `${ah}px`;
    axis.width = Math.round(aw * dpr);
    axis.height = Math.round(ah * dpr);
    const a = axis.getContext("2d");
    a.setTransform(dpr, 0, 0, dpr, 0, 0);
    a.clearRect(0, 0, aw, ah);
    a.font = "11px sans-serif";
    a.fillStyle = P.muted;
    a.strokeStyle = P.line;
    a.textBaseline = "top";
    const shown = [];
    ticks.tickvals.forEach((v, i) => {
      if (v > maxSeg * 1.0001) return;
      const x = X(v);
      a.beginPath(); a.moveTo(x + 0.5, ah - 6); a.lineTo(x + 0.5, ah); a.stroke();
      const w = a.measureText(ticks.ticktext[i]).width;
      a.fillText(ticks.ticktext[i], Math.min(aw - w - 2, Math.max(x - w / 2, labelW - 4)), 2);
      shown.push(v);
    });
    a.fillText("offset in segment", 2, 2);
    geo = { segs, labelW, maxSeg, plotW, X };
    Object.assign(node.dataset, { labelWidth: String(labelW), widestLabel: String(Math.ceil(Math.max(0, ...labels.map((l) => g.measureText(l).width)))),
      axisMax: String(maxSeg), axisTicks: shown.join(","), drawMs: (performance.now() - t0).toFixed(1), rows: String(segs.length) });
  }

  function blockAt(e) {
    if (!geo) return null;
    const r = canvas.getBoundingClientRect();
    const x = e.clientX - r.left, y = e.clientY - r.top;
    const s = geo.segs[Math.floor(y / SEG_ROW_PX)];
    if (!s || x < geo.labelW) return null;
    const off = ((x - geo.labelW) / geo.plotW) * geo.maxSeg;
    if (off > s.size) return null;
    return { s, b: s.blocks.find((b) => b.address - s.address <= off && off < b.address - s.address + b.size) || null };
  }
  canvas.addEventListener("mousemove", (e) => {
    const hit = blockAt(e);
    if (!hit) return;
    const { s, b } = hit;
    info.textContent = b
      ? `${b.state.replace(/_/g, " ")} · ${fmtBytes(b.size)} at ${hex(b.address)}${b.requested ? ` (requested ${fmtBytes(b.requested)})` : ""}`
        + `${b.allocIndex !== null ? ` · allocated at event ${n(b.allocIndex)}` : b.state.startsWith("active") ? " · allocated before recording" : ""}${b.freeIndex !== null ? ` · freed at event ${n(b.freeIndex)}` : ""}`
        + ` · segment ${hex(s.address)} (${fmtBytes(s.size)}${s.expandable ? ", expandable" : ""}${s.segmentType ? `, ${s.segmentType}` : ""})`
      : `segment ${hex(s.address)} (${fmtBytes(s.size)})`;
  });
  canvas.addEventListener("click", (e) => { const hit = blockAt(e); if (hit && hit.b && hit.b.allocIndex !== null) select(hit.b.allocIndex); });
  return { node, draw };
}

// -- 5. stacks -------------------------------------------------------------------------

async function renderStacks(ctx) {
  const event = ctx.t;
  const div = el("div", { class: "ts-chart", id: "ts-icicle" });
  const head = el("p", { class: "muted" }, "Grouping live memory by stack…");
  ctx.stacksPanel.replaceChildren(head, div);
  let d;
  try { d = await cachedJson(api("stacks", ctx, { event: ctx.tIsPeak ? null : event })); } catch (err) { head.replaceWith(errorBox(err, "Stacks")); return; }
  if (current !== ctx || ctx.t !== event) return;
  head.replaceChildren(`${fmtBytes(d.totalBytes)} allocated after event ${n(d.event)}${d.atPeak ? " (the peak allocated)" : ""} · outermost frame at the top; click a box to zoom.`,
    d.nodesOmitted ? ` ${n(d.nodesOmitted)} small nodes folded into "other".` : "");
  drawIcicle(div, d);
  if (!ctx.charts.includes(div)) ctx.charts.push(div);
}

// -- 6. compare ------------------------------------------------------------------------

// The snapshot compared with: base= (every tool's compare key) or other= (this page's own).
const comparedWith = (state) => state.base || state.other || "";

async function setupCompare(ctx, state) {
  let runs;
  try { runs = (await getJson("/api/runs")).runs; } catch (err) { ctx.comparePanel.replaceChildren(errorBox(err, "Runs")); return; }
  const others = runs.filter((r) => r.kind === "torch_snapshot" && r.name !== ctx.run.name);
  if (!others.length) {
    ctx.comparePanel.replaceChildren(el("p", { class: "muted" }, "No other snapshot in this log directory to compare with."));
    return;
  }
  const out = el("div", { id: "ts-compare-out" });
  const pick = el("select", { id: "ts-compare-pick", "aria-label": "snapshot to compare with",
    onchange: (e) => go({ ...readState(), other: e.target.value, base: "" }) },
  el("option", { value: "" }, "— pick a snapshot —"), others.map((r) => el("option", { value: r.name }, r.name)));
  ctx.comparePanel.replaceChildren(el("label", { class: "ts-picker" }, `A = this snapshot (${ctx.host}), B = `, pick), out);
  ctx.comparePick = pick;
  ctx.compareOut = out;
  ctx.compareRuns = others.map((r) => r.name);
  if (current === ctx) showCompare(ctx, comparedWith(readState()));
}

function showCompare(ctx, wanted) {
  ctx.otherShown = wanted;
  const known = ctx.compareRuns.includes(wanted);
  ctx.comparePick.value = known ? wanted : "";
  if (known || !wanted) runCompare(ctx, ctx.comparePick.value, ctx.compareOut);
  else ctx.compareOut.replaceChildren(errorBox(new Error(`no other snapshot run named "${wanted}" to compare with`), "Compare"));
}

async function runCompare(ctx, other, out) {
  if (!other) { out.replaceChildren(); return; }
  out.replaceChildren(el("p", { class: "muted" }, "Comparing…"));
  let d;
  try { d = await cachedJson(api("compare", ctx, { other })); } catch (err) { out.replaceChildren(errorBox(err, "Compare")); return; }
  if (current !== ctx) return;
  const s = d.summary;
  const row = (label, cells, id) => el("tr", { id }, el("td", {}, label), cells.map((c) => el("td", { class: "num" }, c)));
  const summary = el("table", { class: "ts-compare-summary", id: "ts-compare-summary" },
    el("thead", {}, el("tr", {}, el("th", {}, ""), el("th", { class: "num" }, "sites"), el("th", { class: "num" }, "blocks"), el("th", { class: "num" }, "bytes"))),
    el("tbody", {},
      row("only in A (this)", [n(s.onlyA.sites), n(s.onlyA.blocks), el("span", { id: "ts-only-a", "data-bytes": String(s.onlyA.bytes) }, bytes(s.onlyA.bytes))], "ts-row-only-a"),
      row("only in B", [n(s.onlyB.sites), n(s.onlyB.blocks), el("span", { id: "ts-only-b", "data-bytes": String(s.onlyB.bytes) }, bytes(s.onlyB.bytes))], "ts-row-only-b"),
      row("in both (A / B)", [n(s.both.sites), `${n(s.both.blocksA)} / ${n(s.both.blocksB)}`, `${fmtBytes(s.both.bytesA)} / ${fmtBytes(s.both.bytesB)}`]),
      row("delta B − A", ["", "", el("strong", { id: "ts-delta" }, bytes(s.deltaBytes))])));
  const change = d.diff ? baseChange(d.diff) : null;
  const sg = d.segments;
  const segs = el("p", { id: "ts-segment-diff" }, `Segments: ${n(sg.common)} in both · ${n(sg.onlyACount)} only in A (${fmtBytes(sg.onlyABytes)}) · ${n(sg.onlyBCount)} only in B (${fmtBytes(sg.onlyBBytes)})`);
  ctx.sites = sitesTable(ctx, d.sites, readState().q || "", other);
  out.replaceChildren(
    el("p", { class: "muted" }, `A: ${d.a.path} (device ${d.a.device}, ${fmtBytes(d.a.liveBytes)} allocated in ${n(d.a.liveBlocks)} blocks) · B: ${d.b.path} (device ${d.b.device}, ${fmtBytes(d.b.liveBytes)} allocated in ${n(d.b.liveBlocks)} blocks)`),
    change, summary, segs, el("h3", {}, `Allocation sites that differ (${n(d.sites.length)}${d.sitesOmitted ? ` + ${n(d.sitesOmitted)} omitted` : ""})`),
    el("p", { class: "ts-hint" }, "A site is a whole stack, named by its first frame of your code (allocator, dispatcher and torch frames skipped; on a C++-only stack, its first frame past that plumbing) and the operator it went through. Click a row for its stack."),
    ctx.sites.node);
}

// The compare read the other way, as every tool's compare reads (docs/compare.md): B is the
// base and this snapshot the current; the server's diff JSON (d.diff) says the change.
function baseChange(diff) {
  const t = diff.totals, count = (w) => diff.rows.filter((r) => r.in === w).length;
  return el("p", { class: "ts-compare-change", id: "ts-compare-change" }, "From B (the base) to this snapshot: ",
    el("strong", {}, `${t.delta > 0 ? "+" : ""}${bytes(t.delta)}`), ` live (${fmtBytes(t.base)} → ${fmtBytes(t.current)}); ${n(count("both"))} sites in both changed, `,
    `${n(count("current_only"))} only here, ${n(count("base_only"))} only in B.`);
}

function sitesTable(ctx, sites, filter, other) {
  const cols = [
    { key: "site", label: "site", value: (s) => siteText(s), cellClass: "path", show: siteCell, title: (s) => (s.site ? `${s.site.filename}:${s.site.line} ${s.site.name}` : null) },
    { key: "in", label: "in", value: (s) => s.in },
    { key: "bytesA", label: "bytes A", value: (s) => s.bytesA, num: true, show: (s) => fmtBytes(s.bytesA) },
    { key: "countA", label: "blocks A", value: (s) => s.countA, num: true, show: (s) => n(s.countA) },
    { key: "bytesB", label: "bytes B", value: (s) => s.bytesB, num: true, show: (s) => fmtBytes(s.bytesB) },
    { key: "countB", label: "blocks B", value: (s) => s.countB, num: true, show: (s) => n(s.countB) },
    { key: "delta", label: "Δ bytes", value: (s) => s.deltaBytes, sortValue: (s) => Math.abs(s.deltaBytes), num: true, show: (s) => (s.deltaBytes > 0 ? "+" : "") + fmtBytes(s.deltaBytes) },
  ];
  const has = (s) => s.stackIdA !== null || s.stackIdB !== null;
  return sortableTable({
    id: "ts-sites", prefix: "ts", tableClass: "", rows: sites, columns: cols, sortKey: "delta", wrap: false,
    text: siteText, empty: () => "No site matches.", rowClass: (s) => `ts-site ${s.in}`,
    filter: { id: "ts-sites-filter", placeholder: "filter sites…", value: filter, onChange: (q) => go({ ...readState(), q }, { replace: true }) },
    expand: {
      has, toggleClass: "ts-toggle",
      attrs: (s) => ({ "data-stack": String(s.stackIdA ?? s.stackIdB), title: "click for the whole stack" }),
      row: (s, span) => {
        const frames = el("div", { class: "ts-frames ts-site-frames" }, el("p", { class: "muted" }, "Loading the stack…"));
        const inA = s.stackIdA !== null;
        fillFrames(ctx, frames, inA ? s.stackIdA : s.stackIdB, { preexisting: false, segment: false, finalBlocks: true }, () => frames.isConnected, inA ? ctx.run.name : other);
        return el("tr", { class: "ts-site-stack" }, el("td", { colspan: String(span) },
          el("div", { class: "muted small" }, `stack of ${inA ? "A" : "B"} (innermost first)`), frames));
      },
    },
  });
}

function siteText(s) {
  if (!s.site) return "<no stack recorded>";
  return `${siteLabel(s)} ${s.site.op || ""} ${s.site.filename}`;
}

function siteLabel(s) {
  if (!s.site) return "<no stack recorded>";
  const f = s.site;
  const file = f.filename && f.filename !== "??" ? ` (${f.filename.split("/").slice(-2).join("/")}${f.line ? `:${f.line}` : ""})` : "";
  return `${f.short || f.name}${file}`;
}

function siteCell(s) {
  if (!s.site) return el("span", { class: "muted", title: "the final state's block has no frames: allocated before recording began, or recorded without stacks" }, "<no stack recorded>");
  const f = s.site;
  return el("span", { class: "ts-site-label" }, el("span", { class: "fn" }, siteLabel(s)),
    f.kind === "cpp" ? el("span", { class: "ts-tag", title: "a C++-only stack: no Python frame was recorded" }, "C++") : null,
    f.op ? el("span", { class: "muted" }, ` via ${f.op}`) : null);
}

export default {
  tool: "memory_profile",
  accepts: (run) => run.kind === "torch_snapshot",
  css: ["pages/torch_snapshot.css", "pages/memory_profile.css"], // the latter: a job's "All ranks" (memory_profile_hosts.js)
  keys: {
    t: { resetOn: ["run", "tool", "host"] },
    tl: { resetOn: ["run", "tool", "host"] },
    detail: { resetOn: ["run", "tool", "host"] },
    q: { resetOn: ["run", "tool", "host"] },
    x: { resetOn: ["run", "tool", "host"] },
    win: { resetOn: ["run", "tool", "host"] },
    find: { resetOn: ["run", "tool", "host"] },
    other: { resetOn: ["run", "tool", "host"] },
    ...COMPARE_KEYS, // base: the snapshot compared with, as other= (comparedWith)
  },
  render: renderSnapshot,
  leave,
};
