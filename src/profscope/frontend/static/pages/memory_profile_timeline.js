// The memory profile page's timeline, shared by both payloads' parts: the view on screen
// (`current`), the selected time (`t`) and its marks on the charts, the hover/selection
// card beside them, and the step and module bands the charts draw.
// Each payload's part says how it draws through ctx.part ({ render, shapes, eventRows });
// this module imports no part, so the page entry (memory_profile.js) is the only module
// that knows both of them.
import { el, fill } from "../lib/dom.js";
import { go, readState, stateUrl } from "../lib/state.js";
import { MEMORY as C, P } from "../lib/colors.js";
import { escapePlotly } from "../lib/plotly.js";

// The view on screen: allocator, selection and filter change in place. A chart's callback
// for another view (the user moved on) does nothing.
export let current = null;

export function setCurrent(ctx) {
  current = ctx;
}

// Main column and the sticky event card beside it.
export function layout(ctx, sections) {
  ctx.card = el("div", { id: "mp-event", class: "mp-card" });
  ctx.body.replaceChildren(el("div", { class: "mp-layout" },
    el("div", { class: "mp-main" }, sections),
    el("aside", { class: "mp-aside" }, ctx.card)));
}

// -- hover card, selection (t), marks ------------------------------------------------------

export function wireTimeline(ctx, div) {
  const index = (ev) => {
    const p = ev && ev.points && ev.points.find((q) => q.curveNumber === ctx.hoverCurve);
    return p ? p.pointIndex : -1;
  };
  div.on("plotly_hover", (ev) => {
    if (current !== ctx) return;
    const i = index(ev);
    if (i >= 0) showEvent(ctx, i, "hover");
  });
  div.on("plotly_unhover", () => { if (current === ctx) showEvent(ctx); });
  div.on("plotly_click", (ev) => {
    if (current !== ctx) return;
    const i = index(ev);
    if (i >= 0) selectIndex(ctx, i);
  });
}

export function selectIndex(ctx, i) {
  go({ ...readState(), t: i >= 0 ? timeParam(ctx.model.t[i]) : "" });
}

// `t` in the URL: a time in ms; the nearest drawn event is selected.
export function selectTime(ctx, t) {
  if (!ctx.model || !ctx.model.n) return;
  ctx.t = t;
  const ms = t === "" ? NaN : Number(t);
  ctx.selected = Number.isFinite(ms) ? nearestIndex(ctx.model.t, ms) : -1;
  ctx.badTime = t !== "" && !Number.isFinite(ms) ? t : "";
  ctx.rowMark = null;
  redrawMarks(ctx);
  showEvent(ctx);
}

export function redrawMarks(ctx) {
  const div = ctx.root.querySelector("#mp-timeline");
  if (!div || !div.layout) return;
  const shapes = ctx.part.shapes(ctx);
  if (JSON.stringify(shapes) !== JSON.stringify(div.layout.shapes || [])) window.Plotly.relayout(div, { shapes });
  const cat = ctx.categoryDiv;
  if (cat && cat.layout && ctx.categoryAligned) {
    const catShapes = bandShapes(ctx.model.steps).concat(markShapes(ctx));
    if (JSON.stringify(catShapes) !== JSON.stringify(cat.layout.shapes || [])) window.Plotly.relayout(cat, { shapes: catShapes });
  }
}

export function markShapes(ctx) {
  const out = [];
  if (ctx.selected >= 0) out.push(vline(ctx.model.t[ctx.selected], C.selected, "solid", "selected"));
  if (ctx.rowMark !== null && ctx.rowMark !== undefined) out.push(vline(ctx.rowMark, C.row, "dash", "row"));
  return out;
}

// The card: the hovered event, else the selected one, else the peak.
export function showEvent(ctx, i = -1, mode = "") {
  if (!ctx.card) return;
  if (i < 0) {
    if (ctx.rowMark !== null && ctx.rowMark !== undefined) { ctx.rowMark = null; redrawMarks(ctx); }
    i = ctx.selected >= 0 ? ctx.selected : ctx.model.peakIndex;
    mode = ctx.selected >= 0 ? "selected" : "peak";
  }
  const m = ctx.model;
  ctx.card.classList.toggle("selected", mode === "selected");
  ctx.card.dataset.index = String(i);
  ctx.card.dataset.mode = mode;
  if (i < 0 || i >= m.n) {
    ctx.card.replaceChildren(el("p", { class: "muted" }, "Hover the timeline to see an event."));
    return;
  }
  const kindLabel = { hover: "event", selected: "selected event", peak: "peak event" }[mode] || "event";
  const rows = ctx.part.eventRows(m, i);
  fill(ctx.card,
    el("div", { class: "mp-card-head" }, el("span", { class: "mp-card-kind" }, kindLabel),
      mode === "selected" ? el("button", { type: "button", class: "mp-clear", onclick: () => go({ ...readState(), t: "" }) }, "clear") : null),
    el("div", { class: "mp-card-name" }, rows.title),
    el("dl", {}, rows.items.flatMap(([k, v]) => (v === undefined || v === null || v === "" ? []
      : k === "" ? [el("div", { class: "mp-dl-sep" }, v)] : [el("dt", {}, k), el("dd", {}, v)]))),
    ctx.badTime ? el("p", { class: "mp-note" }, `t=${ctx.badTime} is not a time.`) : null,
    traceLink(ctx, i),
    mode !== "selected" ? el("p", { class: "mp-card-tip muted" }, "Click a point on the timeline to keep an event here (and in the link).") : null);
}

// -- the trace viewer at this time (issue 37) -----------------------------------------------

// ms of the trace viewer's window either side of the event (steps_ops.js pads its slices so)
export const TRACE_PAD_MS = 0.05;

// Where event i falls on the trace of the same process: ctx.clock is GET /api/trace_clock
// (app/memory_trace_clock.py), per allocator or device either one offset (trace ms = this
// page's ms + offsetMs), or the trace ms of each event by its timeOffsetPs (host lines
// with different timestamps), or why there is no place: then no link, the why instead.
export function traceTime(ctx, i) {
  const c = ctx.clock;
  if (!c) return { ms: null, why: "" };
  const mine = (c.clocks || {})[ctx.memoryId];
  if (!c.trace || !mine) return { ms: null, why: (mine && mine.why) || c.why || "this run has no trace of the same process" };
  if (mine.offsetMs !== null && mine.offsetMs !== undefined) return { ms: ctx.model.t[i] + mine.offsetMs, why: "" };
  const ps = ctx.model.snaps && ctx.model.snaps[i] ? String(ctx.model.snaps[i].timeOffsetPs) : null;
  const ms = mine.traceMs && ps !== null ? mine.traceMs[ps] : undefined;
  return ms === undefined ? { ms: null, why: mine.why || "this event has no place on the trace" } : { ms, why: "" };
}

// The trace viewer's state at event i, or null (then traceTime's why says why not).
function traceTarget(ctx, i) {
  const { ms } = traceTime(ctx, i);
  if (ms === null) return null;
  // ctr/ct: the allocator's (device's) counter sample at that time selected, its card shown
  const counter = ((ctx.clock.clocks || {})[ctx.memoryId] || {}).counter;
  return { ms, target: { run: ctx.clock.trace.run, tool: "trace_viewer@", host: ctx.clock.trace.host,
    start_ms: timeParam(ms - TRACE_PAD_MS), end_ms: timeParam(ms + TRACE_PAD_MS),
    ...(counter !== null && counter !== undefined ? { ctr: String(counter), ct: timeParam(ms) } : {}) } };
}

export function traceLink(ctx, i) {
  if (!ctx.clock) return null; // still asking: the link comes with the answer
  if (ctx.clock.pending) return pendingTraceLink(ctx, i);
  const place = traceTarget(ctx, i);
  if (!place) {
    const { why } = traceTime(ctx, i);
    return el("p", { class: "mp-card-tip muted", id: "mp-trace-none", title: why }, `No trace link: ${why}.`);
  }
  const { ms, target } = place;
  return el("p", { class: "mp-card-link" }, el("a", { id: "mp-trace-link", href: stateUrl(target), "data-trace-ms": String(ms),
    title: `the trace viewer, ${TRACE_PAD_MS * 1e3} µs either side of ${timeParam(ms)} ms on its clock`,
    onclick: (e) => { e.preventDefault(); go(target); } }, "Open in the trace viewer at this time"));
}

// The trace's index is not built yet (GET /api/trace_clock?index=built answered pending):
// the link is an action that asks the full clock (which indexes the trace, once), then
// goes where the eager link would, or shows why there is no place.
function pendingTraceLink(ctx, i) {
  // the card is redrawn on every hover: the asking state lives on ctx, not on this node
  if (ctx.clockAsking) return el("p", { class: "mp-card-link muted", id: "mp-trace-indexing" }, "indexing the trace…");
  const open = () => {
    if (ctx.clockAsking) return;
    ctx.clockAsking = true;
    showEvent(ctx);
    ctx.askClock().then(() => {
      ctx.clockAsking = false;
      if (current !== ctx) return;
      const place = ctx.clock.pending ? null : traceTarget(ctx, i);
      if (place) go(place.target);
      else showEvent(ctx); // the why (#mp-trace-none) in its place
    });
  };
  return el("p", { class: "mp-card-link" }, el("a", { id: "mp-trace-link", role: "button", tabindex: "0",
    title: "indexes the trace first (once per trace; seconds on a large one), then opens the trace viewer at this time",
    onclick: (e) => { e.preventDefault(); open(); },
    onkeydown: (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); open(); } } },
  "Open in the trace viewer at this time"));
}

// -- times ---------------------------------------------------------------------------------

// The time as written into `t`: ms, to the nanosecond, without float noise.
export function timeParam(ms) { return String(Number(ms.toFixed(6))); }

export function nearestIndex(ts, ms) {
  let lo = 0, hi = ts.length - 1;
  if (hi < 0) return -1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (ts[mid] < ms) lo = mid + 1; else hi = mid;
  }
  if (lo > 0 && Math.abs(ts[lo - 1] - ms) <= Math.abs(ts[lo] - ms)) {
    lo -= 1; // the first of equal times
    while (lo > 0 && ts[lo - 1] === ts[lo]) lo--;
  }
  return lo;
}

// -- shapes --------------------------------------------------------------------------------

export function vline(x, color, dash, name) {
  return { type: "line", name, x0: x, x1: x, yref: "paper", y0: 0, y1: 1, line: { color, width: name === "selected" ? 1.6 : 1.2, dash } };
}

// Alternating step bands across the plot; labels only while they stay readable.
export function bandShapes(bands) {
  return bands.map((b, i) => ({ type: "rect", name: "step", layer: "below", x0: b.x0, x1: b.x1, yref: "paper", y0: 0, y1: 1,
    fillcolor: i % 2 ? "rgba(47,111,223,0.03)" : "rgba(47,111,223,0.075)", line: { width: 0 } }));
}

export function moduleShapes(mods) {
  return mods.map((b, i) => ({ type: "rect", name: "module", layer: "below", x0: b.x0, x1: b.x1, yref: "paper", y0: 0, y1: 0.03,
    fillcolor: i % 2 ? P.purple : P.teal, line: { width: 0 } }));
}

export function bandLabels(bands) {
  if (!bands.length || bands.length > 40) return [];
  return bands.map((b) => ({ x: (b.x0 + b.x1) / 2, yref: "paper", y: 1, yanchor: "top", showarrow: false, text: escapePlotly(b.name),
    font: { size: 10, color: P.band } }));
}
