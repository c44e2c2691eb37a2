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
// draw each, with the pieces they share from memory_profile_parts.js and the timeline
// (the view on screen, the selected time, its marks and the event card) from
// memory_profile_timeline.js. This module is the page itself (its URL keys, the loading,
// the allocator picker): the only one that imports both parts, and no part imports it.
// A PyTorch snapshot run's memory_profile tool is another page (torch_snapshot.js).
// URL keys: memory_id (allocator or device), t (the selected time, ms), q (the breakdown
// table's filter), base / base_host (the compare view: memory_profile_compare.js).
import { el, fill } from "../lib/dom.js";
import { go, readState } from "../lib/state.js";
import { cachedJson, errorBox, getJson } from "../lib/api.js";
import { purge as purgeCharts } from "../lib/plotly.js";
import { current, selectTime, setCurrent, showEvent } from "./memory_profile_timeline.js";
import { renderTorch, torchEventRows, torchShapes } from "./memory_profile_torch.js";
import { renderXprof, xprofEventRows, xprofShapes } from "./memory_profile_xprof.js";
import { hostsSection, showsHosts } from "./memory_profile_hosts.js";
import { leaveCompare, renderMemoryCompare } from "./memory_profile_compare.js";
import { COMPARE_KEYS, comparePicker, comparing } from "../lib/compare.js";

// How each payload is drawn (ctx.part): its page, its timeline's shapes, its event card.
const PARTS = {
  xprof: { render: renderXprof, shapes: xprofShapes, eventRows: xprofEventRows },
  torch: { render: renderTorch, shapes: torchShapes, eventRows: torchEventRows },
};

// -- entry point ---------------------------------------------------------------------

async function renderMemoryProfile(view, state, run, details) {
  leaveCompare();
  if (comparing(state)) { // compared with a base (docs/compare.md): its own view
    leave();
    const root = el("div", { class: "mp" }, header(run, hostOf(state, run)), comparePicker(state, run, { tool: "memory_profile" }));
    view.replaceChildren(root);
    return renderMemoryCompare(view, root, state, run);
  }
  const key = viewKey(state, run);
  if (current && current.key === key && view.contains(current.root)) return update(current, state);
  leave();
  const root = el("div", { class: "mp" }, header(run, hostOf(state, run)), comparePicker(state, run, { tool: "memory_profile" }),
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
  const kind = payloadKind(data);
  const ctx = { key, root, run, data, kind, part: PARTS[kind] || null, charts: [], clock: null };
  setCurrent(ctx);
  loadClock(ctx, state, run);
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

// Where this page's times fall on the trace viewer's clock (GET /api/trace_clock): asked
// once per view, after the page is drawn; the event card draws its trace link from it.
// index=built: only from a trace index already built (opening this page must not index a
// large trace, nor submit it to a Dask cluster); when it is not, the answer is pending and
// the card's link asks the full clock when clicked (traceLink's action, ctx.askClock).
function loadClock(ctx, state, run) {
  const q = new URLSearchParams({ run: run.name });
  const host = hostOf(state, run);
  if (host) q.set("host", host);
  const failed = (err) => ({ trace: null, clocks: {}, why: `the trace could not be read (${err.message || err})` });
  const redraw = () => { if (current === ctx && ctx.model) showEvent(ctx); };
  // not cached: a pending answer is stale once the trace is indexed
  getJson(`/api/trace_clock?${new URLSearchParams({ ...Object.fromEntries(q), index: "built" })}`)
    .then((clock) => { ctx.clock = clock; }, (err) => { ctx.clock = failed(err); }).then(redraw);
  ctx.askClock = () => cachedJson(`/api/trace_clock?${q}`).then((clock) => { ctx.clock = clock; },
    (err) => { ctx.clock = failed(err); });
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
  setCurrent(null);
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
  if (run.kind === "chrome_trace") { // a distributed job's rank: host=
    return `/api/memory_profile?${new URLSearchParams(run.job ? { run: run.name, host: hostOf(state, run) } : { run: run.name })}`;
  }
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
  ctx.part.render(ctx);
  selectTime(ctx, state.t || "");
  if (ctx.table && state.q) ctx.table.setFilter(state.q);
}

export default {
  tool: "memory_profile",
  accepts: (run) => run.kind !== "torch_snapshot" && run.kind !== "pprof", // pprof: memory_profile_pprof.js
  css: ["pages/memory_profile.css"],
  keys: {
    memory_id: { resetOn: ["run", "tool", "host"] },
    t: { resetOn: ["run", "tool", "host"] },
    q: { resetOn: ["run", "tool", "host"] },
    ...COMPARE_KEYS, // base, base_host: the compare view (pages/memory_profile_compare.js)
  },
  render: renderMemoryProfile,
  leave,
};
