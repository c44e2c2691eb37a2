// Memory viewer page: what the XLA compiler planned for one HLO module and memory space.
// Data: XProf's memory viewer JSON (/data/plugin/profile/data?tag=memory_viewer) plus our
// extras under `profscope` (all optional: the page works on plain XProf output too), or
// the text-only payload of a dump that has no *.hlo.pb.
// URL keys: memory_space, buffer (the selected buffer: a shared link opens on it),
// hlo_op (an HLO instruction, e.g. from a trace-viewer slice: its buffers are selected and
// the heap-simulator event that allocates them is marked), view=hlo with instr and hq (the
// module's HLO text, hlo_view.js); the shell's module_name picks the module. Every peak here is the compiler's plan (the XLA heap simulator): "compiler
// heap peak", not what an allocator reached at run time.
import { el } from "../lib/dom.js";
import { go, readState, stateUrl } from "../lib/state.js";
import { cachedJson, errorBox } from "../lib/api.js";
import { MIB, byteTicks, exact, fmtBytes, fmtMib, pct, signedBytes } from "../lib/format.js";
import { P, XLA_CATEGORY, XLA_OTHER, colorOf, shade } from "../lib/colors.js";
import { HOVER_CARD, bytesAxis, escapePlotly, newPlot } from "../lib/plotly.js";
import { sortableTable } from "../lib/table.js";
import { COMPARE_KEYS, comparePicker, comparing } from "../lib/compare.js";
import { renderCompare } from "./memory_viewer_compare.js";
import { renderHloView } from "./hlo_view.js";
import { instructionOf, instructionPanel, instructionSections, loadInstruction } from "./hlo_panel.js";

const X_TITLE = "program order (heap-simulator event index)";
const categoryColor = (cat) => colorOf(XLA_CATEGORY, XLA_OTHER, cat);

let current = null; // the module view on screen: lets a buffer click update in place

// -- entry point ---------------------------------------------------------------------

async function renderMemoryViewer(view, state, run, details) {
  if (state.module_name && state.view === "hlo") { // the module's HLO text (hlo_view.js)
    leaveModule();
    return renderHloView(view, state, run);
  }
  // A base in the URL: the compare view (memory_viewer_compare.js), the single view left.
  if (state.module_name && comparing(state)) {
    leaveModule();
    const compareKey = (s) => JSON.stringify([viewKey(s), ...Object.keys(COMPARE_KEYS).map((k) => s[k])]);
    const shown = compareKey(state);
    return renderCompare(view, state, { ...run, hosts: details.hosts || run.hosts }, () => compareKey(readState()) === shown);
  }
  const key = viewKey(state);
  // Only the buffer changed (a click, back/forward): keep the charts, move the selection.
  if (current && current.key === key && view.contains(current.root)) {
    setOp(current, state);
    showBuffer(current, current.selected);
    return;
  }
  leaveModule();
  if (!state.module_name) return renderModuleRanking(view, state, run, details);

  const root = el("div", { class: "mv" },
    header(state, run),
    el("div", { class: "mv-toolbar" }, el("span", { id: "mv-space-slot" }), el("div", { id: "mv-modules-slot" })),
    comparePicker(state, { ...run, hosts: details.hosts || run.hosts }, { modules: true }),
    el("p", { class: "muted" }, `Loading the buffer assignment of ${state.module_name}…`));
  view.replaceChildren(root);
  fillModulesSlot(root.querySelector("#mv-modules-slot"), state, run);

  let data;
  try {
    data = await loadData(state);
  } catch (err) {
    if (viewKey(readState()) !== key) return;
    root.lastChild.replaceWith(errorBox(err, `No memory viewer data for ${state.module_name}`));
    if (state.memory_space) // e.g. a space this module does not have: offer the default one
      root.append(el("p", {}, el("a", { href: stateUrl({ ...state, memory_space: "", buffer: "" }),
        onclick: (e) => { e.preventDefault(); go({ ...state, memory_space: "", buffer: "" }); } }, "Show memory space 0")));
    return;
  }
  if (viewKey(readState()) !== key) return; // the user moved on while this loaded
  root.lastChild.remove();
  if (data.textOnly) return renderTextOnly(root, data, state);
  renderModule(root, data, state, key);
}

// Free the charts of the module view being replaced: a chart whose element is gone
// would otherwise still answer a pending hover.
function leaveModule() {
  if (!current) return;
  for (const div of current.root.querySelectorAll(".js-plotly-plot")) window.Plotly.purge(div);
  current = null;
}

function viewKey(state) {
  return [state.run, state.host, state.module_name, state.memory_space || "0"].join("\u0000");
}

function dataUrl(state) {
  const q = new URLSearchParams({ run: state.run, tag: "memory_viewer" });
  if (state.host) q.set("host", state.host);
  q.set("module_name", state.module_name);
  q.set("memory_space", state.memory_space || "0");
  q.set("view", "page"); // the server's decimated copy for big modules
  return `/data/plugin/profile/data?${q}`;
}

function loadData(state) {
  const url = dataUrl(state);
  return cachedJson(url);
}

function loadModulePeaks(run, space) {
  const url = `/api/module_peaks?${new URLSearchParams({ run, memory_space: space || "0" })}`;
  return cachedJson(url);
}

function header(state, run, data) {
  return el("div", { class: "mv-head" },
    el("h1", {}, "Memory viewer"),
    el("div", { class: "mv-subtitle" },
      state.module_name ? el("code", { class: "mv-module" }, state.module_name) : null,
      data && data.entryComputationName ? el("span", { class: "muted" }, ` entry computation ${data.entryComputationName}`) : null,
      el("span", { class: "muted" }, ` · ${run.name}`)));
}

// -- modules ranked by peak ------------------------------------------------------------

async function renderModuleRanking(view, state, run, details) {
  const slot = el("div", {}, el("p", { class: "muted" }, "Computing every module's peak…"));
  view.replaceChildren(el("div", { class: "mv" }, header(state, run),
    el("p", {}, "Pick a module. The table ranks every compiled module of this run by its compiler heap peak (what XLA's heap simulator planned), so the one that runs out of memory first is at the top."),
    slot));
  if (!details.modules.length) {
    slot.replaceChildren(el("p", { class: "muted" }, "This run records no compiled HLO module."));
    return;
  }
  // One module: nothing to pick. Replace (not push) so that Back does not land here again.
  const real = details.modules.filter((m) => m !== "NO_MODULE");
  if (real.length === 1) return go({ ...state, module_name: real[0] }, { replace: true });
  let rows;
  try {
    rows = await loadModulePeaks(run.name, state.memory_space);
  } catch (err) {
    // No ranking (yet): still let the user pick any module.
    rows = details.modules.map((m) => ({ moduleName: m }));
    slot.replaceChildren(errorBox(err, "Cannot rank the modules by peak"));
    slot.append(modulesTable(rows, state, false));
    return;
  }
  if (readState().module_name) return;
  // Modules without a peak (text-only dumps) are still listed, last.
  const ranked = new Set(rows.map((r) => r.moduleName));
  const rest = details.modules.filter((m) => !ranked.has(m) && m !== "NO_MODULE")
    .map((m) => ({ moduleName: m, error: "no peak: only the text dump, no .hlo.pb" }));
  slot.replaceChildren(modulesTable(rows.concat(rest), state, false));
}

async function fillModulesSlot(slot, state, run) {
  let rows;
  try {
    rows = await loadModulePeaks(run.name, state.memory_space);
  } catch {
    return; // the ranking is a convenience here; the module picker still works
  }
  if (!rows.length || !slot.isConnected) return;
  const worst = rows.find((r) => r.peakHeapMib !== undefined) || rows[0];
  const isWorst = worst.moduleName === state.module_name;
  slot.replaceChildren(el("details", { class: "mv-modules" },
    el("summary", {}, `All ${rows.length} modules by compiler heap peak`,
      el("span", { class: "muted" }, " · largest: "),
      isWorst ? el("span", {}, `this one (${fmtMib(worst.peakHeapMib)})`)
        : el("a", { href: stateUrl(moduleState(state, worst.moduleName)), onclick: (e) => openModule(e, state, worst.moduleName) },
            `${worst.moduleName} (${fmtMib(worst.peakHeapMib)})`)),
    modulesTable(rows, state, true)));
}

function moduleState(state, moduleName) {
  return { ...state, module_name: moduleName, buffer: "", hlo_op: "" };
}

function openModule(event, state, moduleName) {
  event.preventDefault();
  go(moduleState(state, moduleName));
}

function modulesTable(rows, state, compact) {
  const sorted = [...rows].sort((a, b) => (b.peakHeapMib || 0) - (a.peakHeapMib || 0));
  const top = Math.max(...sorted.map((r) => r.peakHeapMib || 0), 1e-9);
  const mibCell = (v) => el("td", { class: "num", title: v === undefined ? "" : `${Math.round(v * MIB).toLocaleString()} bytes` }, fmtMib(v));
  return el("table", { id: "mv-modules-table", class: compact ? "compact" : "" },
    el("thead", {}, el("tr", {},
      el("th", {}, "module"), el("th", { class: "num" }, "compiler heap peak"), el("th", { class: "num" }, "unpadded"),
      el("th", { class: "num" }, "total allocation"), el("th", { class: "num" }, "arguments"), el("th", { class: "num" }, "maybe live out"))),
    el("tbody", {}, sorted.map((r) => el("tr", {
      class: r.moduleName === state.module_name ? "current" : "",
      "data-module": r.moduleName,
      onclick: (e) => openModule(e, state, r.moduleName),
    },
    el("td", {}, el("a", { href: stateUrl(moduleState(state, r.moduleName)) }, r.moduleName),
      r.error ? el("div", { class: "mv-row-error" }, r.error) : null,
      r.peakHeapMib !== undefined ? el("div", { class: "mv-meter" }, el("span", { style: `width:${(100 * r.peakHeapMib / top).toFixed(1)}%` })) : null),
    mibCell(r.peakHeapMib), mibCell(r.peakUnpaddedHeapMib), mibCell(r.totalBufferAllocationMib),
    mibCell(r.entryComputationParametersMib), mibCell(r.maybeLiveOutMib)))));
}

// -- one module --------------------------------------------------------------------------

function renderModule(root, data, state, key) {
  fillProto3Defaults(data);
  const extras = data.profscope || {};
  root.replaceChild(header(state, { name: state.run }, data), root.firstChild);
  root.querySelector("#mv-space-slot").replaceChildren(spacePicker(data, state));
  if (!data.heapSizes || !data.heapSizes.length) {
    root.append(el("p", { class: "mv-note" },
      `Nothing of ${state.module_name} is allocated in memory space ${spaceName(data, state)}: its buffer assignment has no heap-simulator trace there. Pick another memory space.`));
    return;
  }
  const ctx = {
    key, root, data, extras,
    xs: heapX(data),
    buffers: bufferIndex(data),
    selected: state.buffer || "",
    op: null, // the hlo_op of the URL, resolved: see setOp()
    charts: {}, // chart id -> { baseShapes, outline(bufferId) -> shapes }: see highlight()
  };
  const atPeak = peakCounts(data);
  const card = el("aside", { class: "mv-aside" }, el("div", { id: "mv-card", class: "mv-card" }));
  const main = el("div", { class: "mv-main" },
    el("div", { id: "mv-op-slot" }),
    el("section", {}, el("h2", {}, "Overview"), overview(data, extras)),
    el("section", {},
      el("h2", {}, "Heap over program order"),
      el("p", { class: "mv-hint" }, "Heap size along the heap-simulator trace (program order, not time), long-lived buffers (arguments, outputs, constants) included as a constant base. Hover the line for the buffer each event allocates or frees; hover or click a buffer anywhere to shade its lifetime here."),
      el("div", { id: "mv-heap-chart", class: "mv-chart" })),
    el("section", {},
      el("h2", { id: "mv-peak-count", "data-large": atPeak.large, "data-small": atPeak.small ?? "" }, `Buffers live at the compiler heap peak (${atPeak.heading})`),
      el("p", { class: "mv-hint", id: "mv-peak-count-note" }, atPeak.sentence,
        " Click a bar to select its buffer (the link then points at it)."),
      barLegend(data),
      el("div", { class: "mv-bars" },
        barsBox("mv-bars-order", "in program order"),
        barsBox("mv-bars-size", "by size"),
        barsBox("mv-bars-padding", "by padding overhead"))),
    el("section", {},
      el("h2", {}, "Allocation timeline"),
      el("p", { class: "mv-hint" }, "Each rectangle is a buffer: where it sits in the allocation (offset) and from which event to which it lives. Drag to zoom, double-click to reset."),
      el("div", { id: "mv-timeline", class: "mv-chart tall" }),
      omittedNote(extras)),
    el("section", {},
      el("h2", {}, "Live for the whole program"),
      el("p", { class: "mv-hint" }, "Allocations never freed inside the program (arguments, outputs, constants, thread-local): they are the constant base of the heap chart."),
      el("div", { id: "mv-whole-program" }, wholeProgramTable(ctx))));
  root.append(el("div", { class: "mv-layout" }, main, card));
  current = ctx;
  setOp(ctx, state);
  plotHeap(ctx);
  plotBars(ctx, "mv-bars-order", data.maxHeap || [], "in order of allocation");
  plotBars(ctx, "mv-bars-size", data.maxHeapBySize || [...(data.maxHeap || [])].sort((a, b) => mib(b) - mib(a)), "largest first");
  plotPaddingBars(ctx);
  plotTimeline(ctx);
  showBuffer(ctx, ctx.selected);
}

// Proto3 JSON leaves out fields equal to their default: logical buffer 0, a span that
// starts at event 0, a block at offset 0, a peak at position 0 have no such key.
function fillProto3Defaults(data) {
  const zero = (o, ...keys) => { for (const k of keys) o[k] ??= 0; };
  if (data.heapSizes && data.heapSizes.length) zero(data, "peakHeapSizePosition", "peakHeapMib", "peakUnpaddedHeapMib");
  for (const o of [...(data.maxHeap || []), ...(data.maxHeapBySize || [])]) zero(o, "logicalBufferId", "logicalBufferSizeMib", "unpaddedShapeMib");
  for (const span of Object.values(data.logicalBufferSpans || {})) zero(span, "start", "limit");
  for (const b of data.bufferBlocks || []) zero(b, "logicalBufferId", "offset", "size", "startStep", "endStep", "unpaddedSize");
  for (const a of data.indefiniteLifetimes || []) {
    a.id ??= "0";
    zero(a, "sizeMib");
    for (const lb of a.logicalBuffers || []) { lb.id ??= "0"; zero(lb, "sizeMib"); }
  }
}

// What the bars count, said the same way wherever a count is shown: every buffer of
// 16 KiB or more live at the peak has a bar; the smaller ones share one striped "small"
// bar (XProf merges them; profscope's smallBuffersAtPeak says how many, plain XProf
// output does not). In memory space 0, an allocation live for the whole program
// (arguments, outputs, constants) shows as its largest buffer only.
function peakCounts(data) {
  const objects = data.maxHeap || [];
  const large = objects.filter((o) => !isSmall(o)).length;
  const smallBar = objects.find(isSmall);
  const known = (data.profscope || {}).smallBuffersAtPeak;
  const small = smallBar ? (typeof known === "number" ? known : null) : 0;
  const bigText = `${large.toLocaleString()} ${large === 1 ? "buffer" : "buffers"} of 16 KiB or more, one bar each`;
  const smallText = !smallBar ? "" : small === null ? `; smaller ones (${fmtMib(mib(smallBar))} in all) share the striped "small" bar`
    : `; ${small.toLocaleString()} smaller ${small === 1 ? "one" : "ones"} (${fmtMib(mib(smallBar))} in all) share the striped "small" bar`;
  const wholeProgram = String((data.profscope || {}).memorySpace ?? 0) === "0" && (data.indefiniteLifetimes || []).length
    ? " Each argument, output and constant allocation shows as its largest buffer." : "";
  return {
    large, small,
    heading: !smallBar ? `${large.toLocaleString()} of 16 KiB or more` : small === null ? `${large.toLocaleString()} of 16 KiB or more + small ones`
      : `${large.toLocaleString()} of 16 KiB or more + ${small.toLocaleString()} small`,
    sentence: `${bigText}${smallText}.${wholeProgram}`,
  };
}

// The bars' colours: the allocation type of each buffer (the small bar is striped).
function barLegend(data) {
  const groups = [...new Set((data.maxHeap || []).map(groupOf))];
  if (!groups.length) return null;
  const meaning = { Parameter: "entry computation parameter", Output: "maybe live out", Constant: "constant", Temporary: "temporary",
    "Thread-local": "thread-local", small: "buffers under 16 KiB, merged" };
  return el("div", { class: "mv-legend", id: "mv-bars-legend", "aria-label": "bar colours" },
    el("span", { class: "muted" }, "Colour: allocation type"),
    groups.map((g) => el("span", { class: "mv-legend-item", "data-group": g, title: meaning[g] || g },
      el("i", { class: `mv-swatch${g === "small" ? " striped" : ""}`, style: `background-color:${categoryColor(g)}` }), g)));
}

function barsBox(id, title) {
  return el("div", { class: "mv-bars-box" }, el("h3", {}, title), el("div", { id, class: "mv-chart short" }));
}

function spaceName(data, state) {
  const spaces = (data.profscope || {}).memorySpaces || [];
  const id = String((data.profscope || {}).memorySpace ?? state.memory_space ?? "0");
  const known = spaces.find((s) => String(s.id) === id);
  return known ? `${known.name} (${id})` : id || "0";
}

function spacePicker(data, state) {
  const extras = data.profscope || {};
  const value = String(extras.memorySpace ?? (state.memory_space || "0"));
  const spaces = (extras.memorySpaces || []).map((s) => ({ id: String(s.id), name: s.name, description: s.description }));
  if (!spaces.some((s) => s.id === value)) spaces.unshift({ id: value, name: value === "0" ? "default" : "" });
  const select = el("select", { id: "mv-space", "aria-label": "memory space",
    onchange: (e) => go({ ...readState(), memory_space: e.target.value === "0" ? "" : e.target.value, buffer: "" }) },
  spaces.map((s) => el("option", { value: s.id, title: s.description }, s.name ? `${s.id} · ${s.name}` : s.id)));
  select.value = value;
  select.disabled = spaces.length < 2;
  return el("label", { class: "mv-space" }, "Memory space ", select,
    spaces.length < 2 ? el("span", { class: "muted" }, " (the only one with buffers)") : null);
}

// -- overview --------------------------------------------------------------------------

// Totals in bytes: profscope's exact counts when sent, else derived from XProf's MiB
// fields (the same figures XProf's own page shows, to float precision).
function overviewFigures(data, extras) {
  const t = extras.totals || {};
  const has = (v) => typeof v === "number";
  const bytes = (name, mibValue) => (has(t[name]) ? t[name] : has(mibValue) ? mibValue * MIB : undefined);
  const peak = bytes("peakBytes", data.peakHeapMib);
  const unpadded = bytes("peakUnpaddedBytes", data.peakUnpaddedHeapMib);
  const total = bytes("totalAllocationBytes", data.totalBufferAllocationMib);
  const temporaries = bytes("temporaryAllocationBytes",
    has(data.totalBufferAllocationMib) && has(data.indefiniteBufferAllocationMib) ? data.totalBufferAllocationMib - data.indefiniteBufferAllocationMib : undefined);
  const padding = bytes("paddingBytes", has(peak) && has(unpadded) ? (peak - unpadded) / MIB : undefined);
  const paddingShare = has(t.paddingShare) ? t.paddingShare : has(padding) && peak ? padding / peak : undefined;
  // XProf's fragmentation %: allocation not live at peak, over the temporary allocation.
  const fragmentation = has(t.fragmentationPercent) ? t.fragmentationPercent
    : has(total) && has(peak) && temporaries ? 100 * (total - peak) / temporaries : undefined;
  return {
    peak, unpadded, total, temporaries, padding, paddingShare, fragmentation,
    args: bytes("argumentBytes", data.entryComputationParametersMib),
    outputs: bytes("outputBytes", data.maybeLiveOutMib),
  };
}

function overview(data, extras) {
  const f = overviewFigures(data, extras);
  const peakName = peakInstruction(data);
  const size = (bytes) => el("span", { title: exact(bytes) }, bytes === undefined ? "—" : fmtBytes(Math.round(bytes)));
  const tile = (label, value, note) => el("div", { class: "mv-tile" },
    el("div", { class: "label" }, label), el("div", { class: "value" }, value), note ? el("div", { class: "note" }, note) : null);
  return el("div", { id: "mv-overview" },
    // The number that decides an OOM first, in a sentence; the rest as tiles.
    el("div", { class: "mv-peak" },
      el("span", { class: "label" }, "Compiler heap peak "),
      el("strong", { class: "mv-peak-value", title: exact(f.peak) }, f.peak === undefined ? "—" : fmtBytes(Math.round(f.peak))),
      el("span", {}, " (unpadded ", size(f.unpadded), ")"),
      data.peakHeapSizePosition !== undefined ? el("span", { class: "muted" }, ` at event ${data.peakHeapSizePosition}`,
        peakName ? [" (", el("code", {}, peakName), ")"] : null) : null),
    el("div", { class: "mv-tiles" },
      tile("Total allocation", size(f.total), "incl. fragmentation"),
      tile("Arguments", size(f.args), "entry computation parameters"),
      tile("Outputs", size(f.outputs), "maybe live out"),
      tile("Temporaries", size(f.temporaries), "allocation for temporaries"),
      tile("Padding overhead", size(f.padding), f.paddingShare !== undefined ? `${pct(100 * f.paddingShare)} of the compiler heap peak` : "padded − unpadded peak"),
      tile("Fragmentation", f.fragmentation === undefined ? "—" : pct(f.fragmentation), "allocated but not live at the compiler heap peak")));
}

function peakInstruction(data) {
  const names = data.hloInstructionNames || [];
  const i = positionIndex(data, data.peakHeapSizePosition);
  return i >= 0 ? names[i] : "";
}

// -- the HLO op of the link (hlo_op) ---------------------------------------------------------

// The buffers an HLO instruction defines here: logical buffers are named after their
// instruction, plus "{i,j}" for a part of a tuple (tools/memory_viewer.py, _LB.name).
function opBuffers(ctx, op) {
  const mine = (name) => name === op || (name || "").startsWith(`${op}{`);
  return [...ctx.buffers.values()].filter((b) => mine(b.name)).sort((a, b) => (b.bytes || 0) - (a.bytes || 0));
}

// Resolve the URL's hlo_op: its buffers, the first heap-simulator event that allocates one
// (the start of its lifetime: a buffer's span starts at its ALLOC, or SHARE_WITH), and the
// buffer shown (the URL's buffer, else the op's largest).
function setOp(ctx, state) {
  const op = (state.hlo_op || "").trim();
  const buffers = op ? opBuffers(ctx, op) : [];
  const starts = buffers.map((b) => (b.span ? b.span.start : undefined)).filter((x) => x !== undefined);
  ctx.op = op ? { name: op, buffers, ids: buffers.map((b) => String(b.id)), allocatedAt: starts.length ? Math.min(...starts) : undefined } : null;
  ctx.selected = state.buffer || (buffers.length ? String(buffers[0].id) : "");
  const slot = ctx.root.querySelector("#mv-op-slot");
  if (slot) slot.replaceChildren(...(ctx.op ? [opNote(ctx)] : []));
}

function opNote(ctx) {
  const { op } = ctx;
  const clear = el("button", { type: "button", class: "mv-clear", onclick: () => go({ ...readState(), hlo_op: "", buffer: "" }) }, "clear");
  const state = readState();
  const where = `${state.module_name}, memory space ${spaceName(ctx.data, state)}`;
  if (!op.buffers.length) {
    const omitted = (ctx.extras.bufferBlocksOmitted || {}).count;
    return el("div", { class: "mv-op-note missing", id: "mv-op-note", role: "note", "data-op": op.name },
      "HLO op ", el("code", {}, op.name), ` defines no buffer in ${where}. `,
      omitted ? `It may own one of the ${omitted.toLocaleString()} smallest buffers this page leaves out, or ` : "It may ",
      "write into a buffer of another instruction, or live in another memory space.", clear);
  }
  const link = (b) => el("a", { href: stateUrl({ ...state, buffer: b.id }), class: "mv-buf", "data-buffer": b.id,
    onclick: (e) => { e.preventDefault(); go({ ...readState(), buffer: String(b.id) }); },
    onmouseenter: () => showBuffer(ctx, b.id, true), onmouseleave: () => showBuffer(ctx, ctx.selected) },
  `${b.name}${b.bytes !== undefined ? ` (${fmtBytes(Math.round(b.bytes))})` : ""}`);
  return el("div", { class: "mv-op-note", id: "mv-op-note", role: "note", "data-op": op.name, "data-allocated-at": op.allocatedAt ?? "" },
    "HLO op ", el("code", {}, op.name), ` defines ${op.buffers.length === 1 ? "one buffer" : `${op.buffers.length} buffers`} in ${where}: `,
    joinNodes(op.buffers.map(link)),
    op.allocatedAt !== undefined ? `; allocated at heap-simulator event ${op.allocatedAt}, marked on the heap chart.` : "; its lifetime is not recorded.",
    clear);
}

function opShapes(ctx) {
  const at = ctx.op && ctx.op.allocatedAt;
  if (at === undefined || at === null) return [];
  return [{ type: "line", name: "op-alloc", x0: at, x1: at, yref: "paper", y0: 0, y1: 1, line: { color: P.accent, width: 2 } }];
}

function opAnnotations(ctx) {
  const at = ctx.op && ctx.op.allocatedAt;
  if (at === undefined || at === null) return [];
  return [{ name: "op-alloc", x: at, xanchor: "left", y: 0.98, yref: "paper", yanchor: "top", showarrow: false, bgcolor: "rgba(255,255,255,0.85)",
    text: escapePlotly(`${ctx.op.name} allocated (event ${at})`), font: { size: 11, color: P.accent } }];
}

// -- heap line chart ---------------------------------------------------------------------

// x of each heap point: the converter may decimate big traces and say where each point is.
function heapX(data) {
  const positions = (data.profscope || {}).heapPositions;
  return positions && positions.length === data.heapSizes.length ? positions : data.heapSizes.map((_, i) => i);
}

function positionIndex(data, position) {
  if (position === undefined) return -1;
  const positions = (data.profscope || {}).heapPositions;
  return positions ? positions.indexOf(position) : position;
}

// What happened at heap point i, for its hover: the heap-simulator event there (the
// buffer it allocates, frees or shares, with the buffer's size), the instruction XLA was
// processing, and the heap before and after. Both lines (padded, unpadded) carry the same
// text: when they coincide either may win the hover, and either must say it all.
// heapSizes[i] is the heap *before* event i (tools/memory_viewer.py).
function pointHover(ctx, i) {
  const { data, xs } = ctx;
  const names = data.hloInstructionNames || [];
  const points = (data.profscope || {}).heapPoints;
  const before = data.heapSizes[i] * MIB;
  const unpadded = data.unpaddedHeapSizes ? data.unpaddedHeapSizes[i] * MIB : undefined;
  const code = (s) => escapePlotly(s);
  const lines = [];
  const instruction = names[i] || "";
  const last = i === data.heapSizes.length - 1 && (!points || !points.kind[i]);
  if (last) {
    lines.push(`after the last event (${xs[i] - 1})`);
  } else if (points && points.kind[i]) {
    const name = points.name[i] || (points.buffer[i] >= 0 ? `buffer #${points.buffer[i]}` : "");
    const verb = { alloc: "alloc", free: "free", share: "share" }[points.kind[i]];
    const size = points.bytes[i] ? ` (${fmtBytes(points.bytes[i])})` : "";
    lines.push(`event ${xs[i]}: ${verb} <b>${code(name)}</b>${size}`);
    // A FREE happens while XLA processes the buffer's last user: name it when it differs.
    if (instruction && instruction !== name.replace(/\{[^}]*\}$/, "")) lines.push(`at instruction ${code(instruction)}`);
    const change = points.heapChangeBytes[i];
    lines.push(`heap ${fmtBytes(Math.round(before))} → ${fmtBytes(Math.round(before + change))} (${change ? signedBytes(change) : "no change: the memory is shared"})`);
  } else {
    lines.push(`event ${xs[i]}${instruction ? `: <b>${code(instruction)}</b>` : ""}`);
    lines.push(`heap before this event ${fmtBytes(Math.round(before))}`);
  }
  if (last) lines.push(`heap ${fmtBytes(Math.round(before))}`);
  if (unpadded !== undefined) lines.push(`unpadded heap before the event ${fmtBytes(Math.round(unpadded))}`);
  return lines.join("<br>");
}

function plotHeap(ctx) {
  const { data, xs } = ctx;
  const hover = xs.map((_, i) => pointHover(ctx, i));
  const traces = [
    { name: "heap (padded)", x: xs, y: data.heapSizes, customdata: hover, mode: "lines", line: { color: "#2f6fdf", width: 2, shape: "hv" },
      hovertemplate: "%{customdata}<extra></extra>" },
  ];
  if (data.unpaddedHeapSizes && data.unpaddedHeapSizes.length === xs.length)
    traces.push({ name: "heap (unpadded)", x: xs, y: data.unpaddedHeapSizes, customdata: hover, mode: "lines",
      line: { color: "#59a14f", width: 1.5, dash: "dot", shape: "hv" }, hovertemplate: "%{customdata}<extra></extra>" });
  if (data.peakHeapMib !== undefined) {
    const peakName = peakInstruction(data);
    traces.push({ name: "compiler heap peak", x: [peakX(ctx)], y: [data.peakHeapMib], mode: "markers+text",
      marker: { color: P.bad, size: 10, symbol: "diamond" }, text: [`compiler heap peak ${fmtMib(data.peakHeapMib)}`], textposition: "top right",
      textfont: { color: P.bad }, cliponaxis: false,
      hovertemplate: `compiler heap peak ${fmtMib(data.peakHeapMib)}<br>after event ${data.peakHeapSizePosition}${peakName ? ` (${escapePlotly(peakName)})` : ""}<extra></extra>` });
  }
  const maxY = Math.max(...data.heapSizes, data.peakHeapMib || 0);
  const div = document.getElementById("mv-heap-chart");
  newPlot(div, traces, {
    height: 270, margin: { l: 70, r: 20, t: 28, b: 50 }, hovermode: "closest", hoverlabel: HOVER_CARD,
    xaxis: { title: { text: X_TITLE }, zeroline: false },
    yaxis: bytesAxis(maxY * MIB, MIB, { title: { text: "heap" }, rangemode: "tozero", range: [0, maxY * 1.15] }),
    legend: { orientation: "h", x: 1, xanchor: "right", y: 1, yanchor: "bottom" },
    shapes: peakShapes(ctx).concat(opShapes(ctx)), annotations: opAnnotations(ctx),
  });
  keepByteTicks(div, MIB);
}

// A zoom keeps binary-unit ticks: bytesAxis's ticks (0 to the top) are recomputed for
// the range on screen (Plotly's own would be SI: "7.00G").
function keepByteTicks(div, scale) {
  div.on("plotly_relayout", (ev) => {
    if (!Object.keys(ev).some((k) => k.startsWith("yaxis.range") || k === "yaxis.autorange")) return;
    const range = div.layout.yaxis.range;
    if (!range) return;
    const t = ticksIn(range[0] * scale, range[1] * scale);
    window.Plotly.relayout(div, { "yaxis.tickvals": t.tickvals.map((v) => v / scale), "yaxis.ticktext": t.ticktext });
  });
}

function ticksIn(lo, hi) {
  if (lo <= 0) return byteTicks(hi);
  const step = byteTicks(hi - lo).tickvals[1] || hi - lo;
  const vals = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi; v += step) vals.push(v);
  return { tickvals: vals, ticktext: vals.map((v) => fmtBytes(v)) };
}

// Where the line peaks. heapSizes[i] is the heap *before* event i, so the peak caused by
// event peakHeapSizePosition shows at the next point: mark the first maximum drawn.
function peakX(ctx) {
  const heap = ctx.data.heapSizes;
  let best = 0;
  for (let i = 1; i < heap.length; i++) if (heap[i] > heap[best]) best = i;
  return ctx.xs[best];
}

function peakShapes(ctx) {
  const x = peakX(ctx);
  return [{ type: "line", name: "peak", x0: x, x1: x, yref: "paper", y0: 0, y1: 1, line: { color: P.bad, width: 1, dash: "dot" } }];
}

// The buffer's lifetime as a shaded band on the heap chart (or the whole x range for
// buffers that live for the whole program).
function drawLifetime(ctx, info) {
  const div = document.getElementById("mv-heap-chart");
  if (!div || !div.layout) return;
  const shapes = peakShapes(ctx).concat(opShapes(ctx));
  const annotations = opAnnotations(ctx);
  const span = info && lifetime(ctx, info);
  if (span) {
    shapes.push({ type: "rect", name: "lifetime", layer: "below", x0: span.start, x1: span.limit, yref: "paper", y0: 0, y1: 1,
      fillcolor: "rgba(242, 142, 43, 0.22)", line: { color: "rgba(242, 142, 43, 0.9)", width: 1 } });
    // Label at the band's bottom left: the top is where the peak label sits.
    annotations.push({ x: span.start, xanchor: "left", y: 0.02, yref: "paper", yanchor: "bottom", showarrow: false, bgcolor: "rgba(255,255,255,0.85)",
      text: escapePlotly(`${info.name}: ${span.whole ? "whole program" : `events ${span.start}–${span.limit}`}`),
      font: { size: 11, color: "#8a4b0f" } });
  }
  const same = JSON.stringify(shapes) === JSON.stringify(div.layout.shapes || []) && JSON.stringify(annotations) === JSON.stringify(div.layout.annotations || []);
  if (!same) window.Plotly.relayout(div, { shapes, annotations });
}

function lifetime(ctx, info) {
  if (info.span) return { start: info.span.start, limit: info.span.limit };
  if (info.wholeProgram) return { start: ctx.xs[0], limit: ctx.xs[ctx.xs.length - 1], whole: true };
  return null;
}

// -- bar charts of the buffers at peak ---------------------------------------------------

function plotBars(ctx, id, objects, xTitle, valueOf = mib, yTitle = "size") {
  const ids = objects.map(bufferId);
  const values = objects.map(valueOf);
  // The hover: name, the bar's value in binary units, and the allocation type (the colour).
  const labels = objects.map((o, i) => `${escapePlotly(o.instructionName || o.label || "")}<br>${fmtMib(values[i])}${yTitle === "size" ? "" : ` ${yTitle}`} · ${groupOf(o)}`);
  newPlot(id, [{
    type: "bar", x: objects.map((_, i) => i), y: values, width: 0.85, customdata: ids, text: labels,
    marker: { color: objects.map((o) => categoryColor(groupOf(o))),
      pattern: { shape: objects.map((o) => (isSmall(o) ? "/" : "")), fgcolor: "#8d8580", size: 6 } },
    hovertemplate: "%{text}<extra></extra>", textposition: "none",
  }], {
    height: 230, margin: { l: 64, r: 8, t: 6, b: 30 }, bargap: 0.15, hovermode: "closest",
    xaxis: { title: { text: xTitle }, showticklabels: false, zeroline: false },
    yaxis: bytesAxis(Math.max(0, ...values) * MIB, MIB, { title: { text: yTitle }, rangemode: "tozero" }),
  });
  ctx.charts[id] = { baseShapes: [], outline: (buffer) => {
    const i = ids.indexOf(buffer);
    return i < 0 ? [] : [{ type: "rect", x0: i - 0.45, x1: i + 0.45, y0: 0, y1: values[i], line: { color: "#1d2330", width: 2 } }];
  } };
  wireBufferEvents(ctx, id);
}

function plotPaddingBars(ctx) {
  const objects = [...(ctx.data.maxHeap || [])].filter((o) => !isSmall(o));
  const padOf = (o) => mib(o) - o.unpaddedShapeMib;
  const padded = objects.filter((o) => padOf(o) > 0).sort((a, b) => padOf(b) - padOf(a) || mib(b) - mib(a));
  const box = document.getElementById("mv-bars-padding");
  if (!padded.length) {
    // An empty chart reads like a bug; say what it means instead.
    box.classList.add("empty");
    const n = peakCounts(ctx.data).large;
    box.append(el("p", { class: "muted", id: "mv-no-padding", "data-large": n },
      `No padding: none of the ${n.toLocaleString()} ${n === 1 ? "buffer" : "buffers"} of 16 KiB or more at the compiler heap peak is padded; each uses exactly its default-layout size.`));
    return;
  }
  plotBars(ctx, "mv-bars-padding", padded, "most padding first", padOf, "padding");
}

// -- allocation timeline -----------------------------------------------------------------

function plotTimeline(ctx) {
  const blocks = ctx.data.bufferBlocks || [];
  const drawn = blocks.filter((b) => b.logicalBufferId >= 0);
  const box = document.getElementById("mv-timeline");
  if (!drawn.length) {
    box.classList.add("empty");
    box.append(el("p", { class: "muted" }, "No buffer blocks recorded for this memory space."));
    return;
  }
  // Every block is a rectangle: x from its first to its last event, y from offset to
  // offset + size. Big modules have tens of thousands: as SVG each zoom step would take
  // seconds, so the blocks are painted on a canvas for the visible range and shown as a
  // layout image; Plotly keeps the axes, zoom and pan. Hover and click hit-test the blocks.
  const rects = drawn.map(blockRect);
  const xMax = Math.max(...rects.map((r) => r.x1)), yMax = Math.max(...rects.map((r) => r.y1));
  const wholes = blocks.filter((b) => b.logicalBufferId < 0);
  const extent = { type: "scatter", mode: "markers", x: [0, xMax], y: [0, Math.max(yMax, ...wholes.map((b) => blockRect(b).y1))],
    marker: { opacity: 0 }, hoverinfo: "skip", showlegend: false }; // lets autorange and double-click reset know the extent
  const categories = [...new Set(drawn.map((b) => b.category || "Temporary"))];
  const legend = categories.map((cat) => ({ type: "scatter", mode: "markers", x: [null], y: [null], name: cat, hoverinfo: "skip",
    marker: { symbol: "square", size: 11, color: categoryColor(cat) } }));
  // Blocks without a buffer id stand for a whole allocation (XProf adds one for the
  // temporaries): drawn as its outline, so the buffers are seen inside it.
  const baseShapes = wholes.map((b) => ({ type: "rect", ...blockRect(b), line: { color: "#9aa1ad", width: 1, dash: "dash" } }));
  const annotations = wholes.map((b) => ({ x: blockRect(b).x0, y: blockRect(b).y1, xanchor: "left", yanchor: "bottom", showarrow: false,
    text: escapePlotly(`${b.name || "allocation"}: ${fmtBytes(b.size)}`), font: { size: 11, color: P.muted } }));
  newPlot(box, [extent, ...legend], {
    height: 420, margin: { l: 60, r: 20, t: 28, b: 50 }, hovermode: false, dragmode: "zoom",
    xaxis: { title: { text: X_TITLE }, zeroline: false },
    yaxis: bytesAxis(extent.y[1] * MIB, MIB, { title: { text: "offset in the allocation" }, rangemode: "tozero" }),
    legend: { orientation: "h", x: 1, xanchor: "right", y: 1.08 }, showlegend: true, shapes: baseShapes, annotations,
  });
  const paint = () => window.Plotly.relayout(box, { images: [paintBlocks(box, drawn, rects)] });
  paint();
  box.on("plotly_relayout", (ev) => {
    // Repaint when the visible range or the size changed, not for our own image or shapes.
    if (Object.keys(ev).some((k) => /^([xy]axis\.(range|autorange)|autosize|width|height)/.test(k))) paint();
  });
  keepByteTicks(box, MIB);
  const byId = new Map(drawn.map((b) => [String(b.logicalBufferId), b]));
  ctx.charts["mv-timeline"] = { baseShapes, outline: (id) => (byId.has(id) ? [{ type: "rect", ...blockRect(byId.get(id)), line: { color: "#1d2330", width: 2 } }] : []) };
  wireTimelineEvents(ctx, box, drawn);
}

// The blocks inside the current axis ranges, painted at the plot area's pixel size.
function paintBlocks(div, blocks, rects) {
  const area = div.querySelector(".nsewdrag");
  const w = Number(area.getAttribute("width")), h = Number(area.getAttribute("height"));
  const [x0, x1] = div.layout.xaxis.range, [y0, y1] = div.layout.yaxis.range;
  const ratio = window.devicePixelRatio || 1;
  const canvas = document.createElement("canvas");
  canvas.width = Math.max(1, Math.round(w * ratio));
  canvas.height = Math.max(1, Math.round(h * ratio));
  const g = canvas.getContext("2d");
  g.scale(ratio, ratio);
  const sx = w / (x1 - x0), sy = h / (y1 - y0);
  g.strokeStyle = "#ffffff";
  g.lineWidth = 0.6;
  blocks.forEach((b, i) => {
    const r = rects[i];
    if (r.x1 < x0 || r.x0 > x1 || r.y1 < y0 || r.y0 > y1) return;
    // At least one pixel each way: a block too small to see would otherwise vanish.
    const px = (r.x0 - x0) * sx, pw = Math.max((r.x1 - r.x0) * sx, 1);
    const ph = Math.max((r.y1 - r.y0) * sy, 1), py = h - (r.y1 - y0) * sy;
    g.fillStyle = shade(categoryColor(b.category || "Temporary"), b.logicalBufferId % 3);
    g.fillRect(px, py, pw, ph);
    if (pw > 4 && ph > 4) g.strokeRect(px, py, pw, ph);
  });
  return { source: canvas.toDataURL("image/png"), xref: "x", yref: "y", x: x0, y: y1, sizex: x1 - x0, sizey: y1 - y0,
    sizing: "stretch", xanchor: "left", yanchor: "top", layer: "below" };
}

function blockRect(b) {
  return { x0: b.startStep, x1: stepEnd(b), y0: b.offset / MIB, y1: (b.offset + b.size) / MIB };
}

// The block under the mouse, from the axis ranges and the plot area on screen.
function blockAt(div, blocks, event) {
  const area = div.querySelector(".nsewdrag");
  const { xaxis, yaxis } = div.layout;
  if (!area || !xaxis.range || !yaxis.range) return null;
  const box = area.getBoundingClientRect();
  const fx = (event.clientX - box.left) / box.width, fy = 1 - (event.clientY - box.top) / box.height;
  if (fx < 0 || fx > 1 || fy < 0 || fy > 1) return null;
  const x = xaxis.range[0] + fx * (xaxis.range[1] - xaxis.range[0]);
  const y = yaxis.range[0] + fy * (yaxis.range[1] - yaxis.range[0]);
  let hit = null;
  for (const b of blocks) {
    const r = blockRect(b);
    if (x >= r.x0 && x <= r.x1 && y >= r.y0 && y <= r.y1 && (!hit || b.size < hit.size)) hit = b;
  }
  return hit;
}

function wireTimelineEvents(ctx, div, blocks) {
  let shown = "", down = null, frame = 0;
  div.addEventListener("mousemove", (e) => {
    if (frame) return; // one hit test per animation frame is plenty
    frame = requestAnimationFrame(() => {
      frame = 0;
      if (current !== ctx) return;
      const b = blockAt(div, blocks, e);
      const id = b ? String(b.logicalBufferId) : "";
      if (id === shown) return;
      shown = id;
      showBuffer(ctx, id || ctx.selected, Boolean(id));
    });
  });
  div.addEventListener("mouseleave", () => {
    if (shown && current === ctx) showBuffer(ctx, ctx.selected);
    shown = "";
  });
  // A click selects; a drag (zoom, pan) does not.
  div.addEventListener("mousedown", (e) => { down = [e.clientX, e.clientY]; });
  div.addEventListener("click", (e) => {
    if (!down || Math.hypot(e.clientX - down[0], e.clientY - down[1]) > 4 || current !== ctx) return;
    const b = blockAt(div, blocks, e);
    if (b) selectBuffer(String(b.logicalBufferId));
  });
}

function stepEnd(b) {
  // A buffer allocated and freed at the same event would be invisible: give it one step.
  return Math.max(b.endStep, b.startStep + 1);
}

function omittedNote(extras) {
  const o = extras.bufferBlocksOmitted;
  if (!o || !o.count) return null;
  return el("p", { class: "mv-note", id: "mv-omitted" },
    `${o.count.toLocaleString()} more blocks not drawn (${fmtMib(o.mib)}): too small to see at this scale. Their memory is still in every number and in the heap chart.`);
}

// -- whole-program buffers ---------------------------------------------------------------

// Allocations that live for the whole program, largest first: profscope's list when sent
// (one row per allocation with its largest buffer, plus buffers never freed), else built
// from XProf's indefiniteLifetimes. Each row also lists the other buffers sharing it.
function wholeProgramRows(ctx) {
  const xprof = ctx.data.indefiniteLifetimes || [];
  const sharing = new Map(); // logical buffer id -> every buffer of its allocation
  for (const a of xprof) {
    const buffers = (a.logicalBuffers || []).map((b) => ({ id: String(b.id), name: b.hloName || "", shape: b.shape || "" }));
    for (const b of buffers) sharing.set(b.id, buffers);
  }
  const ours = ctx.extras.wholeProgramBuffers;
  const rows = Array.isArray(ours) ? ours.map((r) => ({
    kind: r.kind || "", allocation: r.allocationIndex ?? 0, bytes: r.sizeBytes || 0, tfOpName: r.tfOpName || "",
    buffer: { id: String(r.logicalBufferId ?? 0), name: r.name || "", shape: r.shape || "" },
  })) : xprof.map((a) => {
    const buffers = (a.logicalBuffers || []).map((b) => ({ id: String(b.id), name: b.hloName || "", shape: b.shape || "", mib: b.sizeMib || 0 }));
    const largest = buffers.reduce((x, y) => (y.mib > x.mib ? y : x), buffers[0] || { id: "", name: "", shape: "" });
    return { kind: (a.attributes || []).filter((x) => x !== "reusable").join(", "), allocation: a.id, bytes: (a.sizeMib || 0) * MIB, tfOpName: "", buffer: largest };
  });
  for (const r of rows) r.others = (sharing.get(r.buffer.id) || []).filter((b) => b.id !== r.buffer.id);
  return rows.sort((a, b) => b.bytes - a.bytes);
}

function wholeProgramTable(ctx) {
  const rows = wholeProgramRows(ctx);
  if (!rows.length) return el("p", { class: "muted" }, "No allocation lives for the whole program in this memory space.");
  const total = rows.reduce((s, r) => s + r.bytes, 0);
  const shown = rows.slice(0, 500);
  const bufferLink = (b) => el("a", { href: stateUrl({ ...readState(), buffer: b.id }), class: "mv-buf", "data-buffer": b.id,
    onclick: (e) => { e.preventDefault(); selectBuffer(b.id); },
    onmouseenter: () => showBuffer(ctx, b.id, true), onmouseleave: () => showBuffer(ctx, ctx.selected) }, b.name || `#${b.id}`);
  return el("div", {},
    el("p", {}, `${rows.length} ${rows.length === 1 ? "entry" : "entries"}, ${fmtBytes(Math.round(total))} in all.`),
    el("div", { class: "mv-scroll" }, el("table", { class: "mv-table" },
      el("thead", {}, el("tr", {}, el("th", {}, "kind"), el("th", { class: "num" }, "size"), el("th", {}, "buffer and framework op"), el("th", {}, "shape"),
        el("th", { class: "num" }, "allocation"))),
      el("tbody", {}, shown.map((r) => el("tr", {},
        el("td", { class: "nowrap" }, r.kind ? el("span", { class: "mv-chip" }, r.kind) : ""),
        el("td", { class: "num", title: exact(r.bytes) }, fmtBytes(Math.round(r.bytes))),
        el("td", {}, bufferLink(r.buffer), r.tfOpName ? el("div", { class: "mv-op" }, r.tfOpName) : null, r.others.length
          ? el("details", { class: "mv-others" }, el("summary", {}, `shares its allocation with ${r.others.length} more`), joinNodes(r.others.map(bufferLink)))
          : null),
        el("td", {}, el("code", {}, r.buffer.shape)),
        el("td", { class: "num" }, r.allocation)))))),
    rows.length > shown.length ? el("p", { class: "muted" }, `${rows.length - shown.length} smaller entries not listed.`) : null);
}

function joinNodes(nodes) {
  return nodes.flatMap((n, i) => (i ? [", ", n] : [n]));
}

// -- buffers: index, card, selection -------------------------------------------------------

// Everything known about each logical buffer, merged from the views that mention it.
function bufferIndex(data) {
  const index = new Map();
  const get = (id) => {
    if (!index.has(id)) index.set(id, { id });
    return index.get(id);
  };
  const spans = data.logicalBufferSpans || {};
  for (const o of [...(data.maxHeap || []), ...(data.maxHeapBySize || [])]) {
    if (isSmall(o)) continue;
    const b = get(bufferId(o));
    Object.assign(b, {
      name: o.instructionName || b.name, bytes: mib(o) * MIB, unpaddedBytes: o.unpaddedShapeMib * MIB,
      shape: o.shapeString || b.shape, tfOpName: o.tfOpName || b.tfOpName, groupName: o.groupName || b.groupName,
      opCode: o.opCode || b.opCode, sourceInfo: o.sourceInfo || b.sourceInfo, atPeak: true,
    });
  }
  for (const blk of data.bufferBlocks || []) {
    if (blk.logicalBufferId < 0) continue;
    const b = get(String(blk.logicalBufferId));
    b.name = b.name || blk.name;
    b.bytes = b.bytes ?? blk.size;
    b.unpaddedBytes = b.unpaddedBytes ?? blk.unpaddedSize;
    b.shape = b.shape || blk.shapeString;
    b.tfOpName = b.tfOpName || blk.tfOpName;
    b.groupName = b.groupName || blk.category;
    b.sourceInfo = b.sourceInfo || blk.sourceInfo;
    b.offset = blk.offset || 0;
  }
  for (const alloc of data.indefiniteLifetimes || []) {
    for (const lb of alloc.logicalBuffers || []) {
      const b = get(String(lb.id));
      b.name = b.name || lb.hloName;
      b.bytes = b.bytes ?? (lb.sizeMib || 0) * MIB;
      b.shape = b.shape || lb.shape;
      b.wholeProgram = true;
      b.attributes = alloc.attributes || [];
    }
  }
  for (const r of (data.profscope || {}).wholeProgramBuffers || []) {
    const b = get(String(r.logicalBufferId ?? 0));
    b.name = b.name || r.name;
    b.bytes = b.bytes ?? r.sizeBytes;
    b.shape = b.shape || r.shape;
    b.tfOpName = b.tfOpName || r.tfOpName;
    b.wholeProgram = true;
    b.kind = r.kind;
  }
  for (const [id, span] of Object.entries(spans)) get(String(id)).span = span;
  return index;
}

function showBuffer(ctx, id, hovering = false) {
  const card = document.getElementById("mv-card");
  if (!card) return;
  const info = id ? ctx.buffers.get(String(id)) : null;
  drawLifetime(ctx, info);
  highlight(ctx, id);
  card.classList.toggle("selected", Boolean(id) && !hovering && id === ctx.selected);
  if (!id) {
    card.replaceChildren(el("div", { class: "mv-card-empty" },
      el("strong", {}, "Buffer details"),
      el("p", {}, "Hover a bar or a block to see a buffer: its instruction, sizes, shape, framework op, allocation type and source line, with its lifetime shaded on the heap chart."),
      el("p", {}, "Click to select it; the selection is kept in the link.")));
    return;
  }
  if (!info) {
    card.replaceChildren(el("strong", {}, `Buffer ${id}`),
      el("p", { class: "mv-note" }, `No buffer with id ${id} in this module and memory space.`), clearButton(ctx));
    return;
  }
  card.replaceChildren(bufferCard(ctx, info, !hovering && id === ctx.selected));
}

function bufferCard(ctx, info, selected) {
  const rows = [];
  const row = (k, v) => { if (v !== undefined && v !== null && v !== "") rows.push(el("dt", {}, k), el("dd", {}, v)); };
  const pad = info.bytes !== undefined && info.unpaddedBytes !== undefined ? info.bytes - info.unpaddedBytes : undefined;
  row("size (padded)", info.bytes !== undefined ? sizeNode(info.bytes) : undefined);
  row("size (unpadded)", info.unpaddedBytes !== undefined ? sizeNode(info.unpaddedBytes) : undefined);
  if (pad > 0) row("padding", `${fmtBytes(Math.round(pad))} (${pct(100 * pad / info.bytes)})`);
  row("shape", info.shape ? el("code", {}, info.shape) : undefined);
  row("framework op", info.tfOpName ? el("code", {}, info.tfOpName) : undefined);
  row("allocation type", info.groupName ? el("span", {}, el("i", { class: "mv-swatch", style: `background:${categoryColor(info.groupName)}` }), info.groupName) : undefined);
  row("op code", info.opCode);
  const src = info.sourceInfo;
  if (src && src.fileName) {
    row("source", el("code", { class: "mv-src" }, `${src.fileName}${src.lineNumber ? `:${src.lineNumber}` : ""}`));
    if (src.stackFrame) row("stack", el("details", {}, el("summary", {}, `${src.stackFrame.split("\n").length} frames`), el("pre", {}, src.stackFrame)));
  }
  const span = lifetime(ctx, info);
  row("lifetime", span ? (span.whole ? "the whole program" : `events ${span.start}–${span.limit} (${span.limit - span.start} events)`) : "not recorded");
  if (info.wholeProgram) row("lives because", info.kind || (info.attributes || []).filter((x) => x !== "reusable").join(", "));
  row("live at peak", info.atPeak ? "yes" : "no");
  row("logical buffer", `#${info.id}`);
  return el("div", {},
    el("div", { class: "mv-card-head" },
      el("span", { class: "mv-card-kind" }, selected ? "selected buffer" : "buffer"),
      selected ? clearButton(ctx) : null),
    el("div", { class: "mv-card-name" }, info.name || `#${info.id}`),
    el("dl", {}, rows),
    instructionPart(ctx, info, selected));
}

// The buffer's defining instruction (hlo_panel.js): the whole panel when the buffer is
// pinned; on a hover, its HLO line and links once they have loaded (cached per instruction).
function instructionPart(ctx, info, selected) {
  const instr = instructionOf(info.name);
  if (!instr || ctx.data.textOnly) return null;
  const state = readState();
  if (selected) return instructionPanel(state, instr, { idPrefix: "mv" });
  const box = el("div", { class: "hp", id: "mv-panel" });
  loadInstruction(state, instr).then((d) => {
    if (box.isConnected) box.replaceChildren(...instructionSections(state, d, { compact: true }));
  }, () => box.remove());
  return box;
}

function sizeNode(bytes) {
  return el("span", { title: exact(bytes) }, fmtBytes(Math.round(bytes)));
}

function clearButton(ctx) {
  return el("button", { type: "button", class: "mv-clear", onclick: () => selectBuffer("") }, "clear");
}

// Picking a buffer (or clearing) ends the hlo_op view that a link may have opened.
function selectBuffer(id) {
  go({ ...readState(), buffer: id ? String(id) : "", hlo_op: "" });
}

// Outline the shown buffer in every chart that draws it: a shape, so that a redraw
// costs the same whatever the number of bars or blocks.
function highlight(ctx, id) {
  for (const [chartId, chart] of Object.entries(ctx.charts)) {
    const div = document.getElementById(chartId);
    if (!div || !div.layout) continue;
    const ids = new Set([...(ctx.op ? ctx.op.ids : []), ...(id ? [String(id)] : [])]);
    const shapes = chart.baseShapes.concat([...ids].flatMap((b) => chart.outline(b)));
    if (JSON.stringify(shapes) !== JSON.stringify(div.layout.shapes || [])) window.Plotly.relayout(div, { shapes });
  }
}

function wireBufferEvents(ctx, chartId) {
  const div = document.getElementById(chartId);
  const idOf = (ev) => {
    const p = ev && ev.points && ev.points[0];
    return p && p.customdata !== undefined ? String(p.customdata) : "";
  };
  div.on("plotly_hover", (ev) => {
    if (current !== ctx) return;
    const id = idOf(ev);
    if (id === SMALL_ID) return showSmall(ctx);
    if (id) showBuffer(ctx, id, true);
  });
  div.on("plotly_unhover", () => { if (current === ctx) showBuffer(ctx, ctx.selected); });
  div.on("plotly_click", (ev) => {
    if (current !== ctx) return;
    const id = idOf(ev);
    if (id && id !== SMALL_ID) selectBuffer(id);
  });
}

const SMALL_ID = "small";

function showSmall(ctx) {
  const small = (ctx.data.maxHeap || []).find(isSmall);
  drawLifetime(ctx, null);
  document.getElementById("mv-card").replaceChildren(el("div", {},
    el("div", { class: "mv-card-head" }, el("span", { class: "mv-card-kind" }, "merged small buffers")),
    el("div", { class: "mv-card-name" }, small ? small.label : "small buffers"),
    el("p", {}, `${small ? fmtMib(mib(small)) : "Some memory"} in buffers under 16 KiB each, merged into one bar because they are too small to tell apart.`)));
}

// -- text-only dumps (no *.hlo.pb) ------------------------------------------------------------

function renderTextOnly(root, data, state) {
  const t = data.totals || {};
  const tile = (label, bytes) => el("div", { class: "mv-tile" }, el("div", { class: "label" }, label),
    el("div", { class: "value", title: exact(bytes) }, bytes === undefined ? "—" : fmtBytes(bytes)));
  const count = (label, n) => el("div", { class: "mv-tile" }, el("div", { class: "label" }, label), el("div", { class: "value" }, n === undefined ? "—" : n.toLocaleString()));
  root.append(...[ // append() writes a null as "null": the optional sections are dropped
    el("div", { class: "mv-note strong", id: "mv-text-only-note", role: "note" },
      el("strong", {}, "Buffer assignment text only. "), data.note ||
        "Without the module's .hlo.pb there is no heap-simulator trace: no peak, no heap chart, no lifetimes. Dump with --xla_dump_hlo_as_proto to get them."),
    el("section", {}, el("h2", {}, "Totals"),
      el("div", { id: "mv-overview" }, el("div", { class: "mv-tiles" },
        tile("Total allocation", t.totalBufferAllocationBytes), tile("Parameters", t.parameterBytes), tile("Outputs", t.outputBytes),
        tile("Temporaries", t.temporaryBytes), tile("Constants", t.constantBytes), tile("Thread-local", t.threadLocalBytes),
        count("Allocations", t.allocationCount), count("Values", t.valueCount)))),
    liveRangeSection(data.liveRange),
    el("section", {}, el("h2", {}, "Allocations"), allocationTable(data.allocations || [])),
    usageReport(data.memoryUsageReport),
    data.sources ? el("p", { class: "muted" }, "Read from: ",
      joinNodes(Object.values(data.sources).filter(Boolean).map((name) => el("code", {}, String(name))))) : null].filter((x) => x !== null));
}

// A text-only module with XLA's live ranges (tools/memory_viewer_text.py live_range_heap):
// the heap over program order and its peak, the logical buffers live at each schedule
// time before buffer reuse. The tool computes it; the page draws it once it is attached.
function liveRangeSection(lr) {
  if (!lr || !lr.peakBytes) return null;
  const div = el("div", { id: "mv-live-heap" });
  const xs = lr.heapSizes.map((_, i) => i);
  const draw = () => newPlot(div, [
    { name: "live values", x: xs, y: lr.heapSizes, mode: "lines", line: { color: "#4e79a7", width: 2, shape: "hv" },
      customdata: xs.map((i) => `time ${i}${lr.instructionSequence[i] ? ` (${escapePlotly(lr.instructionSequence[i])})` : ""}: ${fmtBytes(lr.heapSizes[i])}`),
      hovertemplate: "%{customdata}<extra></extra>" },
    { name: "peak", x: [lr.peakTime], y: [lr.peakBytes], mode: "markers+text", marker: { color: P.bad, size: 10, symbol: "diamond" },
      text: [`peak ${fmtBytes(lr.peakBytes)}`], textposition: "top right", textfont: { color: P.bad }, cliponaxis: false,
      hovertemplate: `peak ${fmtBytes(lr.peakBytes)} at time ${lr.peakTime}<extra></extra>` }],
  { height: 260, margin: { l: 70, r: 20, t: 28, b: 50 }, hovermode: "closest", hoverlabel: HOVER_CARD,
    xaxis: { title: { text: "schedule time (XLA's HloLiveRange)" }, zeroline: false },
    yaxis: bytesAxis(lr.peakBytes, 1, { title: { text: "live values" }, rangemode: "tozero", range: [0, lr.peakBytes * 1.15] }),
    legend: { orientation: "h", x: 1, xanchor: "right", y: 1, yanchor: "bottom" } });
  requestAnimationFrame(() => { if (div.isConnected) draw(); });
  return el("section", { id: "mv-live-range" }, el("h2", {}, "Heap over program order (live ranges)"),
    el("div", { class: "mv-tiles" },
      el("div", { class: "mv-tile", id: "mv-live-peak" }, el("div", { class: "label" }, "peak of live values"),
        el("div", { class: "value", title: exact(lr.peakBytes) }, fmtBytes(lr.peakBytes))),
      el("div", { class: "mv-tile" }, el("div", { class: "label" }, "at schedule time"),
        el("div", { class: "value" }, `${lr.peakTime}${lr.peakInstruction ? ` · ${lr.peakInstruction}` : ""}`)),
      el("div", { class: "mv-tile" }, el("div", { class: "label" }, "values live at the peak"),
        el("div", { class: "value" }, String(lr.peakValues.length)))),
    el("p", { class: "muted" }, `Read from ${lr.source || "the live ranges"}: ${lr.rule}. XLA's own "Live ranges at ${lr.xlaPeakTime} (peak)" block sums ${fmtBytes(lr.xlaPeakBytes)}: XLA picks its moment counting a time's new values before it drops those that ended just before.`),
    div);
}

// XLA's memory usage report, as the converter parsed it: per memory space, its total and
// allocations; the parsed form stays one click away for whoever needs the details.
function usageReport(report) {
  if (!report) return null;
  const spaces = report.memorySpaces || [];
  return el("section", {}, el("h2", {}, "XLA's memory usage report"),
    spaces.length ? el("ul", {}, spaces.map((sp) => el("li", {},
      `memory space ${sp.name ?? ""} (${sp.color ?? 0}): `, el("strong", {}, fmtBytes(sp.totalBytes)),
      ` in ${(sp.allocations || []).length} allocations`))) : null,
    el("details", { class: "mv-report" }, el("summary", {}, "parsed report"), el("pre", {}, JSON.stringify(report, null, 1))));
}

// A sortable, filterable table; each row expands to the values that share the allocation.
function allocationTable(allocations) {
  const columns = [
    { key: "index", label: "#", num: true, value: (a) => a.index },
    { key: "sizeBytes", label: "size", num: true, value: (a) => a.sizeBytes, show: (a) => fmtBytes(a.sizeBytes) },
    { key: "category", label: "category", nowrap: true, value: (a) => a.category || "", show: (a) => el("span", {}, el("i", { class: "mv-swatch", style: `background:${categoryColor(a.category)}` }), a.category || "") },
    { key: "attributes", label: "attributes", value: (a) => [].concat(a.attributes || []).join(", "), show: (a) => [].concat(a.attributes || []).map((x) => el("span", { class: "mv-chip" }, x)) },
    { key: "values", label: "values", num: true, value: (a) => (a.values || []).length },
    { key: "main", label: "largest value", value: (a) => largestValue(a).name || "", show: (a) => { const v = largestValue(a); return v.name ? el("span", {}, el("code", {}, v.name), " ", el("span", { class: "muted" }, v.shape || "")) : ""; } },
  ];
  // Memory space ("color" in XLA's text): a column only when there is more than one.
  if (new Set(allocations.map((a) => a.color ?? 0)).size > 1)
    columns.splice(3, 0, { key: "color", label: "memory space", num: true, value: (a) => a.color ?? 0 });
  return sortableTable({
    id: "mv-allocations", prefix: "mv", tableClass: "mv-table", rows: allocations, columns, sortKey: "sizeBytes", wrap: false, limit: 500,
    text: (a) => [a.category, [].concat(a.attributes || []).join(" "), ...(a.values || []).flatMap((v) => [v.name, v.shape])].join(" "),
    filter: { id: "mv-alloc-filter", placeholder: "filter by name, shape, category…", label: "filter allocations" },
    count: { text: (matched, total, drawn) => `${matched} of ${total} allocations` + (drawn < matched ? ` (first ${drawn} shown: refine the filter)` : "") },
    rowClass: () => "mv-alloc",
    expand: { has: (a) => (a.values || []).length > 0, row: valuesRow, toggleClass: "mv-toggle", attrs: (a) => ({ "data-index": a.index }) },
  }).node;
}

function largestValue(a) {
  return (a.values || []).reduce((best, v) => ((v.sizeBytes || 0) > (best.sizeBytes || 0) ? v : best), {});
}

function valuesRow(a, span) {
  return el("tr", { class: "mv-values" }, el("td", { colspan: span },
    el("table", { class: "mv-subtable" },
      el("thead", {}, el("tr", {}, el("th", {}, "value"), el("th", {}, "name"), el("th", {}, "shape index"), el("th", {}, "shape"),
        el("th", { class: "num" }, "offset"), el("th", { class: "num" }, "size"))),
      el("tbody", {}, (a.values || []).map((v) => el("tr", {},
        el("td", {}, v.id), el("td", {}, el("code", {}, v.name || "")), el("td", {}, v.shapeIndex || ""), el("td", {}, el("code", {}, v.shape || "")),
        el("td", { class: "num" }, (v.offset ?? "").toLocaleString()), el("td", { class: "num" }, fmtBytes(v.sizeBytes))))))));
}

// -- small helpers -----------------------------------------------------------------------

function mib(o) { return o.logicalBufferSizeMib || 0; }
function isSmall(o) { return o.logicalBufferId < 0; } // XProf's merged "small (<16384 bytes)" entry
function bufferId(o) { return isSmall(o) ? SMALL_ID : String(o.logicalBufferId); }
function groupOf(o) { return isSmall(o) ? "small" : o.groupName || "Temporary"; }

export default {
  tool: "memory_viewer",
  css: ["pages/memory_viewer.css", "pages/memory_viewer_compare.css"],
  keys: {
    ...COMPARE_KEYS, // the compare view's base (docs/compare.md "The query"): another module, run or host
    memory_space: { resetOn: ["run"] },
    buffer: { resetOn: ["run", "module_name", "memory_space"] },
    hlo_op: { resetOn: ["run", "module_name", "memory_space"] },
    view: { resetOn: ["run", "tool", "module_name", "host"] }, // "hlo": the module's HLO text (hlo_view.js)
    instr: { resetOn: ["run", "tool", "module_name", "host"] },
    hq: { resetOn: ["run", "tool", "module_name", "host"] },
    hops: { resetOn: ["run", "tool", "module_name", "host"] }, // the instruction panel's neighbourhood (hlo_panel.js)
  },
  render: renderMemoryViewer,
};
