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
// The page tells them apart by shape. A PyTorch snapshot run's memory_profile tool is
// another page (torch_snapshot.js). URL keys: memory_id (allocator or device), t (the
// selected time, ms), q (the breakdown table's filter).
import { el, fill } from "../lib/dom.js";
import { go, readState, setUrl, stateUrl } from "../lib/state.js";
import { cachedJson, errorBox } from "../lib/api.js";
import { byteUnit as unitFor, exact, fmt3 as fmt2, fmtBytes, fmtHex as hexAddress, fmtMs, num, pct, signed, signedBytes } from "../lib/format.js";
import { MEMORY as C, P, TORCH_CATEGORY as CATEGORY_COLORS, TORCH_OTHER as OTHER_COLORS, rgba } from "../lib/colors.js";
import { HOVER_CARD, LEGEND_TOP, SPIKE_AXIS, escapePlotly, newPlot, purge as purgeCharts } from "../lib/plotly.js";
import { sortableTable } from "../lib/table.js";

const PAGE_ROWS = 200; // table rows drawn per "show more"
const MAX_POINTS = 5000; // more timeline points than this are max-filtered in the browser

let current = null; // the view on screen: allocator, selection and filter change in place

// -- entry point ---------------------------------------------------------------------

async function renderMemoryProfile(view, state, run, details) {
  const key = viewKey(state, run);
  if (current && current.key === key && view.contains(current.root)) return update(current, state);
  leave();
  const root = el("div", { class: "mp" }, header(run, hostOf(state, run)),
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
function layout(ctx, sections) {
  ctx.card = el("div", { id: "mp-event", class: "mp-card" });
  ctx.body.replaceChildren(el("div", { class: "mp-layout" },
    el("div", { class: "mp-main" }, sections),
    el("aside", { class: "mp-aside" }, ctx.card)));
}

// -- XProf payload ---------------------------------------------------------------------

function xprofModel(data, id) {
  const a = (data.memoryProfilePerAllocator || {})[id] || {};
  const extras = (((data.profscope || {}).allocators) || {})[id] || {};
  let snaps = a.sampledTimelineSnapshots || [];
  if (snaps.length > MAX_POINTS) snaps = maxFilter(snaps, (s) => num(s.aggregationStats?.stackReservedBytes) + num(s.aggregationStats?.heapAllocatedBytes));
  const n = snaps.length;
  const m = { id, raw: a, extras, snaps, n, t: new Float64Array(n), stack: new Float64Array(n), heap: new Float64Array(n),
    free: new Float64Array(n), frag: new Array(n), peakInUse: new Float64Array(n) };
  snaps.forEach((s, i) => {
    const g = s.aggregationStats || {};
    m.t[i] = psToMs(s.timeOffsetPs);
    m.stack[i] = num(g.stackReservedBytes);
    m.heap[i] = num(g.heapAllocatedBytes);
    m.free[i] = num(g.freeMemoryBytes);
    m.frag[i] = fraction(g.fragmentation);
    m.peakInUse[i] = num(g.peakBytesInUse);
  });
  const ps = a.profileSummary || {};
  const pk = ps.peakStats || {};
  const peakTotal = num(pk.stackReservedBytes) + num(pk.heapAllocatedBytes);
  const peakMs = psToMs(extras.summary?.peakTimePs ?? ps.peakStatsTimePs);
  // The peak event: same time and same stack + heap (the sampled timeline keeps it).
  m.peakIndex = -1;
  for (let i = 0; i < n; i++) if (m.t[i] === peakMs && m.stack[i] + m.heap[i] === peakTotal) { m.peakIndex = i; break; }
  if (m.peakIndex < 0 && n) {
    let best = 0;
    for (let i = 1; i < n; i++) if (m.stack[i] + m.heap[i] > m.stack[best] + m.heap[best]) best = i;
    m.peakIndex = best;
  }
  m.summary = xprofSummary(m, ps, pk, peakTotal, peakMs);
  m.steps = ((data.profscope || {}).steps || []).map((s) => ({ name: s.name || `step ${s.groupId}`, x0: psToMs(s.startPs), x1: psToMs(s.endPs) }));
  m.modules = (data.hloModules || []).map((h) => ({ name: h.name || "", x0: psToMs(h.startTimePs), x1: psToMs(h.endTimePs) }));
  return m;
}

function xprofSummary(m, ps, pk, peakTotal, peakMs) {
  const s = m.extras.summary || {};
  const has = (v) => v !== undefined && v !== null;
  let allocations = s.allocations, deallocations = s.deallocations, counted = "all";
  if (!has(allocations)) { // plain XProf: count what the sampled timeline holds
    counted = "sampled";
    allocations = m.snaps.filter((x) => activity(x) === "ALLOCATION").length;
    deallocations = m.snaps.filter((x) => activity(x) === "DEALLOCATION").length;
  }
  const peakSnap = m.snaps[m.peakIndex];
  return {
    counted, allocations, deallocations, imbalance: has(s.imbalance) ? s.imbalance : allocations - deallocations,
    events: has(s.events) ? s.events : m.n,
    capacity: has(s.capacityBytes) ? s.capacityBytes : num(ps.memoryCapacity),
    lifetimePeak: has(s.lifetimePeakBytes) ? s.lifetimePeakBytes : num(ps.peakBytesUsageLifetime),
    peak: has(s.peakBytes) ? s.peakBytes : peakTotal,
    peakMs,
    peakStep: has(s.peakStepId) ? s.peakStepId : peakSnap ? num(peakSnap.activityMetadata?.stepId) : undefined,
    peakOp: peakSnap ? peakSnap.activityMetadata?.tfOpName || "" : "",
    stack: has(s.stackBytesAtPeak) ? s.stackBytesAtPeak : num(pk.stackReservedBytes),
    heap: has(s.heapBytesAtPeak) ? s.heapBytesAtPeak : num(pk.heapAllocatedBytes),
    free: has(s.freeBytesAtPeak) ? s.freeBytesAtPeak : num(pk.freeMemoryBytes),
    frag: has(s.fragmentationAtPeak) ? fraction(s.fragmentationAtPeak) : fraction(pk.fragmentation),
    share: has(s.peakShareOfCapacity) ? s.peakShareOfCapacity : null,
    liveAtEnd: s.liveAtEndBytes, freedBefore: s.freedBeforeWindowBytes,
    windowStart: has(s.windowStartPs) ? psToMs(s.windowStartPs) : m.n ? m.t[0] : undefined,
    windowEnd: has(s.windowEndPs) ? psToMs(s.windowEndPs) : m.n ? m.t[m.n - 1] : undefined,
  };
}

function activity(snap) {
  return (snap.activityMetadata || {}).memoryActivity || "UNKNOWN_ACTIVITY";
}

function renderXprof(ctx) {
  const m = xprofModel(ctx.data, ctx.memoryId);
  ctx.model = m;
  if (!m.n) {
    ctx.body.replaceChildren(el("div", { class: "mp-note strong", id: "mp-empty" }, `Allocator ${ctx.memoryId} has no events in this profile.`));
    return;
  }
  const f = m.summary;
  ctx.scale = f.capacity && f.peak / f.capacity < 0.5 ? "use" : "capacity";
  const downsampled = f.events > m.n;
  layout(ctx, [
    el("section", {}, el("h2", {}, "Summary"), xprofSummaryNode(ctx, f)),
    el("section", {},
      el("div", { class: "mp-section-head" }, el("h2", {}, "Memory over time"), scaleToggle(ctx)),
      el("p", { class: "mp-hint" }, "What the allocator held after each event: stack, heap and free memory stacked, fragmentation on the right axis. ",
        "Hover to see the event; click to select it (the link then points at it). Drag to zoom, double-click to reset.",
        downsampled ? ` ${m.n.toLocaleString()} of ${f.events.toLocaleString()} events are drawn: each point keeps the largest in-use value of its window, so the peak survives.` : ""),
      el("div", { id: "mp-timeline", class: "mp-chart" })),
    el("section", {},
      el("h2", {}, "Breakdown at peak"),
      el("p", { class: "mp-hint" }, "The allocations live when stack + heap peaked (in the peak's step), identical ones merged. ",
        "XProf adds up to two rows of its own, marked synthetic: ", el("em", {}, "stack"), " (the stack reserved at the peak) and ",
        el("em", {}, "unused preallocated device memory"), " (heap at the peak that no allocation of the step explains: memory allocated before it). ",
        "Hover a row to see when it was allocated; click it to select that event."),
      el("div", { id: "mp-breakdown" })),
    el("section", {}, el("h2", {}, "Leak hints"), el("div", { id: "mp-leaks" })),
  ]);
  plotXprofTimeline(ctx);
  ctx.table = xprofBreakdown(ctx);
  ctx.root.querySelector("#mp-breakdown").append(ctx.table.node);
  ctx.root.querySelector("#mp-leaks").append(...xprofLeaks(ctx));
}

function xprofSummaryNode(ctx, f) {
  const shareText = f.capacity ? pct(100 * f.peak / f.capacity) : "";
  const higherBefore = f.lifetimePeak > f.peak;
  return el("div", { id: "mp-summary" },
    el("div", { class: "mp-peak" },
      el("span", { class: "label" }, "Peak in window "),
      el("strong", { class: "mp-peak-value", title: exact(f.peak) }, fmtBytes(f.peak)),
      el("span", {}, " at ", timeLink(ctx, f.peakMs, m0(ctx).peakIndex)),
      f.peakStep !== undefined ? el("span", { class: "muted" }, ` · step ${f.peakStep}`) : null,
      f.peakOp ? el("span", { class: "muted" }, " · ", el("code", {}, f.peakOp)) : null,
      f.capacity ? el("span", { class: "muted" }, ` · ${shareText} of the ${fmtBytes(f.capacity)} capacity`) : null),
    balance(f.allocations, f.deallocations, f.imbalance, f.counted === "sampled",
      { liveAtEnd: f.liveAtEnd, freedBefore: f.freedBefore, events: f.events, peak: f.peak,
        window: f.windowEnd !== undefined ? [f.windowStart, f.windowEnd] : null }),
    el("div", { class: "mp-tiles cols-4" },
      tile("capacity", "Capacity", bytesNode(f.capacity), f.capacity, "stack + heap + free at the peak"),
      tile("lifetimePeak", "Lifetime peak", bytesNode(f.lifetimePeak), f.lifetimePeak,
        higherBefore ? "higher than in the window: the allocator peaked before it" : "the allocator's peak since it was created"),
      tile("peak", "Peak in window", bytesNode(f.peak), f.peak, "largest stack + heap"),
      tile("peakTime", "Time of peak", fmtMs(f.peakMs), f.peakMs, f.peakStep !== undefined ? `in step ${f.peakStep}` : ""),
      tile("stack", "Stack at peak", bytesNode(f.stack), f.stack, "reserved stack"),
      tile("heap", "Heap at peak", bytesNode(f.heap), f.heap, "allocated heap"),
      tile("free", "Free at peak", bytesNode(f.free), f.free, "still available"),
      tile("fragmentation", "Fragmentation at peak", f.frag === null ? "—" : pct(100 * f.frag), f.frag, "free memory in pieces too small for the largest request")));
}

function m0(ctx) { return ctx.model; }

function scaleToggle(ctx) {
  const button = (value, label, title) => el("button", { type: "button", "data-scale": value, title, class: ctx.scale === value ? "on" : "",
    onclick: (e) => {
      ctx.scale = value;
      for (const b of e.target.parentNode.children) b.classList.toggle("on", b === e.target);
      const div = ctx.root.querySelector("#mp-timeline");
      if (div && div.layout) window.Plotly.relayout(div, xprofScaleLayout(ctx));
    } }, label);
  return el("div", { class: "mp-seg", role: "group", "aria-label": "y axis" },
    button("use", "Zoom to use", "y axis up to the peak: free memory runs off the top"),
    button("capacity", "Full capacity", "y axis up to stack + heap + free"));
}

function xprofScaleLayout(ctx) {
  const m = ctx.model, u = ctx.unit;
  let maxUse = 0, maxTotal = 0;
  for (let i = 0; i < m.n; i++) {
    maxUse = Math.max(maxUse, m.stack[i] + m.heap[i]);
    maxTotal = Math.max(maxTotal, m.stack[i] + m.heap[i] + m.free[i]);
  }
  const top = ctx.scale === "use" ? maxUse * 1.3 : Math.max(maxTotal, m.summary.capacity) * 1.05;
  return { "yaxis.range": [0, (top || 1) / u.div], "yaxis.autorange": false, shapes: xprofShapes(ctx), annotations: xprofAnnotations(ctx) };
}

function plotXprofTimeline(ctx) {
  const m = ctx.model, f = m.summary;
  const div = ctx.root.querySelector("#mp-timeline");
  let maxUse = 0;
  for (let i = 0; i < m.n; i++) maxUse = Math.max(maxUse, m.stack[i] + m.heap[i]);
  const u = unitFor(ctx.scale === "use" ? maxUse : Math.max(f.capacity, maxUse));
  ctx.unit = u;
  const x = Array.from(m.t);
  const stackY = [], useY = [], totalY = [], fragY = [], labels = [];
  for (let i = 0; i < m.n; i++) {
    stackY.push(m.stack[i] / u.div);
    useY.push((m.stack[i] + m.heap[i]) / u.div);
    totalY.push((m.stack[i] + m.heap[i] + m.free[i]) / u.div);
    fragY.push(m.frag[i] === null ? null : 100 * m.frag[i]);
    labels.push(xprofHoverText(m, i));
  }
  const area = (name, y, color, fill, opacity) => ({ type: "scatter", mode: "lines", name, x, y, fill, hoverinfo: "skip",
    line: { color, width: 1, shape: "hv" }, fillcolor: rgba(color, opacity) });
  const traces = [
    area("stack", stackY, C.stack, "tozeroy", 0.55),
    area("heap", useY, C.heap, "tonexty", 0.55),
    area("free", totalY, C.free, "tonexty", 0.16),
    { type: "scatter", mode: "lines", name: "fragmentation", x, y: fragY, yaxis: "y2", hoverinfo: "skip", connectgaps: false,
      line: { color: C.frag, width: 1.4, shape: "hv" } },
    { type: "scatter", mode: "markers", name: "event", x, y: useY, text: labels, hovertemplate: "%{text}<extra></extra>", showlegend: false,
      marker: { size: 7, color: "rgba(0,0,0,0)" }, hoverlabel: HOVER_CARD },
  ];
  ctx.hoverCurve = 4;
  if (m.peakIndex >= 0) traces.push({ type: "scatter", mode: "markers+text", name: "peak", x: [m.t[m.peakIndex]], y: [useY[m.peakIndex]],
    marker: { color: C.peak, size: 10, symbol: "diamond" }, text: [`peak ${fmtBytes(f.peak)}`], textposition: labelSide(x, m.peakIndex),
    textfont: { color: C.peak }, hoverinfo: "skip", cliponaxis: false, showlegend: false });
  newPlot(div, traces, {
    height: 380, margin: { l: 64, r: 64, t: 34, b: 48 }, hovermode: "x", hoverdistance: -1,
    xaxis: { title: { text: "time (ms)" }, ...SPIKE_AXIS },
    yaxis: { title: { text: u.label }, rangemode: "tozero", fixedrange: false },
    yaxis2: { title: { text: "fragmentation (%)", font: { color: C.frag } }, overlaying: "y", side: "right", range: [0, 100], tickmode: "linear", tick0: 0, dtick: 25,
      showgrid: false, zeroline: false, tickfont: { color: C.frag } },
    legend: { ...LEGEND_TOP, traceorder: "normal" },
  });
  window.Plotly.relayout(div, xprofScaleLayout(ctx));
  ctx.charts.push(div);
  wireTimeline(ctx, div);
}

function xprofHoverText(m, i) {
  const a = m.snaps[i].activityMetadata || {};
  const act = (a.memoryActivity || "").toLowerCase();
  const sizes = a.memoryActivity === "ALLOCATION" || a.memoryActivity === "DEALLOCATION"
    ? `${fmtBytes(num(a.allocationBytes))} (requested ${fmtBytes(num(a.requestedBytes))})` : "";
  const lines = [`<b>${escapePlotly(act || "event")}</b> ${escapePlotly(a.tfOpName || "")}`];
  if (sizes) lines.push(sizes);
  const detail = [a.regionType, dtypeText(a.dataType), a.tensorShape].filter(Boolean).map(escapePlotly).join(" · ");
  if (detail) lines.push(detail);
  lines.push(`in use ${fmtBytes(m.stack[i] + m.heap[i])}${m.frag[i] === null ? "" : ` · fragmentation ${pct(100 * m.frag[i])}`}`);
  lines.push(`<span style="color:#6b7385">${fmtMs(m.t[i])}</span>`);
  return lines.join("<br>");
}

function xprofShapes(ctx) {
  const m = ctx.model, f = m.summary, u = ctx.unit;
  const shapes = bandShapes(m.steps).concat(moduleShapes(m.modules));
  if (m.peakIndex >= 0) shapes.push(vline(m.t[m.peakIndex], C.peak, "dot", "peak"));
  if (ctx.scale === "capacity" && f.capacity) shapes.push({ type: "line", name: "capacity", xref: "paper", x0: 0, x1: 1, y0: f.capacity / u.div, y1: f.capacity / u.div,
    line: { color: C.peak, width: 1.2, dash: "dash" } });
  return shapes.concat(markShapes(ctx));
}

function xprofAnnotations(ctx) {
  const m = ctx.model, f = m.summary, u = ctx.unit;
  const notes = bandLabels(m.steps);
  if (f.capacity) {
    notes.push(ctx.scale === "capacity"
      ? { xref: "paper", x: 1, xanchor: "right", y: f.capacity / u.div, yanchor: "bottom", showarrow: false, text: `capacity ${escapePlotly(fmtBytes(f.capacity))}`, font: { size: 11, color: C.peak } }
      : { xref: "paper", x: 1, xanchor: "right", yref: "paper", y: 1.01, yanchor: "bottom", showarrow: false,
          text: `capacity ${escapePlotly(fmtBytes(f.capacity))} is off the top (peak uses ${pct(100 * f.peak / f.capacity)})`, font: { size: 11, color: P.muted } });
  }
  return notes;
}

// The XProf breakdown rows: activeAllocations point at snapshots (real allocations) or
// at specialAllocations (XProf's synthetic "stack" and "unused preallocated" rows).
function xprofRows(ctx) {
  const a = ctx.model.raw;
  const snaps = a.memoryProfileSnapshots || [], special = a.specialAllocations || [];
  const rows = [];
  for (const r of a.activeAllocations || []) {
    const si = r.specialIndex === undefined ? -1 : num(r.specialIndex);
    const snap = si >= 0 ? null : snaps[num(r.snapshotIndex)];
    const meta = si >= 0 ? special[si] : snap && snap.activityMetadata;
    if (!meta) continue;
    const occ = Math.max(1, num(r.numOccurrences));
    rows.push({ synthetic: si >= 0, op: meta.tfOpName || "", allocation: num(meta.allocationBytes), requested: num(meta.requestedBytes), occurrences: occ,
      total: occ * num(meta.allocationBytes), region: meta.regionType || "", dtype: dtypeText(meta.dataType), shape: meta.tensorShape || "",
      step: num(meta.stepId), address: meta.address || "", timeMs: snap ? psToMs(snap.timeOffsetPs) : null });
  }
  return rows;
}

function xprofBreakdown(ctx) {
  const rows = xprofRows(ctx);
  const peak = ctx.model.summary.peak || 1;
  return dataTable({
    id: "mp-breakdown-table", rows, bindQ: true, sortKey: "total", noun: "rows",
    placeholder: "filter by op, region, dtype, shape…",
    text: (r) => [r.op, r.region, r.dtype, r.shape, r.synthetic ? "synthetic" : ""].join(" "),
    columns: [
      { key: "op", label: "op", value: (r) => r.op, show: (r) => el("span", {}, opNode(r.op || "(unnamed)"),
        r.synthetic ? el("span", { class: "mp-chip", title: "made up by XProf, not an allocation the program asked for" }, "synthetic") : null) },
      { key: "allocation", label: "allocation size", num: true, value: (r) => r.allocation, show: (r) => bytesNode(r.allocation) },
      { key: "requested", label: "requested size", num: true, value: (r) => r.requested, show: (r) => bytesNode(r.requested) },
      { key: "occurrences", label: "occurrences", num: true, value: (r) => r.occurrences, show: (r) => r.occurrences.toLocaleString() },
      { key: "total", label: "total (share of peak)", num: true, value: (r) => r.total, show: (r) => meterCell(r.total, peak) },
      { key: "region", label: "region", value: (r) => r.region },
      { key: "dtype", label: "dtype", value: (r) => r.dtype },
      { key: "shape", label: "shape", value: (r) => r.shape, show: (r) => el("code", {}, r.shape) },
    ],
    rowClass: (r) => (r.synthetic ? "synthetic" : ""),
    onHover: (r) => (r ? showAllocation(ctx, r) : showEvent(ctx)),
    onClick: (r) => { if (r.timeMs !== null) selectIndex(ctx, nearestIndex(ctx.model.t, r.timeMs)); },
  });
}

function xprofLeaks(ctx) {
  const lh = ctx.model.extras.leakHints;
  const f = ctx.model.summary;
  if (!lh) return [el("p", { class: "muted" }, "This payload has no leak hints (they are profscope's addition to XProf's output). The allocations vs deallocations above are the first signal.")];
  const hints = lh.hints || [];
  const hintOf = (kind) => hints.find((h) => h.kind === kind);
  const out = [];
  // 1. imbalance
  out.push(check("Allocations vs deallocations", hintOf("imbalance"),
    kv([["allocations", f.allocations.toLocaleString()], ["deallocations", f.deallocations.toLocaleString()],
      ["imbalance", signed(f.imbalance)]])));
  // 2. never freed
  const nf = lh.neverFreed || { count: 0, bytes: 0, largest: [] };
  const fb = lh.freedBeforeAllocated || { count: 0, bytes: 0 };
  const edge = nf.count && fb.count && nf.bytes === fb.bytes;
  out.push(check("Allocated in the window, never freed in it", hintOf("neverFreed"),
    kv([["allocations still live at the end", nf.count.toLocaleString()], ["their bytes", bytesNode(nf.bytes)],
      ["frees of memory allocated before the window", fb.count.toLocaleString()], ["their bytes", bytesNode(fb.bytes)]]),
    edge ? el("p", { class: "mp-verdict ok" }, "These balance exactly: that is what a window cut in the middle of a steady loop looks like (what the last step left live, the first step freed from before). A leak leaves more live at the end than was freed from before.") : null,
    nf.largest && nf.largest.length ? miniTable(nf.largest, [
      ["op", (r) => opNode(r.tfOpName || "")],
      ["allocation", (r) => bytesNode(r.allocationBytes), true], ["requested", (r) => bytesNode(r.requestedBytes), true],
      ["at", (r) => timeLink(ctx, psToMs(r.timeOffsetPs)), true], ["step", (r) => r.stepId, true],
      ["region", (r) => r.regionType], ["dtype", (r) => dtypeText(r.dataType)], ["shape", (r) => el("code", {}, r.tensorShape || "")],
    ], `largest ${nf.largest.length} of ${nf.count}`) : null));
  // 3. heap growth across steps
  const hg = lh.heapGrowth || { points: [] };
  const pts = hg.points || [];
  let verdict;
  if (pts.length < 2) verdict = el("p", { class: "mp-verdict" }, `Needs at least two steps; this window has ${pts.length}.`);
  else if (hg.steadyLeak) verdict = el("p", { class: "mp-verdict bad" }, `Steady growth: the heap ends each step ${fmtBytes(hg.slopeBytesPerStep)} larger (r² ${fmt2(hg.r2)}). This is what a leak looks like.`);
  else if (hg.slopeBytesPerStep > 0) verdict = el("p", { class: "mp-verdict" }, `Grows ${fmtBytes(hg.slopeBytesPerStep)} per step on average but not steadily (r² ${fmt2(hg.r2)}).`);
  else verdict = el("p", { class: "mp-verdict ok" }, hg.r2 === null && pts.every((p) => p.heapBytes === pts[0].heapBytes)
    ? `Flat: the heap ends every step at ${fmtBytes(pts[0].heapBytes)}.` : `No growth (${signedBytes(hg.slopeBytesPerStep || 0)} per step).`);
  const growthChart = el("div", { class: "mp-mini-chart", id: "mp-heap-growth" });
  out.push(check("Heap at the end of each step", hintOf("heapGrowth") || (pts.length ? { open: true } : null), verdict,
    pts.length ? kv([["steps", pts.length], ["slope", `${signedBytes(hg.slopeBytesPerStep || 0)} per step`], ["r²", fmt2(hg.r2)]]) : null,
    pts.length ? growthChart : null));
  if (pts.length) lazyChart(ctx, growthChart, {
    x: pts.map((p) => p.stepId), y: pts.map((p) => p.heapBytes), xTitle: "step", name: "heap after the step",
    fit: hg.slopeBytesPerStep !== null && hg.slopeBytesPerStep !== undefined ? (x) => hg.interceptBytes + hg.slopeBytesPerStep * x : null,
  });
  // 4. ops whose live bytes keep rising
  const ro = lh.risingOps || [];
  out.push(check("Ops whose live bytes keep rising", hintOf("risingOps"),
    ro.length ? miniTable(ro, [
      ["op", (r) => opNode(r.tfOpName || "")],
      ["live bytes at each step end", (r) => sparkline(r.liveBytes || [], (r.stepIds || []).map((s) => `step ${s}`))],
      ["first → last", (r) => `${fmtBytes((r.liveBytes || [])[0])} → ${fmtBytes((r.liveBytes || []).at(-1))}`, true],
      ["growth", (r) => signedBytes(r.growthBytes), true], ["steps", (r) => (r.stepIds || []).length, true],
    ]) : el("p", { class: "mp-verdict ok" }, "None: no op's live allocations grow from step to step.")));
  return [leakVerdict(hints, "No leak signal: every check below is clear."), ...sortChecks(out)];
}

// -- PyTorch payload -------------------------------------------------------------------

function torchModel(data, id) {
  const d = data.devices.find((x) => x.device === id) || data.devices[0];
  const tl = d.timeline || {};
  let idx = (tl.timeMs || []).map((_, i) => i);
  if (idx.length > MAX_POINTS) idx = maxFilter(idx, (i) => tl.allocatedBytes[i]);
  const m = { id, d, n: idx.length, strings: tl.strings || [],
    t: Float64Array.from(idx, (i) => tl.timeMs[i]), allocated: Float64Array.from(idx, (i) => num(tl.allocatedBytes[i])),
    reserved: Float64Array.from(idx, (i) => num((tl.reservedBytes || [])[i])), eventBytes: idx.map((i) => num((tl.eventBytes || [])[i])),
    op: idx.map((i) => (tl.op || [])[i] ?? -1), module: idx.map((i) => (tl.module || [])[i] ?? -1) };
  const s = d.summary || {};
  m.peakIndex = -1;
  for (let i = 0; i < m.n; i++) if (m.allocated[i] === s.peakAllocatedBytes && (m.peakIndex < 0 || m.t[i] === s.peakAllocatedTimeMs)) { m.peakIndex = i; if (m.t[i] === s.peakAllocatedTimeMs) break; }
  m.steps = (d.steps || []).map((st) => ({ name: `step ${st.step}`, step: st.step, x0: st.startMs, x1: st.endMs }));
  m.modules = [];
  return m;
}

function str(m, i) { return i >= 0 && i < m.strings.length ? m.strings[i] : ""; }

function renderTorch(ctx) {
  const m = torchModel(ctx.data, ctx.memoryId);
  ctx.model = m;
  const d = m.d, s = d.summary || {}, tl = d.timeline || {};
  const cat = ctx.data.categoryTimeline;
  layout(ctx, [
    el("section", {}, el("h2", {}, "Summary"), torchSummaryNode(ctx, s)),
    el("section", {},
      el("h2", {}, "Memory over time"),
      el("p", { class: "mp-hint" }, "Bytes allocated by tensors (PyTorch's ", el("code", {}, "Total Allocated"), ") and reserved by the caching allocator after each memory event; steps shaded. ",
        "Hover to see the event and the op that made it; click to select it. Drag to zoom, double-click to reset.",
        tl.downsampled ? ` ${m.n.toLocaleString()} points for ${num(tl.numEvents).toLocaleString()} events: each keeps the largest allocated value of its time bin, so the peak survives.` : ""),
      el("div", { id: "mp-timeline", class: "mp-chart" })),
    cat ? el("section", {},
      el("h2", {}, "Memory by category"),
      el("p", { class: "mp-hint" }, "From ", el("code", {}, "export_memory_timeline"), ": torch's own accounting of what each byte is for, stacked. It counts differently from the allocator, so its total need not equal the line above",
        cat.aligned ? "." : "; its clock could not be aligned with the trace, so the times are its own."),
      el("div", { id: "mp-categories", class: "mp-chart" }), categoryPeak(cat)) : null,
    el("section", {},
      el("h2", {}, "Breakdown at peak"),
      el("p", { class: "mp-hint" }, "The allocations live at the peak, by the op that made them and the nn.Module it ran in. Click an op or a module to filter the allocations."),
      el("div", { id: "mp-breakdown" })),
    (d.steps || []).length ? el("section", {}, el("h2", {}, "Steps"),
      el("p", { class: "mp-hint" }, "Live bytes at each step's start and end: an end that keeps rising is a leak. Click a step to zoom the timeline to it."),
      el("div", { id: "mp-steps" }, stepsTable(ctx, d.steps))) : null,
    el("section", {}, el("h2", {}, "Leak hints"), el("div", { id: "mp-leaks" }, torchLeaks(ctx, d.leakHints || []))),
  ]);
  plotTorchTimeline(ctx);
  if (cat) plotCategories(ctx, cat);
  const bd = d.breakdownAtPeak || {};
  ctx.table = torchAllocations(ctx, bd);
  ctx.root.querySelector("#mp-breakdown").append(torchBreakdownHead(ctx, bd, m), ctx.table.node);
}

function torchSummaryNode(ctx, s) {
  const m = ctx.model, p = m.d.peak || {};
  const cpu = /^CPU/.test(m.d.device);
  const imbalance = num(s.numAllocations) - num(s.numDeallocations);
  return el("div", { id: "mp-summary" },
    el("div", { class: "mp-peak" },
      el("span", { class: "label" }, "Peak allocated "),
      el("strong", { class: "mp-peak-value", title: exact(s.peakAllocatedBytes) }, fmtBytes(s.peakAllocatedBytes)),
      el("span", {}, " at ", timeLink(ctx, s.peakAllocatedTimeMs, m.peakIndex)),
      p.step !== undefined && p.step !== null ? el("span", { class: "muted" }, ` · step ${p.step}`) : null,
      p.op ? el("span", { class: "muted" }, " · ", el("code", {}, p.op)) : null,
      p.module && p.module !== "(no module)" ? el("span", { class: "muted" }, " in ", el("code", {}, p.module)) : null),
    balance(num(s.numAllocations), num(s.numDeallocations), imbalance, false,
      { liveAtEnd: s.neverFreedBytes, freedBefore: s.freedNotAllocatedBytes, events: num(s.numEvents), window: [s.firstEventMs, s.lastEventMs], peak: num(s.peakAllocatedBytes) }),
    el("div", { class: "mp-tiles cols-3" },
      tile("peakAllocated", "Peak allocated", bytesNode(s.peakAllocatedBytes), s.peakAllocatedBytes, `at ${fmtMs(s.peakAllocatedTimeMs)}`),
      tile("peakReserved", "Peak reserved", s.peakReservedBytes || !cpu ? bytesNode(s.peakReservedBytes) : "—", s.peakReservedBytes,
        s.peakReservedBytes || !cpu ? `at ${fmtMs(s.peakReservedTimeMs)}` : "the CPU allocator reserves nothing"),
      tile("liveAtStart", "Live at start", bytesNode(s.liveBytesAtStart), s.liveBytesAtStart, "allocated before the trace"),
      tile("liveAtEnd", "Live at end", bytesNode(s.liveBytesAtEnd), s.liveBytesAtEnd, `${signedBytes(num(s.liveBytesAtEnd) - num(s.liveBytesAtStart))} over the trace`),
      // null when the trace has no addresses (accounting "runningSum"): unknown, not 0.
      s.neverFreedBytes === null ? tile("neverFreed", "Never freed", "—", null, "unknown: no addresses in this trace")
        : tile("neverFreed", "Never freed", bytesNode(s.neverFreedBytes), s.neverFreedBytes, `${num(s.neverFreedCount).toLocaleString()} allocations made in the window`),
      tile("allocatedTotal", "Allocated in all", bytesNode(s.allocatedBytes), s.allocatedBytes, `freed ${fmtBytes(s.freedBytes)}`)));
}

function plotTorchTimeline(ctx) {
  const m = ctx.model, s = m.d.summary || {};
  const div = ctx.root.querySelector("#mp-timeline");
  const maxY = Math.max(...m.allocated, ...m.reserved, 1);
  const u = unitFor(maxY);
  ctx.unit = u;
  const x = Array.from(m.t);
  const alloc = Array.from(m.allocated, (v) => v / u.div);
  const hasReserved = m.reserved.some((v) => v > 0);
  const labels = x.map((_, i) => torchHoverText(m, i));
  const traces = [
    { type: "scatter", mode: "lines", name: "allocated", x, y: alloc, fill: "tozeroy", hoverinfo: "skip",
      line: { color: C.allocated, width: 1.2, shape: "hv" }, fillcolor: rgba(C.allocated, 0.22) },
  ];
  if (hasReserved) traces.push({ type: "scatter", mode: "lines", name: "reserved", x, y: Array.from(m.reserved, (v) => v / u.div), hoverinfo: "skip",
    line: { color: C.reserved, width: 1.4, shape: "hv" } });
  ctx.hoverCurve = traces.length;
  traces.push({ type: "scatter", mode: "markers", name: "event", x, y: alloc, text: labels, hovertemplate: "%{text}<extra></extra>", showlegend: false,
    marker: { size: 7, color: "rgba(0,0,0,0)" }, hoverlabel: HOVER_CARD });
  if (m.peakIndex >= 0) traces.push({ type: "scatter", mode: "markers+text", name: "peak", x: [m.t[m.peakIndex]], y: [alloc[m.peakIndex]],
    marker: { color: C.peak, size: 10, symbol: "diamond" }, text: [`peak ${fmtBytes(s.peakAllocatedBytes)}`], textposition: labelSide(x, m.peakIndex),
    textfont: { color: C.peak }, hoverinfo: "skip", cliponaxis: false, showlegend: false });
  newPlot(div, traces, {
    height: 340, margin: { l: 64, r: 24, t: 34, b: 48 }, hovermode: "x", hoverdistance: -1,
    xaxis: { title: { text: "time (ms)" }, ...SPIKE_AXIS },
    yaxis: { title: { text: u.label }, rangemode: "tozero", range: [0, maxY * 1.18 / u.div] },
    legend: LEGEND_TOP,
    shapes: torchShapes(ctx),
    annotations: bandLabels(m.steps).concat(hasReserved ? [] : [{ xref: "paper", x: 1, xanchor: "right", yref: "paper", y: 1, yanchor: "bottom", showarrow: false,
      text: "reserved: 0 throughout (no caching allocator)", font: { size: 11, color: P.muted } }]),
  });
  ctx.charts.push(div);
  wireTimeline(ctx, div);
}

function torchShapes(ctx) {
  const m = ctx.model;
  const shapes = bandShapes(m.steps);
  if (m.peakIndex >= 0) shapes.push(vline(m.t[m.peakIndex], C.peak, "dot", "peak"));
  return shapes.concat(markShapes(ctx));
}

function torchHoverText(m, i) {
  const b = m.eventBytes[i];
  const what = b > 0 ? `<b>alloc</b> ${fmtBytes(b)}` : b < 0 ? `<b>free</b> ${fmtBytes(-b)}` : "<b>event</b>";
  const lines = [`${what} ${escapePlotly(str(m, m.op[i]) || "(no op)")}`];
  const mod = str(m, m.module[i]);
  if (mod) lines.push(`in ${escapePlotly(mod)}`);
  lines.push(`allocated ${fmtBytes(m.allocated[i])}${m.reserved[i] ? ` · reserved ${fmtBytes(m.reserved[i])}` : ""}`);
  lines.push(`<span style="color:#6b7385">${fmtMs(m.t[i])}</span>`);
  return lines.join("<br>");
}

function plotCategories(ctx, cat) {
  const div = ctx.root.querySelector("#mp-categories");
  const x = cat.timeMs || [];
  const total = cat.totalBytes || [];
  const u = unitFor(Math.max(num(cat.peakBytes), ...total, 1));
  const sum = x.map(() => 0);
  const traces = (cat.series || []).filter((s) => (s.bytes || []).some((v) => v > 0)).map((s, k) => {
    const color = CATEGORY_COLORS[s.category] || OTHER_COLORS[k % OTHER_COLORS.length];
    const y = (s.bytes || []).map((v, i) => (sum[i] += num(v)) / u.div);
    return { type: "scatter", mode: "lines", name: categoryLabel(s.category), x, y, fill: k === 0 ? "tozeroy" : "tonexty",
      line: { color, width: 0.8, shape: "hv" }, fillcolor: rgba(color, 0.6),
      text: (s.bytes || []).map((v) => fmtBytes(num(v))), hovertemplate: "%{text}" };
  });
  if (cat.peakTimeMs !== undefined && cat.peakTimeMs !== null) traces.push({ type: "scatter", mode: "markers+text", name: "peak", x: [cat.peakTimeMs], y: [num(cat.peakBytes) / u.div],
    marker: { color: C.peak, size: 9, symbol: "diamond" }, text: [`peak ${fmtBytes(cat.peakBytes)}`], textposition: labelSide(x, x.indexOf(cat.peakTimeMs)), textfont: { color: C.peak },
    hoverinfo: "skip", cliponaxis: false, showlegend: false });
  newPlot(div, traces, {
    height: 320, margin: { l: 64, r: 24, t: 34, b: 48 }, hovermode: "x unified",
    xaxis: { title: { text: cat.aligned ? "time (ms)" : "time (ms, memory timeline's own clock)" }, zeroline: false },
    yaxis: { title: { text: u.label }, rangemode: "tozero", range: [0, Math.max(num(cat.peakBytes), ...total, 1) * 1.18 / u.div] },
    shapes: cat.aligned ? bandShapes(ctx.model.steps) : [],
    legend: { ...LEGEND_TOP, traceorder: "normal" },
  });
  ctx.charts.push(div);
  ctx.categoryDiv = div;
  ctx.categoryAligned = Boolean(cat.aligned);
  if (!cat.aligned) return;
  // Same clock as the timeline: zooming the timeline zooms this chart too.
  const timeline = ctx.root.querySelector("#mp-timeline");
  timeline.on("plotly_relayout", (ev) => {
    if (!div.layout || current !== ctx) return;
    if (ev["xaxis.autorange"]) window.Plotly.relayout(div, { "xaxis.autorange": true });
    else if (ev["xaxis.range[0]"] !== undefined) window.Plotly.relayout(div, { "xaxis.range": [ev["xaxis.range[0]"], ev["xaxis.range[1]"]] });
    else if (ev["xaxis.range"]) window.Plotly.relayout(div, { "xaxis.range": ev["xaxis.range"] });
  });
}

function categoryPeak(cat) {
  const parts = (cat.peakBreakdown || []).filter((p) => p.bytes > 0).sort((a, b) => b.bytes - a.bytes);
  if (!parts.length) return null;
  const total = parts.reduce((s, p) => s + p.bytes, 0) || 1;
  return el("div", { class: "mp-catpeak", id: "mp-category-peak" },
    el("span", { class: "muted" }, `At its peak (${fmtBytes(cat.peakBytes)} at ${fmtMs(cat.peakTimeMs)}): `),
    el("div", { class: "mp-stackbar" }, parts.map((p, k) => el("span", {
      style: `width:${(100 * p.bytes / total).toFixed(2)}%;background:${CATEGORY_COLORS[p.category] || OTHER_COLORS[k % OTHER_COLORS.length]}`,
      title: `${categoryLabel(p.category)}: ${fmtBytes(p.bytes)}` }))),
    el("div", { class: "mp-catlist" }, parts.map((p, k) => el("span", {},
      el("i", { class: "mp-swatch", style: `background:${CATEGORY_COLORS[p.category] || OTHER_COLORS[k % OTHER_COLORS.length]}` }),
      `${categoryLabel(p.category)} ${fmtBytes(p.bytes)} (${pct(100 * p.bytes / total)})`))));
}

function torchBreakdownHead(ctx, bd, m) {
  const total = num(bd.totalBytes) || 1;
  const side = (title, rows, field) => el("div", { class: "mp-side" }, el("h3", {}, title),
    rows.length ? el("table", { class: "mp-table compact", id: `mp-by-${field}` },
      el("thead", {}, el("tr", {}, el("th", {}, field), el("th", { class: "num" }, "count"), el("th", { class: "num" }, "bytes (share of peak)"))),
      el("tbody", {}, rows.slice(0, 12).map((r) => el("tr", { class: "mp-click", title: `filter the allocations by ${r[field]}`,
        onclick: () => ctx.table.setFilter(r[field], true) },
      el("td", {}, opNode(r[field])), el("td", { class: "num" }, num(r.count).toLocaleString()), el("td", { class: "num" }, meterCell(r.bytes, total))))))
      : el("p", { class: "muted" }, "nothing attributed"),
    rows.length > 12 ? el("p", { class: "muted small" }, `${rows.length - 12} more in the table below`) : null);
  const notes = (m.d.notes || []).map((t) => el("p", { class: "mp-note" }, t));
  if (bd.byAllocation === false) return el("div", {}, ...notes,
    el("p", {}, `At the peak, ${fmtBytes(bd.totalBytes)} were live: ${fmtBytes(bd.attributedBytes)} allocated during the trace`,
      num(bd.unattributedBytes) ? `, ${fmtBytes(bd.unattributedBytes)} before it started.` : "."));
  return el("div", {}, ...notes,
    el("p", {}, `At the peak, ${fmtBytes(bd.totalBytes)} were live: ${fmtBytes(bd.attributedBytes)} allocated during the trace (below)`,
      num(bd.unattributedBytes) ? `, ${fmtBytes(bd.unattributedBytes)} allocated before it started (no op to blame).` : "."),
    el("div", { class: "mp-sides" }, side("by op", bd.byOp || [], "op"), side("by module scope", bd.byModule || [], "module")),
    bd.truncatedRows ? el("p", { class: "mp-note" }, `${num(bd.truncatedRows).toLocaleString()} smaller rows were left out by the server.`) : null);
}

function torchAllocations(ctx, bd) {
  const total = num(bd.totalBytes) || 1;
  const rows = (bd.allocations || []).map((r) => ({ ...r, count: num(r.count), bytes: num(r.bytes), sizeBytes: num(r.sizeBytes) }));
  return dataTable({
    id: "mp-breakdown-table", rows, bindQ: true, sortKey: "bytes", noun: "allocation groups",
    placeholder: "filter by op, module, source line…",
    text: (r) => [r.op, r.module, r.frame].join(" "),
    columns: [
      { key: "op", label: "op", value: (r) => r.op || "", show: (r) => opNode(r.op || "") },
      { key: "module", label: "module scope", value: (r) => r.module || "", show: (r) => opNode(r.module || "") },
      { key: "frame", label: "Python line", value: (r) => r.frame || "", show: (r) => el("code", { class: "mp-frame" }, r.frame || "") },
      { key: "sizeBytes", label: "size", num: true, value: (r) => r.sizeBytes, show: (r) => bytesNode(r.sizeBytes) },
      { key: "count", label: "count", num: true, value: (r) => r.count, show: (r) => r.count.toLocaleString() },
      { key: "bytes", label: "bytes (share of peak)", num: true, value: (r) => r.bytes, show: (r) => meterCell(r.bytes, total) },
    ],
  });
}

function stepsTable(ctx, steps) {
  return el("table", { class: "mp-table", id: "mp-steps-table" },
    el("thead", {}, el("tr", {}, ...["step", "start", "duration", "live at start", "live at end", "change", "peak", "allocations", "frees", "never freed"]
      .map((h, i) => el("th", { class: i === 0 ? "" : "num" }, h)))),
    el("tbody", {}, steps.map((s) => {
      const delta = num(s.liveBytesAtEnd) - num(s.liveBytesAtStart);
      return el("tr", { class: "mp-click", title: "zoom the timeline to this step", onclick: () => zoomTo(ctx, s.startMs, s.endMs) },
        el("td", {}, `step ${s.step}`), el("td", { class: "num" }, fmtMs(s.startMs)), el("td", { class: "num" }, fmtMs(s.endMs - s.startMs)),
        el("td", { class: "num" }, bytesNode(s.liveBytesAtStart)), el("td", { class: "num" }, bytesNode(s.liveBytesAtEnd)),
        el("td", { class: `num ${delta > 0 ? "up" : delta < 0 ? "down" : ""}` }, signedBytes(delta)),
        el("td", { class: "num" }, bytesNode(s.peakBytes)), el("td", { class: "num" }, num(s.numAllocations).toLocaleString()),
        el("td", { class: "num" }, num(s.numDeallocations).toLocaleString()), el("td", { class: "num" }, bytesNode(s.neverFreedBytes)));
    })));
}

function zoomTo(ctx, x0, x1) {
  const pad = (x1 - x0) * 0.04;
  const div = ctx.root.querySelector("#mp-timeline");
  if (div && div.layout) window.Plotly.relayout(div, { "xaxis.range": [x0 - pad, x1 + pad] });
  ctx.root.querySelector("#mp-timeline").scrollIntoView({ block: "center", behavior: "smooth" });
}

function torchLeaks(ctx, hints) {
  const out = [];
  hints.forEach((h, k) => {
    const ev = h.evidence || {};
    const title = { stepGrowth: "Live memory grows step after step", risingOp: `Op whose live bytes keep rising${ev.op ? `: ${ev.op}` : ""}`,
      neverFreed: "Allocated during the trace, never freed" }[h.kind] || humanize(h.kind || "hint");
    out.push(check(title, h, evidenceNode(ctx, ev, `mp-evidence-${k}`)));
  });
  return [leakVerdict(hints, "No leak signal: live memory does not grow from step to step and no op keeps more alive over time."), ...sortChecks(out)];
}

// Evidence of a torch leak hint, whatever its fields: series as small charts, lists of
// records as tables, numbers as key/value pairs.
function evidenceNode(ctx, ev, id) {
  const pairs = [], tables = [], charts = [];
  const series = ev.liveBytesAtStepEnd || ev.liveBytes;
  if (Array.isArray(series) && series.length) {
    const div = el("div", { class: "mp-mini-chart", id: `${id}-chart` });
    charts.push(div);
    const labels = ev.checkpoints || series.map((_, i) => String(i + 1));
    lazyChart(ctx, div, { x: labels, y: series, xTitle: ev.stepSource ? `live bytes at the end of each ${ev.stepSource}` : "live bytes at each checkpoint", name: "live bytes", bars: ev.growthBytes });
  }
  if (Array.isArray(ev.byStep) && ev.byStep.length) {
    const div = el("div", { class: "mp-mini-chart", id: `${id}-bystep` });
    charts.push(div);
    lazyChart(ctx, div, { x: ev.byStep.map((r) => `step ${r.step}`), y: ev.byStep.map((r) => r.bytes), xTitle: "step it was allocated in", name: "never freed", barsOnly: true });
  }
  for (const [key, value] of Object.entries(ev)) {
    if (["checkpoints", "liveBytesAtStepEnd", "liveBytes", "growthBytes", "byStep"].includes(key)) continue;
    if (Array.isArray(value) && value.length && typeof value[0] === "object") {
      tables.push(el("div", {}, el("h4", {}, humanize(key)), recordTable(value)));
    } else if (/^truncated/.test(key) && !value) {
      continue; // nothing was left out
    } else if (!Array.isArray(value) && value !== null && typeof value !== "object") {
      pairs.push([humanize(key), /bytes/i.test(key) && typeof value === "number" ? bytesNode(value) : typeof value === "number" ? value.toLocaleString() : String(value)]);
    } else if (Array.isArray(value) && value.length) {
      pairs.push([humanize(key), value.map(String).join(", ")]);
    }
  }
  return el("div", { class: "mp-evidence" }, pairs.length ? kv(pairs) : null, charts, tables);
}

function recordTable(rows) {
  const keys = [...new Set(rows.flatMap((r) => Object.keys(r)))];
  return miniTable(rows, keys.map((k) => [humanize(k), (r) => {
    const v = r[k];
    if (typeof v === "number") return /bytes/i.test(k) ? bytesNode(v) : v.toLocaleString();
    return v === undefined || v === null ? "" : el("code", { class: "mp-op" }, String(v));
  }, rows.some((r) => typeof r[k] === "number")]));
}

// -- shared timeline behaviour: hover card, selection (t), marks -----------------------

function wireTimeline(ctx, div) {
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

function selectIndex(ctx, i) {
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

function redrawMarks(ctx) {
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

function markShapes(ctx) {
  const out = [];
  if (ctx.selected >= 0) out.push(vline(ctx.model.t[ctx.selected], C.selected, "solid", "selected"));
  if (ctx.rowMark !== null && ctx.rowMark !== undefined) out.push(vline(ctx.rowMark, C.row, "dash", "row"));
  return out;
}

// The card: the hovered event, else the selected one, else the peak.
function showEvent(ctx, i = -1, mode = "") {
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

function xprofEventRows(m, i) {
  const s = m.snaps[i], a = s.activityMetadata || {};
  const act = a.memoryActivity || "";
  return {
    title: a.tfOpName || "(no op)",
    items: [
      ["time", fmtMs(m.t[i])],
      ["activity", el("span", { class: `mp-act ${act.toLowerCase()}` }, act.toLowerCase())],
      ["allocation", act === "ALLOCATION" || act === "DEALLOCATION" ? bytesNode(num(a.allocationBytes)) : ""],
      ["requested", act === "ALLOCATION" || act === "DEALLOCATION" ? bytesNode(num(a.requestedBytes)) : ""],
      ["region", a.regionType], ["dtype", dtypeText(a.dataType)], ["shape", a.tensorShape ? el("code", {}, a.tensorShape) : ""],
      ["step", a.stepId !== undefined ? String(num(a.stepId)) : ""], ["address", a.address && a.address !== "0" ? el("code", {}, hexAddress(a.address)) : ""],
      ["", "allocator state after the event"],
      ["stack", bytesNode(m.stack[i])], ["heap", bytesNode(m.heap[i])], ["free", bytesNode(m.free[i])],
      ["in use", bytesNode(m.stack[i] + m.heap[i])], ["fragmentation", m.frag[i] === null ? "" : pct(100 * m.frag[i])],
      ["allocator peak", el("span", { title: "peak_bytes_in_use: the allocator's peak so far" }, fmtBytes(m.peakInUse[i]))],
    ],
  };
}

function torchEventRows(m, i) {
  const b = m.eventBytes[i];
  const step = m.steps.find((s) => m.t[i] >= s.x0 && m.t[i] <= s.x1);
  return {
    title: str(m, m.op[i]) || "(no op)",
    items: [
      ["time", fmtMs(m.t[i])],
      ["event", b > 0 ? el("span", { class: "mp-act allocation" }, `allocation of ${fmtBytes(b)}`) : b < 0 ? el("span", { class: "mp-act deallocation" }, `free of ${fmtBytes(-b)}`) : "—"],
      ["module", str(m, m.module[i]) ? el("code", {}, str(m, m.module[i])) : ""],
      ["step", step ? String(step.step) : ""],
      ["allocated", bytesNode(m.allocated[i])], ["reserved", m.reserved[i] ? bytesNode(m.reserved[i]) : ""],
    ],
  };
}

// A breakdown row hovered: its allocation's time on the timeline, its details on the card.
function showAllocation(ctx, r) {
  ctx.rowMark = r.timeMs;
  redrawMarks(ctx);
  ctx.card.classList.remove("selected");
  ctx.card.dataset.index = "";
  ctx.card.dataset.mode = "row";
  fill(ctx.card,
    el("div", { class: "mp-card-head" }, el("span", { class: "mp-card-kind" }, r.synthetic ? "synthetic row" : "allocation live at peak")),
    el("div", { class: "mp-card-name" }, r.op || "(unnamed)"),
    el("dl", {}, [["allocation", bytesNode(r.allocation)], ["requested", bytesNode(r.requested)],
      ["occurrences", r.occurrences.toLocaleString()], ["in all", bytesNode(r.total)],
      ["allocated at", r.timeMs !== null ? fmtMs(r.timeMs) : ""], ["step", r.synthetic ? "" : String(r.step)],
      ["region", r.region], ["dtype", r.dtype], ["shape", r.shape ? el("code", {}, r.shape) : ""],
      ["address", r.address && r.address !== "0" ? el("code", {}, hexAddress(r.address)) : ""]]
      .flatMap(([k, v]) => (v === "" || v === null ? [] : [el("dt", {}, k), el("dd", {}, v)]))),
    r.synthetic ? el("p", { class: "mp-card-tip muted" }, r.op === "stack" ? "The stack reserved at the peak." : "Heap at the peak not explained by the allocations of the peak's step: memory allocated earlier (before the window or in earlier steps) and still held.") : null,
    r.timeMs !== null ? el("p", { class: "mp-card-tip muted" }, "Dashed line on the timeline: when it was allocated. Click the row to select that event.") : null);
}

// -- summary pieces ----------------------------------------------------------------------

function balance(allocs, deallocs, imbalance, sampledOnly, extra) {
  const top = Math.max(allocs, deallocs, 1);
  let text, cls;
  if (imbalance > 0) {
    cls = "warn";
    text = `${imbalance.toLocaleString()} more allocation${imbalance === 1 ? "" : "s"} than deallocations: blocks allocated in this window${extra && extra.liveAtEnd ? ` (${fmtBytes(extra.liveAtEnd)}${extra.peak ? `, ${pct(100 * extra.liveAtEnd / extra.peak)} of the peak` : ""})` : ""} were still live when it ended. This imbalance is the first sign of a leak. Allocations kept across one step are normal; the same imbalance in every step is not: see the leak hints.`;
  } else if (imbalance < 0) {
    cls = "ok";
    text = `${(-imbalance).toLocaleString()} more deallocation${imbalance === -1 ? "" : "s"} than allocations: the window freed memory allocated before it started. No sign of a leak from the counts.`;
  } else {
    cls = "ok";
    text = "Balanced: as many deallocations as allocations, the first check for a leak passes.";
    if (extra && extra.liveAtEnd) text += ` (${fmtBytes(extra.liveAtEnd)} allocated here is still live at the end, and ${fmtBytes(extra.freedBefore || 0)} allocated before the window was freed in it.)`;
  }
  const bar = (label, n, color) => el("div", { class: "mp-balance-row" }, el("span", { class: "label" }, label),
    el("span", { class: "mp-balance-bar" }, el("span", { style: `width:${(100 * n / top).toFixed(1)}%;background:${color}` })),
    el("strong", { class: "n" }, n.toLocaleString()));
  return el("div", { class: `mp-balance ${cls}`, id: "mp-balance", "data-allocations": allocs, "data-deallocations": deallocs },
    el("div", { class: "mp-balance-bars" }, bar("allocations", allocs, C.allocations), bar("deallocations", deallocs, C.deallocations)),
    el("div", { class: "mp-balance-text" },
      el("div", { class: "mp-imbalance" }, "imbalance ", el("strong", {}, signed(imbalance)),
        extra && extra.events !== undefined ? el("span", { class: "mp-events", "data-events": extra.events }, ` · ${extra.events.toLocaleString()} events`,
          extra.window ? ` from ${fmtMs(extra.window[0])} to ${fmtMs(extra.window[1])}` : "") : null),
      el("p", {}, text),
      sampledOnly ? el("p", { class: "muted small" }, "Counted in the sampled timeline (the payload carries no totals): may undercount a downsampled window.") : null));
}

function tile(key, label, value, raw, note) {
  return el("div", { class: "mp-tile", "data-key": key },
    el("div", { class: "label" }, label),
    el("div", { class: "value", "data-value": raw === undefined || raw === null ? "" : String(raw) }, value),
    note ? el("div", { class: "note" }, note) : null);
}

function timeLink(ctx, ms, index) {
  if (ms === undefined || ms === null) return "—";
  const i = index !== undefined && index >= 0 ? index : ctx.model && ctx.model.n ? nearestIndex(ctx.model.t, ms) : -1;
  if (i < 0) return fmtMs(ms);
  const state = { ...readState(), t: timeParam(ctx.model.t[i]) };
  return el("a", { href: stateUrl(state), class: "mp-time", onclick: (e) => { e.preventDefault(); selectIndex(ctx, i); } }, fmtMs(ms));
}

// -- leak hint pieces ----------------------------------------------------------------------

// One line over the checks: how many fired, or that none did.
function leakVerdict(hints, none) {
  if (!hints.length) return el("p", { class: "mp-verdict ok", id: "mp-leak-verdict" }, none);
  const n = (sev) => hints.filter((h) => (h.severity || "info") === sev).length;
  const w = n("warning"), i = n("info");
  const text = w ? `${w} warning${w === 1 ? "" : "s"}${i ? ` and ${i} note${i === 1 ? "" : "s"}` : ""}: the evidence for each is below.`
    : `No warning; ${i} note${i === 1 ? "" : "s"} worth a look below.`;
  return el("p", { class: `mp-verdict ${w ? "bad" : ""}`, id: "mp-leak-verdict" }, text);
}

const SEVERITY_ORDER = { warning: 0, info: 1, clear: 2 };

function sortChecks(checks) {
  return checks.map((c, i) => [c, i]).sort(([a, i], [b, j]) =>
    (SEVERITY_ORDER[a.dataset.status] ?? 1) - (SEVERITY_ORDER[b.dataset.status] ?? 1) || i - j).map(([c]) => c);
}

// One leak check: open when it fired (or when `hint` is just { open: true }).
function check(title, hint, ...body) {
  const fired = hint && hint.kind !== undefined || (hint && hint.severity);
  const status = fired ? hint.severity || "info" : "clear";
  return el("details", { class: `mp-check ${status}`, open: hint ? true : undefined, "data-status": status, "data-kind": fired ? hint.kind || "" : "" },
    el("summary", {}, el("span", { class: `mp-sev ${status}` }, status), el("span", { class: "mp-check-title" }, title),
      fired && hint.message ? el("div", { class: "mp-check-msg" }, hint.message) : null),
    el("div", { class: "mp-check-body" }, body));
}

function kv(pairs) {
  return el("dl", { class: "mp-kv" }, pairs.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}

function miniTable(rows, columns, caption) {
  const shown = rows.slice(0, 50);
  return el("div", { class: "mp-mini-table" },
    caption ? el("div", { class: "muted small" }, caption) : null,
    el("table", { class: "mp-table compact" },
      el("thead", {}, el("tr", {}, columns.map(([label, , isNum]) => el("th", { class: isNum ? "num" : "" }, label)))),
      el("tbody", {}, shown.map((r) => el("tr", {}, columns.map(([, show, isNum]) => el("td", { class: isNum ? "num" : "" }, show(r) ?? "")))))),
    rows.length > shown.length ? el("div", { class: "muted small" }, `${rows.length - shown.length} more not shown`) : null);
}

// Draw a small chart once it has a width: now, or when its closed <details> opens.
function lazyChart(ctx, div, spec) {
  const draw = () => {
    if (div.dataset.drawn || !div.isConnected || !div.offsetWidth || current !== ctx) return;
    div.dataset.drawn = "1";
    miniChart(ctx, div, spec);
  };
  requestAnimationFrame(() => {
    draw();
    const details = div.closest("details");
    if (details) details.addEventListener("toggle", draw);
  });
}

// A small chart of one series (with an optional fit line, or bars of per-step change).
function miniChart(ctx, div, { x, y, xTitle, name, fit, bars, barsOnly }) {
  if (!div.isConnected || current !== ctx) return;
  const u = unitFor(Math.max(...y.map(num), ...(bars || []).map((v) => Math.abs(num(v))), 1));
  const traces = [barsOnly
    ? { type: "bar", name, x, y: y.map((v) => num(v) / u.div), marker: { color: C.heap }, text: y.map((v) => fmtBytes(num(v))), hovertemplate: "%{x}: %{text}<extra></extra>", textposition: "none" }
    : { type: "scatter", mode: "lines+markers", name, x, y: y.map((v) => num(v) / u.div), line: { color: C.allocated, width: 2 }, marker: { size: 6 },
        text: y.map((v) => fmtBytes(num(v))), hovertemplate: "%{x}: %{text}<extra></extra>" }];
  if (fit) traces.push({ type: "scatter", mode: "lines", name: "least-squares fit", x, y: x.map((v) => fit(Number(v)) / u.div), line: { color: P.muted, dash: "dash", width: 1 }, hoverinfo: "skip" });
  if (bars) traces.push({ type: "bar", name: "change from the previous", x: x.slice(x.length - bars.length), y: bars.map((v) => num(v) / u.div), yaxis: "y",
    marker: { color: rgba(C.heap, 0.55) }, text: bars.map((v) => signedBytes(num(v))), hovertemplate: "%{x}: %{text}<extra>change</extra>", textposition: "none" });
  newPlot(div, traces, {
    height: 190, margin: { l: 56, r: 12, t: 8, b: 40 }, hovermode: "closest", barmode: "overlay",
    xaxis: { title: { text: xTitle, font: { size: 11 } }, type: typeof x[0] === "number" ? "linear" : "category", dtick: typeof x[0] === "number" ? 1 : undefined, tickfont: { size: 10 } },
    yaxis: { title: { text: u.label, font: { size: 11 } }, rangemode: "tozero", tickfont: { size: 10 } },
    showlegend: traces.length > 1, legend: { orientation: "h", x: 1, xanchor: "right", y: 1, yanchor: "bottom", font: { size: 10 } },
  }, { displayModeBar: false });
  ctx.charts.push(div);
}

// A series as a tiny canvas line: cheap enough for one per table row.
function sparkline(values, labels) {
  const w = 120, h = 26, ratio = window.devicePixelRatio || 1;
  const canvas = el("canvas", { class: "mp-spark", width: Math.round(w * ratio), height: Math.round(h * ratio), role: "img",
    "aria-label": values.map((v, i) => `${labels[i] || i}: ${fmtBytes(v)}`).join(", "),
    title: values.map((v, i) => `${labels[i] || i}: ${fmtBytes(v)}`).join("\n") });
  canvas.style.width = `${w}px`;
  canvas.style.height = `${h}px`;
  const g = canvas.getContext("2d");
  if (!g || !values.length) return canvas;
  g.scale(ratio, ratio);
  const lo = Math.min(0, ...values), hi = Math.max(...values, 1);
  const px = (i) => 3 + (w - 6) * (values.length === 1 ? 0.5 : i / (values.length - 1));
  const py = (v) => h - 3 - (h - 6) * (v - lo) / (hi - lo || 1);
  g.strokeStyle = C.peak;
  g.lineWidth = 1.5;
  g.beginPath();
  values.forEach((v, i) => (i ? g.lineTo(px(i), py(v)) : g.moveTo(px(i), py(v))));
  g.stroke();
  g.fillStyle = C.peak;
  values.forEach((v, i) => { g.beginPath(); g.arc(px(i), py(v), 1.8, 0, 2 * Math.PI); g.fill(); });
  return canvas;
}

// -- the breakdown table (lib/table.js), its filter bound to `q` ------------------------------

function dataTable({ id, rows, columns, text, bindQ, sortKey, noun, placeholder, rowClass, onHover, onClick }) {
  return sortableTable({
    id, prefix: "mp", rows, text, sortKey, pageRows: PAGE_ROWS, rowClass, onHover, onClick,
    columns: columns.map((c) => (c.num ? { ...c, dataValue: true } : c)),
    // Every keystroke is not a view to go back to: replace, don't push.
    filter: { id: "mp-filter", placeholder, label: "filter the breakdown", delay: 120, onChange: bindQ ? (q) => setUrl({ ...readState(), q }) : null },
    count: { id: "mp-count", text: (matched, total) => `${matched.toLocaleString()} of ${total.toLocaleString()} ${noun}` },
  });
}

// -- small helpers -----------------------------------------------------------------------

function fraction(v) {
  if (v === undefined || v === null) return 0;
  const n = Number(v);
  return Number.isFinite(n) ? n : null; // "NaN" from protobuf's JSON printer
}

function psToMs(ps) { return num(ps) / 1e9; }

// The time as written into `t`: ms, to the nanosecond, without float noise.
function timeParam(ms) { return String(Number(ms.toFixed(6))); }

function nearestIndex(ts, ms) {
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

// Max filter to at most MAX_POINTS items: the largest of each window survives.
function maxFilter(items, value) {
  const per = Math.ceil(items.length / MAX_POINTS), out = [];
  for (let i = 0; i < items.length; i += per) {
    let best = i;
    for (let j = i + 1; j < Math.min(i + per, items.length); j++) if (value(items[j]) > value(items[best])) best = j;
    out.push(items[best]);
  }
  return out;
}


function bytesNode(bytes) {
  if (bytes === undefined || bytes === null) return "—";
  return el("span", { title: exact(bytes) }, fmtBytes(num(bytes)));
}

function meterCell(bytes, of) {
  const share = of ? Math.min(1, num(bytes) / of) : 0;
  return el("span", { class: "mp-metercell", title: `${exact(bytes)} · ${pct(100 * share)} of ${fmtBytes(of)}` },
    el("span", { class: "mp-meter" }, el("span", { style: `width:${(100 * share).toFixed(1)}%` })), fmtBytes(num(bytes)));
}

// An op or scope name that may wrap after each '/' (not in the middle of a word).
function opNode(name, cls = "mp-op") {
  const parts = String(name).split("/");
  return el("code", { class: cls }, parts.flatMap((p, i) => (i ? [el("wbr"), `/${p}`] : [p])));
}

function dtypeText(dt) { return !dt || dt === "INVALID" ? "" : String(dt); }

function humanize(key) {
  const known = { sizeBytes: "size", bytes: "bytes", stepSource: "steps from", bytesPerStep: "growth per step", bytesPerInterval: "growth per interval",
    stepsGrowing: "steps that grew", stepsCompared: "steps compared", neverFreedAfterFirstStep: "never freed, allocated after the first step",
    neverFreedByFrame: "never freed, by Python line", neverFreedByModule: "never freed, by module scope" };
  if (known[key]) return known[key];
  return String(key).replace(/([a-z0-9])([A-Z])/g, "$1 $2").replace(/_/g, " ").toLowerCase();
}

function categoryLabel(c) { return String(c || "").toLowerCase().replace(/_/g, " "); }

// A label near the right edge goes to the left of its point, where there is room.
function labelSide(xs, i) {
  if (i < 0 || xs.length < 2) return "top right";
  return (xs[i] - xs[0]) / (xs[xs.length - 1] - xs[0] || 1) > 0.7 ? "top left" : "top right";
}

function vline(x, color, dash, name) {
  return { type: "line", name, x0: x, x1: x, yref: "paper", y0: 0, y1: 1, line: { color, width: name === "selected" ? 1.6 : 1.2, dash } };
}

// Alternating step bands across the plot; labels only while they stay readable.
function bandShapes(bands) {
  return bands.map((b, i) => ({ type: "rect", name: "step", layer: "below", x0: b.x0, x1: b.x1, yref: "paper", y0: 0, y1: 1,
    fillcolor: i % 2 ? "rgba(47,111,223,0.03)" : "rgba(47,111,223,0.075)", line: { width: 0 } }));
}

function moduleShapes(mods) {
  return mods.map((b, i) => ({ type: "rect", name: "module", layer: "below", x0: b.x0, x1: b.x1, yref: "paper", y0: 0, y1: 0.03,
    fillcolor: i % 2 ? P.purple : P.teal, line: { width: 0 } }));
}

function bandLabels(bands) {
  if (!bands.length || bands.length > 40) return [];
  return bands.map((b) => ({ x: (b.x0 + b.x1) / 2, yref: "paper", y: 1, yanchor: "top", showarrow: false, text: escapePlotly(b.name),
    font: { size: 10, color: P.band } }));
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
