// Memory viewer, compare view: one module's compiler heap peak against a base module's
// (another module, run or host: URL keys base, base_module, base_host; issue 36,
// docs/compare.md "Memory viewer"). Data: the data route's diff JSON
// (tools/compare_memory_viewer.py): totals, rows (one per buffer at either peak, paired
// across the two compilations), groups (by category, by framework op), heap (both curves)
// and peak_buffers (each side's buffers at its peak, each naming its row). The page only
// draws it: every number here is the server's.
import { el } from "../lib/dom.js";
import { go, stateUrl } from "../lib/state.js";
import { cachedJson, errorBox } from "../lib/api.js";
import { MIB, exact, fmtBytes, fmtMib, signedBytes } from "../lib/format.js";
import { P, XLA_CATEGORY, XLA_OTHER, colorOf } from "../lib/colors.js";
import { HOVER_CARD, bytesAxis, escapePlotly, newPlot } from "../lib/plotly.js";
import { sortableTable } from "../lib/table.js";

export const COMPARE_KEYS = ["base", "base_host", "base_module"];
const categoryColor = (cat) => colorOf(XLA_CATEGORY, XLA_OTHER, cat);
const SIDE_COLOR = { base: P.neutral, current: P.accent };
const IN_TEXT = { both: "both", base_only: "removed", current_only: "added" };
const MATCH_TEXT = { "name+shape": "name, shape", "framework_op+source": "op, source line", name: "name" };
const MATCH_TITLE = {
  "name+shape": "the same buffer name (instruction and shape index) and shape",
  "framework_op+source": "the same framework op (jit(...) scopes left out) and source line",
  name: "the same buffer name, another shape",
};
const SHAPE_CHARS = 48; // a tuple's shape lists every element: cut, whole in the title

export function comparing(state) {
  return COMPARE_KEYS.some((k) => state[k]);
}

function dataUrl(state) {
  const q = new URLSearchParams({ run: state.run, tag: "memory_viewer" });
  if (state.host) q.set("host", state.host);
  q.set("module_name", state.module_name);
  q.set("memory_space", state.memory_space || "0");
  for (const k of COMPARE_KEYS) if (state[k]) q.set(k, state[k]);
  q.set("view", "page");
  return `/data/plugin/profile/data?${q}`;
}

export async function renderCompare(view, state, isCurrent) {
  const single = { ...state, base: "", base_host: "", base_module: "" };
  const root = el("div", { class: "mv mvc" },
    el("div", { class: "mv-head" }, el("h1", {}, "Memory viewer: compare"),
      el("a", { href: stateUrl(single), id: "mvc-single",
        onclick: (e) => { e.preventDefault(); go(single); } }, "back to the single module")),
    el("p", { class: "muted" }, `Comparing ${state.module_name} with its base…`));
  view.replaceChildren(root);
  let d;
  try {
    d = await cachedJson(dataUrl(state));
  } catch (err) {
    if (!isCurrent()) return;
    root.lastChild.replaceWith(errorBox(err, `Cannot compare ${state.module_name}`));
    return;
  }
  if (!isCurrent()) return;
  root.lastChild.remove();
  root.append(sides(d));
  if (!d.comparable) root.append(el("p", { class: "mv-note", id: "mvc-why" }, d.why || "These two cannot be compared."));
  if (!d.totals) return;
  root.append(totalsLine(d));
  if (d.heap) root.append(el("section", {}, el("h2", {}, "Heap over program order, both modules"),
    el("p", { class: "mv-hint" }, "Each module's heap along its own heap-simulator trace (program order, not time); the diamonds mark each compiler heap peak, whose buffers are listed below."),
    el("div", { id: "mvc-heap", class: "mv-chart" })));
  if (d.peak_buffers) root.append(peakSection(d));
  root.append(groupsSection(d), rowsSection(d));
  if (d.heap) plotHeaps(d);
  wirePairs(root);
}

function sides(d) {
  const ref = (r, cls) => el("span", { class: `mvc-ref ${cls}` }, el("code", {}, r.label || r.run));
  return el("p", { class: "mvc-sides", id: "mvc-sides" }, "current ", ref(d.current, "current"), " against base ", ref(d.base, "base"));
}

function totalsLine(d) {
  const t = d.totals, c = d.counts || {};
  const residual = t.residual === null || t.residual === undefined ? "not attributed"
    : t.residual === 0 ? "residual 0 B: every byte of the change is in a buffer below" : `residual ${signedBytes(t.residual)} not attributed`;
  return el("div", { class: "mv-tiles", id: "mvc-totals" },
    tile("compiler heap peak, base", fmtBytes(t.base), exact(t.base)),
    tile("compiler heap peak, current", fmtBytes(t.current), exact(t.current)),
    tile("change", signedBytes(t.delta), `${t.delta > 0 ? "+" : ""}${t.delta.toLocaleString()} bytes; ${residual}`, deltaClass(t.delta), "mvc-delta"),
    tile("buffers", `${c.changed ?? "?"} changed`, `${c.both ?? 0} paired, ${c.current_only ?? 0} added, ${c.base_only ?? 0} removed`));
}

function tile(label, value, title, cls = "", id = null) {
  return el("div", { class: `mv-tile ${cls}`, title, id },
    el("div", { class: "label" }, label), el("div", { class: "value" }, value), el("div", { class: "muted small" }, title));
}

function deltaClass(n) { return n > 0 ? "mvc-up" : n < 0 ? "mvc-down" : "mvc-same"; }

// -- both heap curves -------------------------------------------------------------------

function plotHeaps(d) {
  const traces = [];
  let top = 0;
  for (const side of ["base", "current"]) {
    const h = d.heap[side];
    const label = `${side}: ${d[side].module || d[side].label}`;
    traces.push({ name: label, x: h.x, y: h.mib, mode: "lines", line: { color: SIDE_COLOR[side], width: side === "current" ? 2 : 1.5, shape: "hv" },
      hovertemplate: `${escapePlotly(label)}<br>event %{x}<br>heap %{y:.3f} MiB<extra></extra>` });
    let best = 0;
    for (let i = 1; i < h.mib.length; i++) if (h.mib[i] > h.mib[best]) best = i;
    if (h.mib.length) traces.push({ name: `${side} peak`, x: [h.x[best]], y: [h.mib[best]], mode: "markers+text", showlegend: false,
      marker: { color: side === "current" ? P.bad : SIDE_COLOR.base, size: 10, symbol: "diamond" },
      text: [`${side} peak ${fmtMib(h.peak_mib)}`], textposition: side === "current" ? "top right" : "bottom right", cliponaxis: false,
      hovertemplate: `${side} compiler heap peak ${fmtMib(h.peak_mib)}<extra></extra>` });
    top = Math.max(top, h.peak_mib || 0, ...h.mib);
  }
  newPlot(document.getElementById("mvc-heap"), traces, {
    height: 300, margin: { l: 70, r: 20, t: 28, b: 50 }, hovermode: "closest", hoverlabel: HOVER_CARD,
    xaxis: { title: { text: "program order (heap-simulator event index, each module its own)" }, zeroline: false },
    yaxis: bytesAxis(top * MIB, MIB, { title: { text: "heap" }, rangemode: "tozero", range: [0, top * 1.2] }),
    legend: { orientation: "h", x: 1, xanchor: "right", y: 1, yanchor: "bottom" },
  });
}

// -- the buffers at each peak, side by side ---------------------------------------------

function peakSection(d) {
  const largest = Math.max(1, ...["base", "current"].flatMap((s) => d.peak_buffers[s].buffers.map((b) => b.bytes)));
  const column = (side) => {
    const p = d.peak_buffers[side];
    return el("div", { class: "mvc-peak", id: `mvc-peak-${side}` },
      el("h3", {}, `${side}: ${p.count.toLocaleString()} buffers at the peak (${fmtBytes(d.totals[side])})`),
      el("ol", { class: "mvc-bufs" }, ...p.buffers.map((b) => el("li", { class: "mvc-buf", "data-row": b.row ?? "",
        title: `${b.name}  ${b.shape}\n${b.category}${b.framework_op ? ` · ${b.framework_op}` : ""}\n${exact(b.bytes)}` },
      el("span", { class: "mvc-bar", style: `width:${(100 * b.bytes / largest).toFixed(2)}%;background:${categoryColor(b.category)}` }),
      el("span", { class: "mvc-buf-name" }, b.name), el("span", { class: "mvc-buf-size" }, fmtBytes(b.bytes))))),
      p.omitted ? el("p", { class: "muted" }, `${p.omitted.toLocaleString()} smaller buffers not drawn (all are in the table below).`) : null);
  };
  return el("section", {}, el("h2", {}, "Buffers live at each peak"),
    el("p", { class: "mv-hint" }, "Largest first, bars to one scale, coloured by category. Hover a buffer: its pair in the other module (and its row in the table) lights up."),
    el("div", { class: "mvc-peaks" }, column("base"), column("current")));
}

// Hovering anything that names a row (a buffer at either peak, a table row) marks every
// element of that row: the matched pair across the two peaks and its line in the table.
function wirePairs(root) {
  let lit = [];
  const clear = () => { for (const n of lit) n.classList.remove("mvc-lit"); lit = []; };
  root.addEventListener("mouseover", (e) => {
    // A table row names its row in its first cell: the whole line counts.
    const hit = e.target.closest("[data-row]") || e.target.closest("tr")?.querySelector("[data-row]");
    const key = hit && hit.getAttribute("data-row");
    if (lit.length && lit.includes(hit)) return;
    clear();
    if (!key) return;
    lit = [...root.querySelectorAll("[data-row]")].filter((n) => n.getAttribute("data-row") === key);
    for (const n of lit) n.classList.add("mvc-lit");
  });
  root.addEventListener("mouseleave", clear);
}

// -- delta tables -----------------------------------------------------------------------

function deltaCell(n) { return el("span", { class: deltaClass(n), title: `${n > 0 ? "+" : ""}${n.toLocaleString()} bytes` }, signedBytes(n)); }

const BYTE_COLUMNS = [
  { key: "base", label: "base", num: true, value: (r) => r.base, show: (r) => (r.in === "current_only" ? "—" : fmtBytes(r.base)) },
  { key: "current", label: "current", num: true, value: (r) => r.current, show: (r) => (r.in === "base_only" ? "—" : fmtBytes(r.current)) },
  { key: "delta", label: "change", num: true, value: (r) => r.delta, sortValue: (r) => Math.abs(r.delta), show: (r) => deltaCell(r.delta) },
];

function groupsSection(d) {
  const table = (name, title) => el("div", { class: "mvc-group" }, el("h3", {}, title),
    sortableTable({ id: `mvc-group-${name}`, prefix: "mvc", rows: d.groups[name] || [], sortKey: "delta",
      columns: [{ key: "label", label: title, value: (r) => r.label }, ...BYTE_COLUMNS,
        { key: "count", label: "buffers", num: true, value: (r) => r.count }] }).node);
  return el("section", {}, el("h2", {}, "Where the change is"),
    el("p", { class: "mv-hint" }, "The rows below summed by category and by framework op (the op's leading jit(...) scopes left out: they name the compilation). Each column sums to the change."),
    el("div", { class: "mvc-groups" }, table("category", "category"), table("framework_op", "framework op")));
}

function rowsSection(d) {
  const t = sortableTable({
    id: "mvc-rows", prefix: "mvc", rows: d.rows, sortKey: "delta", pageRows: 200,
    text: (r) => `${r.label} ${r.framework_op} ${r.category} ${r.source}`,
    filter: { id: "mvc-filter", placeholder: "filter buffers", label: "filter buffers" },
    rowClass: (r) => `mvc-${r.in}`,
    columns: [
      { key: "label", label: "buffer", value: (r) => r.label,
        show: (r) => el("span", { "data-row": r.key, title: r.source || "" }, el("code", {}, r.label)) },
      { key: "in", label: "in", value: (r) => IN_TEXT[r.in] || r.in },
      { key: "match", label: "paired by", nowrap: true, value: (r) => (r.match ? MATCH_TEXT[r.match] || r.match : "—"),
        title: (r) => MATCH_TITLE[r.match] || "not paired: only in one module" },
      { key: "shape", label: "shape (base → current)", value: (r) => shapeText(r), title: (r) => shapeText(r),
        show: (r) => el("code", {}, cut(r.shape_base, r.shape_current)) },
      { key: "category", label: "category", value: (r) => r.category },
      ...BYTE_COLUMNS,
      { key: "framework_op", label: "framework op", value: (r) => r.framework_op },
      { key: "open", label: "open", value: () => "", nowrap: true,
        show: (r) => el("span", {}, openLink(r.link_base, "base", "mvc-open-base"), " ", openLink(r.link_current, "current", "mvc-open-current")) },
    ],
  });
  return el("section", {}, el("h2", {}, "Every buffer at either peak"),
    el("p", { class: "mv-hint" }, "Paired across the two compilations by name and shape, then by framework op and source line, then by name; the rest were added or removed. Sorted by the size of the change."),
    t.node);
}

// A row's link: the single view of one side, opened on the buffer (URL key buffer).
function openLink(query, text, cls) {
  if (!query) return null;
  const state = Object.fromEntries(new URLSearchParams(query));
  return el("a", { href: query, class: cls, title: `this buffer in the ${text} module`,
    onclick: (e) => { e.preventDefault(); go(state); } }, text);
}

function cut(a, b) {
  const short = (x) => (x && x.length > SHAPE_CHARS ? `${x.slice(0, SHAPE_CHARS - 1)}…` : x || "");
  return a && b && a !== b ? `${short(a)} → ${short(b)}` : short(b || a);
}

function shapeText(r) {
  if (r.shape_base && r.shape_current && r.shape_base !== r.shape_current) return `${r.shape_base} → ${r.shape_current}`;
  return r.shape_current || r.shape_base || "";
}
