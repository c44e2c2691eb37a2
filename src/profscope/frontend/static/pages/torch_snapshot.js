// PyTorch CUDA memory snapshot page: one snapshot file (a run), one device (the host
// picker, cuda:N); the memory_profile tool of a snapshot run. Data:
// /api/snapshot/{overview,timeline,state,stack,stacks,compare} (the JSON contract is
// tools/torch_snapshot.py's module docstring). URL keys: t (the selected event index;
// empty = the peak), q (the compare sites filter), x (index or time axis), win (the
// timeline's zoom window), other (the snapshot compared with).
import { el } from "../lib/dom.js";
import { go, readState } from "../lib/state.js";
import { cachedJson, errorBox, getJson } from "../lib/api.js";
import { fmtBytes, fmtCount as n, fmtHex as hex, fmtMsFixed } from "../lib/format.js";
import { BLOCK as BLOCK_COLORS, P, SERIES as PALETTE } from "../lib/colors.js";
import { purge, react as plotReact } from "../lib/plotly.js";
import { sortableTable } from "../lib/table.js";

const ZOOM_DEBOUNCE_MS = 300;

let current = null; // the view on screen; the selected event changes in place
const stacks = new Map(); // "run\0stackId" -> promise of /api/snapshot/stack

const bytes = (v) => (v === null || v === undefined ? "—" : `${fmtBytes(v)} (${n(v)} bytes)`);
const fmtMs = (us) => fmtMsFixed(us / 1000); // event times are µs

function api(view, ctx, params = {}) {
  const q = new URLSearchParams({ run: ctx.run.name, host: ctx.host });
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== "") q.set(k, v);
  return `/api/snapshot/${view}?${q}`;
}

// -- entry point ---------------------------------------------------------------------

async function renderSnapshot(view, state, run, details) {
  const host = state.host || (details && details.hosts && details.hosts[0]) || "cuda:0";
  const key = [run.name, host].join("\u0000");
  if (current && current.key === key && view.contains(current.root)) return update(current, state);
  leave();
  const root = el("div", { class: "ts" },
    el("div", { class: "ts-head" }, el("h1", {}, "Memory snapshot"),
      el("span", { class: "muted" }, `${run.name} · ${host}`)),
    el("p", { class: "muted", id: "ts-loading" }, "Reading the snapshot…"));
  view.replaceChildren(root);
  const ctx = { key, root, run, host, charts: [], t: null };
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
  ctx.xMode = xModeOf(ctx, state);
  ctx.win = state.win || "";
  ctx.card = el("div", { class: "ts-card", id: "ts-card" }, el("p", { class: "muted" }, "Hover an allocation on the timeline to see it and its stack."));
  ctx.plot = el("div", { class: "ts-chart", id: "ts-timeline" });
  ctx.timelineNote = el("div", { class: "muted small", id: "ts-timeline-note" });
  ctx.statePanel = el("div", { id: "ts-state" });
  ctx.stacksPanel = el("div", { id: "ts-stacks" });
  ctx.comparePanel = el("div", { id: "ts-compare" });
  root.append(
    overviewStrip(ctx, ov),
    el("div", { class: "ts-section-head" }, el("h2", {}, "Active memory timeline"), timelineControls(ctx)),
    el("p", { class: "ts-hint" }, "Each polygon is one allocation (the largest in view); the grey band holds the rest. Drag to zoom: the server sends detail for the window. Click to select an event."),
    el("div", { class: "ts-layout" }, el("div", {}, ctx.plot, ctx.timelineNote), el("aside", { class: "ts-aside" }, ctx.card)),
    el("h2", {}, "Allocator state"), ctx.statePanel,
    el("h2", {}, "Live memory by stack"), ctx.stacksPanel,
    el("h2", {}, "Compare with another snapshot"), ctx.comparePanel);
  setupCompare(ctx, state);
  await loadTimeline(ctx, ...windowOf(ctx.win));
  update(ctx, state);
}

// The x axis (x=index|time) and the zoomed window (win=<start>,<end>: event indices,
// or time_us with x=time, as the timeline API takes them) live in the URL, like the
// selected event (t=) and the compared run (other=).
function xModeOf(ctx, state) { return state.x === "time" && ctx.ov.summary.hasTime ? "time" : "index"; }
function windowOf(win) {
  const m = /^(\d+),(\d+)$/.exec(win || "");
  return m && Number(m[2]) - Number(m[1]) >= 2 ? [Number(m[1]), Number(m[2])] : [null, null];
}

function leave() {
  if (!current) return;
  purge(current.charts);
  clearTimeout(current.zoomTimer);
  current = null;
}

function update(ctx, state) {
  const peak = ctx.ov.summary.peak.event;
  const t = state.t !== "" && Number.isFinite(Number(state.t)) ? Math.trunc(Number(state.t)) : null;
  const event = t === null ? peak : t;
  if (event !== ctx.t || (t === null) !== ctx.tIsPeak) {
    ctx.t = event;
    ctx.tIsPeak = t === null;
    markSelected(ctx);
    renderState(ctx);
    renderStacks(ctx);
  }
  if (ctx.sites && (state.q || "") !== ctx.sites.filter()) ctx.sites.setFilter(state.q || "");
  const x = xModeOf(ctx, state);
  if (x !== ctx.xMode || (state.win || "") !== ctx.win) {
    ctx.xMode = x;
    ctx.win = state.win || "";
    ctx.range = null;
    const pick = ctx.root.querySelector("#ts-xmode");
    if (pick) pick.value = x;
    loadTimeline(ctx, ...windowOf(ctx.win));
  }
  if (ctx.comparePick && (state.other || "") !== ctx.otherShown) showCompare(ctx, state.other || "");
}

function select(event) {
  go({ ...readState(), t: event === null || event === undefined ? "" : String(event) });
}

// -- 1. overview strip -----------------------------------------------------------------

function overviewStrip(ctx, ov) {
  const s = ov.summary;
  const f = ov.format || {};
  const overflow = ov.warnings.filter((w) => w.code === "trace_overflow");
  const others = ov.warnings.filter((w) => w.code !== "trace_overflow");
  const tile = (label, value, sub, id) => el("div", { class: "ts-tile", id }, el("div", { class: "label" }, label), el("div", { class: "value" }, value), sub ? el("div", { class: "sub muted" }, sub) : null);
  const peakLink = s.peak.event === null ? "—" : el("a", { href: "#", onclick: (e) => { e.preventDefault(); select(s.peak.event); } }, `event ${n(s.peak.event)}`);
  const actions = Object.entries(s.actions || {}).map(([k, v]) => `${k} ${n(v)}`).join(" · ");
  return el("section", { class: "ts-overview", id: "ts-overview" },
    overflow.map((w) => el("div", { class: "ts-overflow", role: "alert", id: "ts-overflow" }, el("strong", {}, "Events may be missing: "), w.message)),
    el("div", { class: "ts-tiles" },
      tile("Peak live", el("span", { id: "ts-peak", "data-bytes": String(s.peak.bytes) }, fmtBytes(s.peak.bytes)),
        el("span", {}, `${n(s.peak.bytes)} bytes · `, peakLink, s.peak.timeUs !== null && s.hasTime ? ` · +${fmtMs(s.peak.timeUs - s.firstTimeUs)}` : "")),
      tile("Final active", fmtBytes(s.finalActiveBytes), `${n(s.finalActiveBytes)} bytes (requested ${fmtBytes(s.finalRequestedBytes)})`),
      tile("Final reserved", fmtBytes(s.finalReservedBytes), `${n(ov.segments.count)} segments${ov.segments.expandableCount ? `, ${ov.segments.expandableCount} expandable` : ""}`),
      tile("Trace", `${n(s.traceEntries)} events`, actions),
      tile("Allocations", n(s.allocations), `pre-existing ${n(s.preexisting.count)} (${fmtBytes(s.preexisting.bytes)})`),
      tile("Format", `${f.format || "?"}${f.pickleProtocol ? ` (protocol ${f.pickleProtocol})` : ""}`, `era ${f.era || "unknown"}${s.hasTime ? "" : " · no timestamps"}`)),
    others.length ? el("ul", { class: "ts-warnings", id: "ts-warnings" }, others.map((w) => el("li", { "data-code": w.code }, w.message))) : null,
    ov.ooms.length ? el("div", { class: "ts-ooms", id: "ts-ooms" }, el("h3", {}, `Out-of-memory events (${ov.ooms.length})`),
      el("table", {}, el("thead", {}, el("tr", {}, ["event", "requested", "device free", "live", "reserved", "largest free block"].map((h, i) => el("th", { class: i ? "num" : "" }, h)))),
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
  const hasTime = ctx.ov.summary.hasTime;
  const pick = el("select", { id: "ts-xmode", "aria-label": "x axis", disabled: !hasTime,
    onchange: (e) => go({ ...readState(), x: e.target.value === "time" ? "time" : "", win: "" }) },
  el("option", { value: "index" }, "event index"), hasTime ? el("option", { value: "time" }, "time") : null);
  pick.value = ctx.xMode;
  return el("label", { class: "ts-picker" }, "x axis ", pick, hasTime ? null : el("span", { class: "muted" }, " (no timestamps)"));
}

// x values: event indices, or ms since the first event (the server speaks time_us).
function toX(ctx, v) { return ctx.xMode === "time" ? (v - ctx.ov.summary.firstTimeUs) / 1000 : v; }
function xs(ctx, arr) { return ctx.xMode === "time" ? arr.map((v) => toX(ctx, v)) : arr; }

// The event index at an x value (time mode maps through the full view's total series).
function eventAt(ctx, x) {
  const total = ctx.fullTotal;
  if (ctx.xMode !== "time" || !total) return Math.round(x);
  let lo = 0, hi = total.x.length - 1;
  while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (toX(ctx, total.x[mid]) <= x) lo = mid; else hi = mid - 1; }
  return total.index[lo];
}

async function loadTimeline(ctx, start, end) {
  const seq = (ctx.tlSeq = (ctx.tlSeq || 0) + 1);
  let tl;
  try { tl = await cachedJson(api("timeline", ctx, { x: ctx.xMode, start, end })); } catch (err) {
    if (seq === ctx.tlSeq) ctx.timelineNote.replaceChildren(errorBox(err, "Timeline"));
    return;
  }
  if (seq !== ctx.tlSeq || current !== ctx) return;
  if (start === null) ctx.fullTotal = tl.total;
  ctx.tl = tl;
  drawTimeline(ctx, tl, start === null ? null : ctx.range);
}

// A left-step polygon (a point's value holds until the next point) as one closed path.
function stepPolygon(ctx, p) {
  const x = xs(ctx, p.x), px = [], py = [];
  const k = x.length;
  for (let i = 0; i < k; i++) { px.push(x[i]); py.push(p.y1[i]); if (i + 1 < k) { px.push(x[i + 1]); py.push(p.y1[i]); } }
  for (let i = k - 1; i >= 0; i--) { if (i + 1 < k) { px.push(x[i + 1]); py.push(p.y0[i]); } px.push(x[i]); py.push(p.y0[i]); }
  return { x: px, y: py };
}

function drawTimeline(ctx, tl, range) {
  const traces = [];
  ctx.traceAlloc = [];
  for (const a of tl.allocations) {
    const poly = stepPolygon(ctx, a.polygon);
    const color = a.preexisting ? "#a7b3c6" : PALETTE[a.id % PALETTE.length];
    traces.push({ type: "scatter", mode: "lines", x: poly.x, y: poly.y, fill: "toself", fillcolor: color,
      line: { width: 0.5, color }, hoveron: "fills", hoverinfo: "none", showlegend: false, name: `alloc ${a.id}` });
    ctx.traceAlloc.push(a);
  }
  if (tl.others && tl.others.x.length) {
    const poly = stepPolygon(ctx, tl.others);
    traces.push({ type: "scatter", mode: "lines", x: poly.x, y: poly.y, fill: "toself", fillcolor: "rgba(150,150,150,0.35)",
      line: { width: 0 }, hoveron: "fills", hoverinfo: "none", name: `others (${n(tl.allocationsInWindow - tl.drawn)})` });
    ctx.traceAlloc.push(null);
  }
  traces.push({ type: "scatter", mode: "lines", x: xs(ctx, tl.total.x), y: tl.total.bytes, customdata: tl.total.index,
    line: { color: P.fg, width: 1.5, shape: "hv" }, name: "total live",
    hovertemplate: "event %{customdata}<br>total %{y:,} bytes<extra></extra>" });
  ctx.traceAlloc.push(null);
  traces.push({ type: "scatter", mode: "lines", x: xs(ctx, tl.reserved.x), y: tl.reserved.reservedBytes, customdata: tl.reserved.index,
    line: { color: P.brown, width: 1.5, dash: "dash", shape: "hv" }, name: "reserved",
    hovertemplate: "event %{customdata}<br>reserved %{y:,} bytes<extra></extra>" });
  ctx.traceAlloc.push(null);
  traces.push({ type: "scatter", mode: "markers", x: [toX(ctx, tl.peak.x)], y: [tl.peak.bytes], customdata: [tl.peak.event],
    marker: { color: P.bad, size: 9, symbol: "diamond" }, name: "peak in view",
    hovertemplate: "peak: event %{customdata}<br>%{y:,} bytes<extra></extra>" });
  ctx.traceAlloc.push(null);
  const layout = {
    margin: { l: 70, r: 10, t: 10, b: 40 }, height: 420, hovermode: "closest", dragmode: "zoom",
    xaxis: { title: { text: ctx.xMode === "time" ? "time since first event (ms)" : "event index" }, zeroline: false },
    yaxis: { title: { text: "bytes" }, tickformat: ".3s", fixedrange: false, rangemode: "tozero" },
    legend: { orientation: "h", y: 1.06, x: 0 }, shapes: [...bandShapes(ctx), ...selectedShape(ctx)],
    annotations: bandLabels(ctx),
  };
  if (range) { layout.xaxis.range = range; layout.xaxis.autorange = false; }
  ctx.drawing = true;
  const fresh = !ctx.plot.data;
  plotReact(ctx.plot, traces, layout).then(() => { ctx.drawing = false; });
  if (!ctx.charts.includes(ctx.plot)) ctx.charts.push(ctx.plot);
  ctx.timelineNote.textContent = `events ${n(tl.window.start)}–${n(tl.window.end - 1)} of ${n(tl.totalEvents)} · ${n(tl.drawn)} of ${n(tl.allocationsInWindow)} allocations drawn individually${tl.decimated ? " · lines decimated (max per bucket)" : ""}`;
  if (fresh) wireTimeline(ctx);
}

function bandShapes(ctx) {
  return (ctx.ov.annotationBands || []).map((b) => ({ type: "rect", xref: "x", yref: "paper", y0: 0, y1: 1, layer: "below",
    x0: ctx.xMode === "time" ? toX(ctx, b.startUs) : b.startEvent, x1: ctx.xMode === "time" ? toX(ctx, b.endUs) : b.endEvent,
    fillcolor: "rgba(237,201,72,0.18)", line: { width: 0 } }));
}

function bandLabels(ctx) {
  return (ctx.ov.annotationBands || []).map((b) => ({ xref: "x", yref: "paper", y: 1, yanchor: "top", showarrow: false,
    x: ctx.xMode === "time" ? toX(ctx, b.startUs) : b.startEvent, xanchor: "left", text: b.name, font: { size: 10, color: "#8a6d00" } }));
}

function selectedShape(ctx) {
  if (ctx.t === null || ctx.t === undefined) return [];
  let x = ctx.t;
  if (ctx.xMode === "time") {
    if (ctx.tTimeUs === undefined || ctx.tTimeUs === null) return [];
    x = toX(ctx, ctx.tTimeUs);
  }
  return [{ type: "line", xref: "x", yref: "paper", x0: x, x1: x, y0: 0, y1: 1, line: { color: P.fg, width: 1.5, dash: "dot" } }];
}

function markSelected(ctx) {
  if (!ctx.plot.data) return;
  window.Plotly.relayout(ctx.plot, { shapes: [...bandShapes(ctx), ...selectedShape(ctx)] });
}

function wireTimeline(ctx) {
  const gd = ctx.plot;
  let lastX = null;
  gd.addEventListener("mousemove", (e) => {
    const fl = gd._fullLayout;
    if (!fl || !fl.xaxis) return;
    const box = gd.getBoundingClientRect();
    lastX = fl.xaxis.p2l(e.clientX - box.left - fl._size.l);
  });
  gd.on("plotly_hover", (ev) => {
    const p = ev.points && ev.points[0];
    if (!p) return;
    const a = ctx.traceAlloc[p.curveNumber];
    if (a) showAllocation(ctx, a);
  });
  gd.on("plotly_click", (ev) => {
    const p = ev.points && ev.points[0];
    let event = null;
    if (p && p.customdata !== undefined && p.customdata !== null) event = p.customdata;
    else if (lastX !== null) event = eventAt(ctx, lastX);
    if (event === null) return;
    select(Math.max(0, Math.min(ctx.ov.summary.traceEntries - 1, Math.round(event))));
  });
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
}

function showAllocation(ctx, a) {
  if (ctx.cardId === a.id) return;
  ctx.cardId = a.id;
  const frames = el("div", { class: "ts-frames", id: "ts-card-frames" }, el("p", { class: "muted" }, "Loading the stack…"));
  ctx.card.dataset.alloc = String(a.id);
  ctx.card.replaceChildren(
    el("h3", {}, `Allocation ${a.id}${a.preexisting ? " (allocated before recording)" : ""}`),
    el("dl", { class: "kv" },
      el("dt", {}, "size"), el("dd", { id: "ts-card-size" }, bytes(a.size)),
      el("dt", {}, "address"), el("dd", {}, el("code", {}, hex(a.addr))),
      el("dt", {}, "stream"), el("dd", {}, String(a.stream)),
      el("dt", {}, "allocated"), el("dd", {}, a.allocIndex === null ? "before recording" : el("a", { href: "#", onclick: (e) => { e.preventDefault(); select(a.allocIndex); } }, `event ${n(a.allocIndex)}`)),
      el("dt", {}, "freed"), el("dd", {}, a.freeIndex === null ? "never (alive at the end)" : el("a", { href: "#", onclick: (e) => { e.preventDefault(); select(a.freeIndex); } }, `event ${n(a.freeIndex)}`))),
    el("h4", {}, "Stack (innermost first)"), frames);
  const key = `${ctx.run.name}\u0000${a.stackId}`;
  if (!stacks.has(key)) {
    const p = getJson(api("stack", ctx, { stack: a.stackId }));
    p.catch(() => stacks.delete(key));
    stacks.set(key, p);
  }
  stacks.get(key).then((s) => {
    if (ctx.cardId !== a.id) return;
    frames.replaceChildren(...(s.frames.length ? s.frames.map(frameLine)
      : [el("p", { class: "muted" }, s.unfilteredCount ? "Only runtime frames (filtered out)." : "No stack recorded.")]));
    frames.dataset.loaded = "1";
  }, (err) => { if (ctx.cardId === a.id) frames.replaceChildren(errorBox(err, "Stack")); });
}

function frameLine(f) {
  const file = f.filename ? f.filename.split("/").slice(-2).join("/") : "??";
  return el("div", { class: "ts-frame", title: `${f.filename}:${f.line}` },
    el("span", { class: "fn" }, f.name || "??"), " ", el("span", { class: "muted" }, `${file}:${f.line}`),
    f.repeats > 1 ? el("span", { class: "muted" }, ` ×${f.repeats}`) : null);
}

// -- 3. allocator state ----------------------------------------------------------------

async function renderState(ctx) {
  const event = ctx.t;
  const total = ctx.ov.summary.traceEntries;
  const box = el("input", { type: "number", id: "ts-event", min: "0", max: String(Math.max(0, total - 1)), value: event === null ? "" : String(event), "aria-label": "event index",
    onchange: (e) => { const v = Math.trunc(Number(e.target.value)); if (Number.isFinite(v)) select(Math.max(0, Math.min(total - 1, v))); } });
  const step = (d) => select(Math.max(0, Math.min(total - 1, (event ?? 0) + d)));
  const bar = el("div", { class: "ts-stepper" },
    el("button", { type: "button", id: "ts-prev", disabled: event === null || event <= 0, onclick: () => step(-1) }, "◀ prev"),
    el("label", { class: "ts-picker" }, "event ", box, el("span", { class: "muted" }, ` of ${n(total)}`)),
    el("button", { type: "button", id: "ts-next", disabled: event === null || event >= total - 1, onclick: () => step(1) }, "next ▶"),
    el("button", { type: "button", id: "ts-to-peak", onclick: () => select(null) }, "peak"));
  const body = el("div", {}, el("p", { class: "muted" }, "Replaying the allocator…"));
  ctx.statePanel.replaceChildren(bar, body);
  let st;
  try { st = await cachedJson(api("state", ctx, { event })); } catch (err) { body.replaceChildren(errorBox(err, "Allocator state")); return; }
  if (current !== ctx || ctx.t !== event) return;
  ctx.tTimeUs = st.timeUs;
  if (ctx.xMode === "time") markSelected(ctx);
  const tt = st.totals;
  ctx.statePanel.dataset.event = String(st.event);
  const kvs = [["reserved", tt.reservedBytes], ["active", tt.activeBytes], ["requested", tt.requestedBytes],
    ["internal fragmentation", tt.internalFragmentation], ["external fragmentation", tt.externalFragmentation], ["largest free block", tt.largestFreeBlock]];
  const chart = el("div", { class: "ts-segments", id: "ts-segments" });
  body.replaceChildren(
    el("p", { id: "ts-state-title" }, el("strong", {}, `After event ${n(st.event)}`), ctx.tIsPeak ? " (the peak)" : "",
      st.timeUs !== null && ctx.ov.summary.hasTime ? el("span", { class: "muted" }, ` · +${fmtMs(st.timeUs - ctx.ov.summary.firstTimeUs)}`) : null),
    el("div", { class: "ts-tiles small-tiles", id: "ts-state-totals" }, kvs.map(([k, v]) =>
      el("div", { class: "ts-tile" }, el("div", { class: "label" }, k), el("div", { class: "value" }, fmtBytes(v)), el("div", { class: "sub muted" }, `${n(v)} B`))),
      el("div", { class: "ts-tile" }, el("div", { class: "label" }, "segments / blocks"), el("div", { class: "value" }, `${n(tt.segments)} / ${n(tt.activeBlocks + tt.inactiveBlocks)}`),
        el("div", { class: "sub muted" }, `${n(tt.activeBlocks)} active, ${n(tt.inactiveBlocks)} free${tt.orphanBlocks ? `, ${n(tt.orphanBlocks)} outside segments` : ""}`))),
    ...(st.blocksOmitted ? [el("p", { class: "mp-warn" }, `${n(st.blocksOmitted)} blocks not shown.`)] : []),
    chart);
  drawSegments(ctx, chart, st);
}

function drawSegments(ctx, div, st) {
  const segs = st.segments;
  const by = {};
  segs.forEach((s, i) => {
    for (const b of s.blocks) {
      const state = b.state.startsWith("active") ? (b.state === "active_allocated" ? "active_allocated" : "active_pending_free") : "inactive";
      const t = (by[state] = by[state] || { x: [], base: [], y: [], text: [] });
      t.x.push(b.size); t.base.push(b.address - s.address); t.y.push(i);
      t.text.push(`${b.state}<br>${fmtBytes(b.size)} at ${hex(b.address)}${b.requested ? `<br>requested ${n(b.requested)} B` : ""}` +
        `${b.allocIndex !== null ? `<br>alloc event ${b.allocIndex}` : ""}${b.freeIndex !== null ? `<br>free event ${b.freeIndex}` : ""}`);
    }
  });
  const names = { active_allocated: "active", active_pending_free: "pending free", inactive: "inactive (free)" };
  const traces = Object.entries(by).map(([k, t]) => ({ type: "bar", orientation: "h", name: names[k], x: t.x, base: t.base, y: t.y,
    marker: { color: BLOCK_COLORS[k], line: { color: "#fff", width: 0.5 } }, text: t.text, textposition: "none",
    hovertemplate: "%{text}<extra></extra>" }));
  const height = Math.max(160, Math.min(24 * 400, segs.length * 13 + 60));
  plotReact(div, traces, {
    barmode: "overlay", height, margin: { l: 110, r: 10, t: 24, b: 30 }, bargap: 0.15, hovermode: "closest",
    legend: { orientation: "h", y: 1, yanchor: "bottom", x: 0 },
    xaxis: { title: { text: "offset in segment (bytes)" }, tickformat: ".3s", side: "top" },
    yaxis: { autorange: "reversed", tickvals: segs.map((_, i) => i), ticktext: segs.map((s) => `${hex(s.address)} ${fmtBytes(s.size)}`), tickfont: { size: 9 } },
  });
  if (!ctx.charts.includes(div)) ctx.charts.push(div);
}

// -- 4. stacks -------------------------------------------------------------------------

async function renderStacks(ctx) {
  const event = ctx.t;
  const div = el("div", { class: "ts-chart", id: "ts-icicle" });
  const head = el("p", { class: "muted" }, "Grouping live memory by stack…");
  ctx.stacksPanel.replaceChildren(head, div);
  let d;
  try { d = await cachedJson(api("stacks", ctx, { event: ctx.tIsPeak ? null : event })); } catch (err) { head.replaceWith(errorBox(err, "Stacks")); return; }
  if (current !== ctx || ctx.t !== event) return;
  head.replaceChildren(`${fmtBytes(d.totalBytes)} live after event ${n(d.event)}${d.atPeak ? " (the peak)" : ""} · outermost frame at the top; click a box to zoom.`,
    d.nodesOmitted ? ` ${n(d.nodesOmitted)} small nodes folded into "other".` : "");
  plotReact(div, [{ type: "icicle", ids: d.ids, labels: d.labels, parents: d.parents, values: d.values, hovertext: d.hover,
    branchvalues: "total", maxdepth: 8, tiling: { orientation: "v" }, textinfo: "label+value",
    texttemplate: "%{label}<br>%{value:.3s}B", hovertemplate: "%{hovertext}<br>%{value:,} bytes<extra></extra>" }],
  { margin: { l: 4, r: 4, t: 4, b: 4 }, height: 460 });
  if (!ctx.charts.includes(div)) ctx.charts.push(div);
}

// -- 5. compare ------------------------------------------------------------------------

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
    onchange: (e) => go({ ...readState(), other: e.target.value }) },
  el("option", { value: "" }, "— pick a snapshot —"), others.map((r) => el("option", { value: r.name }, r.name)));
  ctx.comparePanel.replaceChildren(el("label", { class: "ts-picker" }, `A = this snapshot (${ctx.host}), B = `, pick), out);
  ctx.comparePick = pick;
  ctx.compareOut = out;
  ctx.compareRuns = others.map((r) => r.name);
  if (current === ctx) showCompare(ctx, readState().other || "");
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
  const sg = d.segments;
  const segs = el("p", { id: "ts-segment-diff" }, `Segments: ${n(sg.common)} in both · ${n(sg.onlyACount)} only in A (${fmtBytes(sg.onlyABytes)}) · ${n(sg.onlyBCount)} only in B (${fmtBytes(sg.onlyBBytes)})`);
  ctx.sites = sitesTable(d.sites, readState().q || "");
  out.replaceChildren(
    el("p", { class: "muted" }, `A: ${d.a.path} (device ${d.a.device}, ${fmtBytes(d.a.liveBytes)} live in ${n(d.a.liveBlocks)} blocks) · B: ${d.b.path} (device ${d.b.device}, ${fmtBytes(d.b.liveBytes)} live in ${n(d.b.liveBlocks)} blocks)`),
    summary, segs, el("h3", {}, `Allocation sites that differ (${n(d.sites.length)}${d.sitesOmitted ? ` + ${n(d.sitesOmitted)} omitted` : ""})`), ctx.sites.node);
}

function sitesTable(sites, filter) {
  const cols = [
    { key: "site", label: "site", value: (s) => siteLabel(s), cellClass: "path", title: (s) => (s.site ? `${s.site.filename}:${s.site.line}` : null) },
    { key: "in", label: "in", value: (s) => s.in },
    { key: "bytesA", label: "bytes A", value: (s) => s.bytesA, num: true, show: (s) => fmtBytes(s.bytesA) },
    { key: "countA", label: "blocks A", value: (s) => s.countA, num: true, show: (s) => n(s.countA) },
    { key: "bytesB", label: "bytes B", value: (s) => s.bytesB, num: true, show: (s) => fmtBytes(s.bytesB) },
    { key: "countB", label: "blocks B", value: (s) => s.countB, num: true, show: (s) => n(s.countB) },
    { key: "delta", label: "Δ bytes", value: (s) => s.deltaBytes, sortValue: (s) => Math.abs(s.deltaBytes), num: true, show: (s) => (s.deltaBytes > 0 ? "+" : "") + fmtBytes(s.deltaBytes) },
  ];
  return sortableTable({
    id: "ts-sites", prefix: "ts", tableClass: "", rows: sites, columns: cols, sortKey: "delta", wrap: false,
    text: siteLabel, empty: () => "No site matches.", rowClass: (s) => `ts-site ${s.in}`,
    filter: { id: "ts-sites-filter", placeholder: "filter sites…", value: filter, onChange: (q) => go({ ...readState(), q }, { replace: true }) },
  });
}

function siteLabel(s) {
  if (!s.site) return "<no stack>";
  return `${s.site.name} (${s.site.filename.split("/").slice(-2).join("/")}:${s.site.line})`;
}

export default {
  tool: "memory_profile",
  accepts: (run) => run.kind === "torch_snapshot",
  css: ["pages/torch_snapshot.css"],
  keys: {
    t: { resetOn: ["run", "tool", "host"] },
    q: { resetOn: ["run", "tool", "host"] },
    x: { resetOn: ["run", "tool", "host"] },
    win: { resetOn: ["run", "tool", "host"] },
    other: { resetOn: ["run", "tool", "host"] },
  },
  render: renderSnapshot,
  leave,
};
