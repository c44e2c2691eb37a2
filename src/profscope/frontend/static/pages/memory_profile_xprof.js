// Memory profile page, XProf's payload (profiles' allocator events): the model built from
// memoryProfilePerAllocator, the summary, the stacked timeline with fragmentation, the
// breakdown at peak and the leak hints. Drawn into the page of memory_profile.js.
import { el, fill } from "../lib/dom.js";
import { exact, fmt3 as fmt2, fmtBytes, fmtMs, fmtHex as hexAddress, num, pct, signed, signedBytes, byteUnit as unitFor } from "../lib/format.js";
import { MEMORY as C, P, rgba } from "../lib/colors.js";
import { HOVER_CARD, LEGEND_TOP, SPIKE_AXIS, bytesAxis, escapePlotly, newPlot } from "../lib/plotly.js";
import { bandLabels, bandShapes, layout, markShapes, moduleShapes, nearestIndex, redrawMarks, selectIndex, showEvent, vline, wireTimeline } from "./memory_profile_timeline.js";
import { MAX_POINTS, balance, bytesNode, check, dataTable, dtypeText, fraction, kv, labelSide, lazyChart, leakVerdict, maxFilter, meterCell, miniTable, opNode, psToMs, sortChecks, sparkline, tile, timeLink } from "./memory_profile_parts.js";

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
    xprofLifetimePeak: num(ps.peakBytesUsageLifetime),
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

export function renderXprof(ctx) {
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
      el("span", { class: "label" }, "Peak allocated in window "),
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
      tile("lifetimePeak", "Lifetime peak allocated", bytesNode(f.lifetimePeak), f.lifetimePeak, lifetimeNote(f, higherBefore)),
      tile("peak", "Peak allocated in window", bytesNode(f.peak), f.peak,
        f.stack ? `largest stack + heap in use at once: ${fmtBytes(f.stack)} stack + ${fmtBytes(f.heap)} heap` : "largest stack + heap in use at once (no stack here)"),
      tile("peakTime", "Time of peak", fmtMs(f.peakMs), f.peakMs, f.peakStep !== undefined ? `in step ${f.peakStep}` : ""),
      tile("stack", "Stack at peak", bytesNode(f.stack), f.stack, "reserved stack"),
      tile("heap", "Heap at peak", bytesNode(f.heap), f.heap, "allocated heap"),
      tile("free", "Free at peak", bytesNode(f.free), f.free, "still available"),
      tile("fragmentation", "Fragmentation at peak", f.frag === null ? "—" : pct(100 * f.frag), f.frag, "free memory in pieces too small for the largest request")));
}

// What the two peaks measure, side by side: the lifetime peak is the allocator's own
// peak_bytes_in_use counter (heap only: BFC's bytes in use, without the bytes reserved as
// stack), the window's is stack + heap summed per event (XProf's peakStats), so the
// lifetime one can be the smaller (TPU inference: 15.0 GiB of heap ever, 20.0 GiB of stack
// + 837 KiB of heap in the window).
function lifetimeNote(f, higherBefore) {
  const xprof = f.xprofLifetimePeak && f.xprofLifetimePeak !== f.lifetimePeak
    ? ` (XProf prints ${fmtBytes(f.xprofLifetimePeak)}: the counter on the allocator's last event)` : "";
  if (f.lifetimePeak < f.peak && f.stack) {
    return `heap only (the allocator's peak_bytes_in_use since it was created): the window's peak also counts ${fmtBytes(f.stack)} of stack${xprof}`;
  }
  return (higherBefore ? "heap only; higher than in the window: the allocator peaked before it" : "heap only: the allocator's peak_bytes_in_use since it was created") + xprof;
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
  const axis = bytesAxis(top || 1, u.div);
  return { "yaxis.range": [0, (top || 1) / u.div], "yaxis.autorange": false, "yaxis.tickmode": "array",
    "yaxis.tickvals": axis.tickvals, "yaxis.ticktext": axis.ticktext, shapes: xprofShapes(ctx), annotations: xprofAnnotations(ctx) };
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
    marker: { color: C.peak, size: 10, symbol: "diamond" }, text: [`peak allocated ${fmtBytes(f.peak)}`], textposition: labelSide(x, m.peakIndex),
    textfont: { color: C.peak }, hoverinfo: "skip", cliponaxis: false, showlegend: false });
  newPlot(div, traces, {
    height: 380, margin: { l: 84, r: 64, t: 34, b: 48 }, hovermode: "x", hoverdistance: -1,
    xaxis: { title: { text: "time (ms)" }, ...SPIKE_AXIS },
    yaxis: { rangemode: "tozero", fixedrange: false, automargin: false },
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

export function xprofShapes(ctx) {
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

export function xprofEventRows(m, i) {
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
      ["peak allocated so far", el("span", { title: "the allocator's peak bytes in use up to this event" }, fmtBytes(m.peakInUse[i]))],
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
