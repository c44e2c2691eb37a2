// Memory profile page, a PyTorch profiler trace's payload (/api/memory_profile): the
// allocated/reserved timeline, memory by category, the breakdown at peak by op and module,
// steps and leak hints. Drawn into the page of memory_profile.js.
import { el, fill } from "../lib/dom.js";
import { exact, fmtBytes, fmtMs, num, pct, signedBytes, byteUnit as unitFor } from "../lib/format.js";
import { MEMORY as C, TORCH_CATEGORY as CATEGORY_COLORS, TORCH_OTHER as OTHER_COLORS, P, rgba } from "../lib/colors.js";
import { HOVER_CARD, LEGEND_TOP, SPIKE_AXIS, bytesAxis, escapePlotly, newPlot } from "../lib/plotly.js";
import { bandLabels, bandShapes, layout, markShapes, vline, wireTimeline } from "./memory_profile_timeline.js";
import { MAX_POINTS, SHARED_MARGIN, balance, bytesNode, categoryLabel, check, dataTable, humanize, kv, labelSide, lazyChart, leakVerdict, linkTimeAxes, maxFilter, meterCell, miniTable, opNode, sortChecks, tile, timeLink } from "./memory_profile_parts.js";

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

export function renderTorch(ctx) {
  const m = torchModel(ctx.data, ctx.memoryId);
  ctx.model = m;
  const d = m.d, s = d.summary || {}, tl = d.timeline || {};
  const cat = ctx.data.categoryTimeline;
  layout(ctx, [
    el("section", {}, el("h2", {}, "Summary"), torchSummaryNode(ctx, s)),
    el("section", {},
      el("h2", {}, "Memory over time"),
      el("p", { class: "mp-hint" }, "Bytes allocated by tensors (PyTorch's ", el("code", {}, "Total Allocated"), ") and reserved by the caching allocator after each memory event; steps shaded. ",
        /^CPU/.test(m.d.device) ? "On CPU the trace counts only what was allocated while the profiler recorded. " : "",
        "Hover to see the event and the op that made it; click to select it. Drag to zoom, double-click to reset.",
        tl.downsampled ? ` ${m.n.toLocaleString()} points for ${num(tl.numEvents).toLocaleString()} events: each keeps the largest allocated value of its time bin, so the peak survives.` : ""),
      el("div", { id: "mp-timeline", class: "mp-chart" })),
    cat ? el("section", {},
      el("h2", {}, "Memory by category"),
      el("p", { class: "mp-hint" }, "From ", el("code", {}, "export_memory_timeline"), ": torch's own accounting of what each byte is for, stacked. It counts tensors, those made before the profiler started too (parameters, optimizer state), so its peak of category total can be above the peak allocated of the chart above",
        cat.aligned ? ". Both charts share one time axis: zoom either and the other follows." : "; its clock could not be aligned with the trace, so the times are its own."),
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
  const cat = ctx.data.categoryTimeline;
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
    el("div", { class: `mp-tiles ${cat ? "cols-4" : "cols-3"}` },
      tile("peakAllocated", "Peak allocated", bytesNode(s.peakAllocatedBytes), s.peakAllocatedBytes, `at ${fmtMs(s.peakAllocatedTimeMs)}`),
      reservedTile(s, m.d, cpu),
      // PyTorch's memory timeline counts tensors, those made before the profiler started
      // too (on CPU, Total Allocated does not: demo/logdir/torch/README.md), so this
      // peak may be the larger; the OOM risk rates the run by the largest of the three.
      cat ? tile("peakCategoryTotal", "Peak of category total", bytesNode(cat.peakBytes), cat.peakBytes,
        `at ${fmtMs(cat.peakTimeMs)}; memory timeline, tensors made before the trace included`) : null,
      tile("liveAtStart", "Live at start", bytesNode(s.liveBytesAtStart), s.liveBytesAtStart, "allocated before the trace"),
      tile("liveAtEnd", "Live at end", bytesNode(s.liveBytesAtEnd), s.liveBytesAtEnd, `${signedBytes(num(s.liveBytesAtEnd) - num(s.liveBytesAtStart))} over the trace`),
      // null when the trace has no addresses (accounting "runningSum"): unknown, not 0.
      s.neverFreedBytes === null ? tile("neverFreed", "Never freed", "—", null, "unknown: no addresses in this trace")
        : tile("neverFreed", "Never freed", bytesNode(s.neverFreedBytes), s.neverFreedBytes, `${num(s.neverFreedCount).toLocaleString()} allocations made in the window`),
      tile("allocatedTotal", "Allocated in all", bytesNode(s.allocatedBytes), s.allocatedBytes, `freed ${fmtBytes(s.freedBytes)}`)));
}

// Peak reserved: null when the trace has no "Total Reserved" (PyTorch of 2021 wrote only
// Bytes, Device Type and Device Id; reservedRecorded false): unknown, not 0 B.
function reservedTile(s, d, cpu) {
  if (d.reservedRecorded === false || s.peakReservedBytes === null) {
    return tile("peakReserved", "Peak reserved", "unknown", null, "not recorded: this trace's [memory] events have no Total Reserved");
  }
  if (!s.peakReservedBytes && cpu) return tile("peakReserved", "Peak reserved", "—", s.peakReservedBytes, "the CPU allocator reserves nothing");
  return tile("peakReserved", "Peak reserved", bytesNode(s.peakReservedBytes), s.peakReservedBytes, `at ${fmtMs(s.peakReservedTimeMs)}`);
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
    marker: { color: C.peak, size: 10, symbol: "diamond" }, text: [`peak allocated ${fmtBytes(s.peakAllocatedBytes)}`], textposition: labelSide(x, m.peakIndex),
    textfont: { color: C.peak }, hoverinfo: "skip", cliponaxis: false, showlegend: false });
  const cat = ctx.data.categoryTimeline;
  const shared = cat && cat.aligned ? sharedRange(x, cat.timeMs || []) : null;
  newPlot(div, traces, {
    height: 340, margin: { ...SHARED_MARGIN, t: 34, b: 48 }, hovermode: "x", hoverdistance: -1,
    xaxis: { title: { text: "time (ms)" }, ...SPIKE_AXIS, ...(shared ? { range: shared, autorange: false } : {}) },
    yaxis: bytesAxis(maxY * 1.18, u.div, { rangemode: "tozero", range: [0, maxY * 1.18 / u.div], automargin: false }),
    legend: LEGEND_TOP,
    shapes: torchShapes(ctx),
    annotations: bandLabels(m.steps).concat(hasReserved ? [] : [{ xref: "paper", x: 1, xanchor: "right", yref: "paper", y: 1, yanchor: "bottom", showarrow: false,
      text: m.d.reservedRecorded === false ? "reserved: not recorded in this trace" : "reserved: 0 throughout (no caching allocator)",
      font: { size: 11, color: P.muted } }]),
  }, shared ? { doubleClick: "reset" } : {});
  ctx.charts.push(div);
  wireTimeline(ctx, div);
}

// One time range for both charts when their clocks agree: from the first event of either
// to the last, padded 1 % (Plotly's own autorange would pad each differently).
function sharedRange(a, b) {
  let lo = Infinity, hi = -Infinity;
  for (const v of a) { if (v < lo) lo = v; if (v > hi) hi = v; }
  for (const v of b) { if (v < lo) lo = v; if (v > hi) hi = v; }
  if (!Number.isFinite(lo)) return null;
  const pad = (hi - lo) * 0.01 || 1;
  return [lo - pad, hi + pad];
}

export function torchShapes(ctx) {
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
    marker: { color: C.peak, size: 9, symbol: "diamond" }, text: [`peak of category total ${fmtBytes(cat.peakBytes)}`], textposition: labelSide(x, x.indexOf(cat.peakTimeMs)), textfont: { color: C.peak },
    hoverinfo: "skip", cliponaxis: false, showlegend: false });
  const top = Math.max(num(cat.peakBytes), ...total, 1) * 1.18;
  const timeline = ctx.root.querySelector("#mp-timeline");
  // Same clock as the timeline: the same x range and margins as it, so a time sits at
  // the same x on both charts.
  const shared = cat.aligned && timeline && timeline.layout ? timeline.layout.xaxis.range.slice() : null;
  newPlot(div, traces, {
    height: 320, margin: { ...SHARED_MARGIN, t: 34, b: 48 }, hovermode: "x unified",
    xaxis: { title: { text: cat.aligned ? "time (ms)" : "time (ms, memory timeline's own clock)" }, zeroline: false,
      ...(shared ? { range: shared, autorange: false } : {}) },
    yaxis: bytesAxis(top, u.div, { rangemode: "tozero", range: [0, top / u.div], automargin: false }),
    shapes: cat.aligned ? bandShapes(ctx.model.steps) : [],
    legend: { ...LEGEND_TOP, traceorder: "normal" },
  }, shared ? { doubleClick: "reset" } : {});
  ctx.charts.push(div);
  ctx.categoryDiv = div;
  ctx.categoryAligned = Boolean(cat.aligned);
  // Zoom or pan either chart and the other follows.
  if (shared) linkTimeAxes(ctx, [timeline, div]);
}

function categoryPeak(cat) {
  const parts = (cat.peakBreakdown || []).filter((p) => p.bytes > 0).sort((a, b) => b.bytes - a.bytes);
  if (!parts.length) return null;
  const total = parts.reduce((s, p) => s + p.bytes, 0) || 1;
  return el("div", { class: "mp-catpeak", id: "mp-category-peak" },
    el("span", { class: "muted" }, `At the peak of category total (${fmtBytes(cat.peakBytes)} at ${fmtMs(cat.peakTimeMs)}): `),
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
    el("p", {}, `At the peak allocated, ${fmtBytes(bd.totalBytes)} were live: ${fmtBytes(bd.attributedBytes)} allocated during the trace`,
      num(bd.unattributedBytes) ? `, ${fmtBytes(bd.unattributedBytes)} before it started.` : "."));
  return el("div", {}, ...notes,
    el("p", {}, `At the peak allocated, ${fmtBytes(bd.totalBytes)} were live: ${fmtBytes(bd.attributedBytes)} allocated during the trace (below)`,
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
    el("thead", {}, el("tr", {}, ...["step", "start", "duration", "live at start", "live at end", "change", "peak allocated", "allocations", "frees", "never freed"]
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

export function torchEventRows(m, i) {
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
