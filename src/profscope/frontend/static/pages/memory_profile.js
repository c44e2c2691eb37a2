// Memory profile page: what the runtime allocator really did while the program ran.
// Data: /data/plugin/profile/data?tag=memory_profile answers, by run kind,
//  - profiles (xplane): XProf 2.24's MemoryProfile JSON (memoryProfilePerAllocator,
//    memoryIds, ...; int64 may be strings) plus profscope's extras under `profscope`
//    (summary numbers, leak hints with evidence, step bands; all optional: plain XProf
//    output works too);
//  - PyTorch profiler traces: profscope's own payload from /api/memory_profile (devices[]
//    with allocated/reserved over time, breakdown at peak by op and module, steps, leak
//    hints; categoryTimeline); the data API answers those runs in XProf's schema, for
//    XProf's own page.
// The page tells them apart by shape: memory_profile_xprof.js and memory_profile_torch.js
// draw each, with the pieces they share from memory_profile_parts.js; this module is the
// page itself (its URL keys, the allocator picker, the event card, the selected time).
// A PyTorch snapshot run's memory_profile tool is another page (torch_snapshot.js).
// URL keys: memory_id (allocator or device), t (the selected time, ms), q (the breakdown
// table's filter).
import { el, fill } from "../lib/dom.js";
import { go, readState } from "../lib/state.js";
import { cachedJson, errorBox } from "../lib/api.js";
import { MEMORY as C } from "../lib/colors.js";
import { purge as purgeCharts } from "../lib/plotly.js";
import { bandShapes, nearestIndex, timeParam, vline } from "./memory_profile_parts.js";
import { renderTorch, torchEventRows, torchShapes } from "./memory_profile_torch.js";
import { renderXprof, xprofEventRows, xprofShapes } from "./memory_profile_xprof.js";
import { hostsSection, showsHosts } from "./memory_profile_hosts.js";

export let current = null; // the view on screen: allocator, selection and filter change in place

// -- entry point ---------------------------------------------------------------------

async function renderMemoryProfile(view, state, run, details) {
  const key = viewKey(state, run);
  if (current && current.key === key && view.contains(current.root)) return update(current, state);
  leave();
  const root = el("div", { class: "mp" }, header(run, hostOf(state, run)),
    showsHosts(run) ? hostsSection(run, hostOf(state, run)) : null,
    el("p", { class: "muted" }, run.kind === "chrome_trace" ? "Reading the trace's memory events…" : "Reading the allocator events…"));
  view.replaceChildren(root);
  let data;
  try {
    data = await loadData(state, run);
  } catch (err) {
    if (viewKey(readState(), run) !== key) return;
    root.lastChild.replaceWith(errorBox(err, "No memory profile"), captureHelp(run));
    return;
  }
  if (viewKey(readState(), run) !== key || !view.contains(root)) return; // the user moved on
  root.lastChild.remove();
  const ctx = { key, root, run, data, kind: payloadKind(data), charts: [] };
  current = ctx;
  if (ctx.kind === "unknown") {
    root.append(el("div", { class: "error" }, "The server sent a memory profile this page does not know (neither XProf's memoryProfilePerAllocator nor a PyTorch trace's devices)."),
      el("details", {}, el("summary", {}, "the payload"), el("pre", { class: "mp-pre" }, JSON.stringify(data, null, 1).slice(0, 20000))));
    return;
  }
  ctx.toolbar = el("div", { class: "mp-toolbar", id: "mp-toolbar" });
  ctx.body = el("div", { id: "mp-body" });
  root.append(ctx.toolbar, ctx.body);
  renderBody(ctx, state);
}

function payloadKind(data) {
  if (!data || typeof data !== "object") return "unknown";
  if ("memoryProfilePerAllocator" in data || "memoryIds" in data) return "xprof";
  if (Array.isArray(data.devices)) return "torch";
  // XProf answers a profile without a host plane with an empty object (plus our extras).
  if (!Object.keys(data).filter((k) => k !== "profscope").length) return "xprof";
  return "unknown";
}

function update(ctx, state) {
  if (ctx.kind === "unknown") return;
  if (resolveId(ctx, state.memory_id) !== ctx.memoryId || (state.memory_id || "") !== ctx.requestedId) return renderBody(ctx, state);
  if ((state.t || "") !== (ctx.t || "")) selectTime(ctx, state.t || "");
  if (ctx.table && (state.q || "") !== ctx.table.filter()) ctx.table.setFilter(state.q || "");
}

function leave() {
  if (!current) return;
  purge(current);
  current = null;
}

function purge(ctx) {
  purgeCharts(ctx.charts);
  ctx.charts = [];
}

function hostOf(state, run) {
  return state.host || (run.hosts && run.hosts[0]) || "";
}

function viewKey(state, run) {
  return [state.run, hostOf(state, run)].join("\u0000");
}

function dataUrl(state, run) {
  if (run.kind === "chrome_trace") return `/api/memory_profile?${new URLSearchParams({ run: run.name })}`;
  const q = new URLSearchParams({ run: run.name, tag: "memory_profile" });
  const host = hostOf(state, run);
  if (host) q.set("host", host);
  return `/data/plugin/profile/data?${q}`;
}

function loadData(state, run) {
  const url = dataUrl(state, run);
  return cachedJson(url);
}

function header(run, host) {
  return el("div", { class: "mp-head" },
    el("h1", {}, "Memory profile"),
    el("div", { class: "mp-subtitle muted" }, run.name, host ? ` · host ${host}` : "",
      run.kind === "chrome_trace" ? " · PyTorch profiler trace" : ""));
}

function captureHelp(run) {
  return el("div", { class: "mp-note" }, el("strong", {}, "How to get a memory profile. "), helpText(run));
}

function helpText(run) {
  const torch = run.kind === "chrome_trace";
  return torch
    ? ["Profile with ", el("code", {}, "torch.profiler.profile(profile_memory=True, record_shapes=True, with_stack=True)"),
      " and export the Chrome trace; ", el("code", {}, "prof.export_memory_timeline(\"x.memory_timeline.json\")"),
      " next to it adds the breakdown by category."]
    : ["The allocator writes ", el("code", {}, "MemoryAllocation"), " / ", el("code", {}, "MemoryDeallocation"),
      " events into the profile's ", el("code", {}, "/host:CPU"), " plane when it is the BFC allocator: JAX and TensorFlow on GPU, or TensorFlow on CPU with ",
      el("code", {}, "TF_CPU_ALLOCATOR_USE_BFC=true"), ". JAX on CPU records none."];
}

// -- allocator / device ----------------------------------------------------------------

function ids(ctx) {
  if (ctx.kind === "torch") return ctx.data.devices.map((d) => d.device);
  const per = ctx.data.memoryProfilePerAllocator || {};
  const listed = (ctx.data.memoryIds || []).filter((id) => id in per);
  return listed.concat(Object.keys(per).filter((id) => !listed.includes(id)));
}

function resolveId(ctx, wanted) {
  const all = ids(ctx);
  return all.includes(wanted || "") ? wanted || "" : all.length ? all[0] : null;
}

function renderBody(ctx, state) {
  purge(ctx);
  ctx.requestedId = state.memory_id || "";
  ctx.memoryId = resolveId(ctx, state.memory_id);
  ctx.t = "";
  ctx.table = null;
  ctx.selected = -1;
  const all = ids(ctx);
  const noun = ctx.kind === "torch" ? "Device" : "Allocator";
  const select = el("select", { id: "mp-allocator", "aria-label": noun.toLowerCase(),
    onchange: (e) => go({ ...readState(), memory_id: e.target.value, t: "", q: "" }) },
  all.map((id) => el("option", { value: id }, id === "" ? "(no allocator name)" : id)));
  if (ctx.memoryId !== null) select.value = ctx.memoryId;
  select.disabled = all.length < 2;
  fill(ctx.toolbar, el("label", { class: "mp-picker" }, `${noun} `, select,
    all.length === 1 ? el("span", { class: "muted" }, ctx.kind === "torch" ? " (the only device with memory events)" : " (the only allocator in this profile)") : null),
  state.memory_id && ctx.memoryId !== state.memory_id
    ? el("span", { class: "mp-warn", id: "mp-unknown-id" }, `No ${noun.toLowerCase()} named "${state.memory_id}" here: showing ${ctx.memoryId ?? "nothing"}.`) : null);
  if (ctx.memoryId === null) {
    ctx.toolbar.replaceChildren();
    fill(ctx.body, el("div", { class: "mp-note strong", id: "mp-empty" },
      el("p", {}, el("strong", {}, ctx.kind === "torch" ? "No [memory] events in this trace." : "No allocator events in this profile.")),
      el("p", {}, helpText(ctx.run))));
    return;
  }
  if (ctx.kind === "xprof") renderXprof(ctx);
  else renderTorch(ctx);
  selectTime(ctx, state.t || "");
  if (ctx.table && state.q) ctx.table.setFilter(state.q);
}

// Main column and the sticky event card beside it.
export function layout(ctx, sections) {
  ctx.card = el("div", { id: "mp-event", class: "mp-card" });
  ctx.body.replaceChildren(el("div", { class: "mp-layout" },
    el("div", { class: "mp-main" }, sections),
    el("aside", { class: "mp-aside" }, ctx.card)));
}

// -- shared timeline behaviour: hover card, selection (t), marks -----------------------

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
function selectTime(ctx, t) {
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
  const shapes = ctx.kind === "xprof" ? xprofShapes(ctx) : torchShapes(ctx);
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
  const rows = ctx.kind === "xprof" ? xprofEventRows(m, i) : torchEventRows(m, i);
  fill(ctx.card,
    el("div", { class: "mp-card-head" }, el("span", { class: "mp-card-kind" }, kindLabel),
      mode === "selected" ? el("button", { type: "button", class: "mp-clear", onclick: () => go({ ...readState(), t: "" }) }, "clear") : null),
    el("div", { class: "mp-card-name" }, rows.title),
    el("dl", {}, rows.items.flatMap(([k, v]) => (v === undefined || v === null || v === "" ? []
      : k === "" ? [el("div", { class: "mp-dl-sep" }, v)] : [el("dt", {}, k), el("dd", {}, v)]))),
    ctx.badTime ? el("p", { class: "mp-note" }, `t=${ctx.badTime} is not a time.`) : null,
    mode !== "selected" ? el("p", { class: "mp-card-tip muted" }, "Click a point on the timeline to keep an event here (and in the link).") : null);
}

export default {
  tool: "memory_profile",
  accepts: (run) => run.kind !== "torch_snapshot",
  css: ["pages/memory_profile.css"],
  keys: {
    memory_id: { resetOn: ["run", "tool", "host"] },
    t: { resetOn: ["run", "tool", "host"] },
    q: { resetOn: ["run", "tool", "host"] },
  },
  render: renderMemoryProfile,
  leave,
};
