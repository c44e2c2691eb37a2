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
import { COMPARE_KEYS, compareHead, compareParams, comparePicker, deltaStyle, deltaTable } from "../lib/compare.js";
import { MIB, exact, fmtBytes, fmtMib, signedBytes } from "../lib/format.js";
import { P, XLA_CATEGORY, XLA_OTHER, colorOf } from "../lib/colors.js";
import { HOVER_CARD, bytesAxis, escapePlotly, newPlot } from "../lib/plotly.js";

const categoryColor = (cat) => colorOf(XLA_CATEGORY, XLA_OTHER, cat);
const SIDE_COLOR = { base: P.neutral, current: P.accent };
const MATCH_TEXT = { "name+shape": "name, shape", "framework_op+source": "op, source line", name: "name" };
const MATCH_TITLE = {
  "name+shape": "the same buffer name (instruction and shape index) and shape",
  "framework_op+source": "the same framework op (jit(...) scopes left out) and source line",
  name: "the same buffer name, another shape",
};
const SHAPE_CHARS = 48; // a tuple's shape lists every element: cut, whole in the title

function dataUrl(state) {
  const q = new URLSearchParams({ run: state.run, tag: "memory_viewer" });
  if (state.host) q.set("host", state.host);
  q.set("module_name", state.module_name);
  q.set("memory_space", state.memory_space || "0");
  compareParams(q, state);
  q.set("view", "page");
  return `/data/plugin/profile/data?${q}`;
}

// run: the shell's run with its hosts (the picker's "Compare with…" choices).
export async function renderCompare(view, state, run, isCurrent) {
  const single = { ...state, ...Object.fromEntries(Object.keys(COMPARE_KEYS).map((k) => [k, ""])) };
  const root = el("div", { class: "mv mvc" },
    el("div", { class: "mv-head" }, el("h1", {}, "Memory viewer: compare"),
      el("a", { href: stateUrl(single), id: "mvc-single",
        onclick: (e) => { e.preventDefault(); go(single); } }, "back to the single module")),
    comparePicker(state, run, { modules: true }),
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
  root.append(compareHead(d));
  if (!d.totals) return;
  root.append(totalsLine(d));
  if (d.heap) root.append(el("section", {}, el("h2", {}, "Heap over program order, both modules"),
    el("p", { class: "mv-hint" }, "Each module's heap along its own heap-simulator trace (program order, not time); the diamonds mark each compiler heap peak, whose buffers are listed below."),
    el("div", { id: "mvc-heap", class: "mv-chart" })));
  if (d.peak_buffers) root.append(peakSection(d));
  const light = pairLighter(root);
  root.append(groupsSection(d), rowsSection(d, light));
  if (d.heap) plotHeaps(d);
  wirePeaks(root, light);
}

function totalsLine(d) {
  const t = d.totals, c = d.counts || {};
  const residual = t.residual === null || t.residual === undefined ? "not attributed"
    : t.residual === 0 ? "residual 0 B: every byte of the change is in a buffer below" : `residual ${signedBytes(t.residual)} not attributed`;
  return el("div", { class: "mv-tiles", id: "mvc-totals" },
    tile("compiler heap peak, base", fmtBytes(t.base), exact(t.base)),
    tile("compiler heap peak, current", fmtBytes(t.current), exact(t.current)),
    tile("change", signedBytes(t.delta), `${t.delta > 0 ? "+" : ""}${t.delta.toLocaleString()} bytes; ${residual}`, deltaStyle(t.delta), "mvc-delta"),
    tile("buffers", `${c.changed ?? "?"} changed`, `${c.both ?? 0} paired, ${c.current_only ?? 0} added, ${c.base_only ?? 0} removed`));
}

function tile(label, value, title, style = null, id = null) {
  return el("div", { class: "mv-tile", title, id },
    el("div", { class: "label" }, label), el("div", { class: "value", style }, value), el("div", { class: "muted small" }, title));
}

// -- both heap curves -------------------------------------------------------------------

function plotHeaps(d) {
  const traces = [];
  let top = 0;
  const lastX = Math.max(1, ...["base", "current"].map((s) => d.heap[s].x[d.heap[s].x.length - 1] || 0));
  for (const side of ["base", "current"]) {
    const h = d.heap[side];
    const label = `${side}: ${d[side].module || d[side].label}`;
    if (!h.mib.length && h.peak_mib) {
      // No heap-simulator event (a module of parameters and outputs only): its heap is
      // the whole-program allocations, the same at every point: a flat line at its peak.
      traces.push({ name: `${label} (no heap events: constant)`, x: [0, lastX], y: [h.peak_mib, h.peak_mib], mode: "lines",
        line: { color: SIDE_COLOR[side], width: 1.5, dash: "dash" }, hovertemplate: `${escapePlotly(label)}<br>constant ${fmtMib(h.peak_mib)}: no heap-simulator event<extra></extra>` });
      top = Math.max(top, h.peak_mib);
      continue;
    }
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

// Hovering a buffer at either peak, or a table row, lights every element naming that row
// (data-row): the matched pair across the two peaks and its line in the table.
function pairLighter(root) {
  let lit = [];
  return (key) => {
    for (const n of lit) n.classList.remove("mvc-lit");
    lit = key === null || key === undefined ? [] : [...root.querySelectorAll("[data-row]")].filter((n) => n.getAttribute("data-row") === key);
    for (const n of lit) n.classList.add("mvc-lit");
  };
}

function wirePeaks(root, light) {
  const peaks = root.querySelector(".mvc-peaks");
  if (!peaks) return;
  peaks.addEventListener("mouseover", (e) => {
    const hit = e.target.closest("[data-row]");
    light(hit ? hit.getAttribute("data-row") : null);
  });
  peaks.addEventListener("mouseleave", () => light(null));
}

// -- delta tables (lib/compare.js deltaTable) -------------------------------------------

function groupsSection(d) {
  const table = (name, title) => el("div", { class: "mvc-group" }, el("h3", {}, title),
    deltaTable(d, d.groups[name] || [], { id: `mvc-group-${name}`, label: title,
      extra: [{ key: "count", label: "buffers", num: true, value: (r) => r.count }] }));
  return el("section", {}, el("h2", {}, "Where the change is"),
    el("p", { class: "mv-hint" }, "The rows below summed by category and by framework op (the op's leading jit(...) scopes left out: they name the compilation). Each column sums to the change."),
    el("div", { class: "mvc-groups" }, table("category", "category"), table("framework_op", "framework op")));
}

function rowsSection(d, light) {
  const rows = d.rows.map((r) => ({ ...r, match: r.match ? MATCH_TEXT[r.match] || r.match : null, rule: r.match }));
  const table = deltaTable(d, rows, {
    id: "mvc-rows", label: "Buffer", pageRows: 200, onHover: (r) => light(r ? r.key : null),
    extra: [
      { key: "shape", label: "shape (base → current)", value: (r) => shapeText(r),
        show: (r) => el("code", { "data-row": r.key, title: `${shapeText(r)}\npaired by ${MATCH_TITLE[r.rule] || "nothing: in one module only"}` },
          cut(r.shape_base, r.shape_current)) },
      { key: "category", label: "category", value: (r) => r.category },
      { key: "framework_op", label: "framework op", value: (r) => r.framework_op },
    ],
  });
  return el("section", {}, el("h2", {}, "Every buffer at either peak"),
    el("p", { class: "mv-hint" }, "Paired across the two compilations by name and shape, then by framework op and source line, then by name; the rest were added or removed. Sorted by the size of the change; base and current open each module on the buffer."),
    table);
}

function cut(a, b) {
  const short = (x) => (x && x.length > SHAPE_CHARS ? `${x.slice(0, SHAPE_CHARS - 1)}…` : x || "");
  return a && b && a !== b ? `${short(a)} → ${short(b)}` : short(b || a);
}

function shapeText(r) {
  if (r.shape_base && r.shape_current && r.shape_base !== r.shape_current) return `${r.shape_base} → ${r.shape_current}`;
  return r.shape_current || r.shape_base || "";
}
