// Pieces both memory profile payloads draw with: the summary's balance and tiles, leak
// checks, small charts and sparklines, the breakdown table bound to `q`, linked time axes,
// and the number and name helpers of the payloads. The selection, marks and step bands
// are the timeline's (memory_profile_timeline.js).
import { el } from "../lib/dom.js";
import { readState, setUrl, stateUrl } from "../lib/state.js";
import { exact, fmtBytes, fmtMs, num, pct, signed, signedBytes, byteUnit as unitFor } from "../lib/format.js";
import { MEMORY as C, P, rgba } from "../lib/colors.js";
import { bytesAxis, newPlot } from "../lib/plotly.js";
import { sortableTable } from "../lib/table.js";
import { current, nearestIndex, selectIndex, timeParam } from "./memory_profile_timeline.js";

const PAGE_ROWS = 200; // table rows drawn per "show more"
export const MAX_POINTS = 5000; // more timeline points than this are max-filtered in the browser
// Charts that share a time axis share these margins (y tick labels such as "1.5 MiB" fit
// in the left one; automargin stays off), so one time lies at one x on all of them.
export const SHARED_MARGIN = { l: 84, r: 24 };

// Charts on one clock: a zoom or pan of one is applied to the others. The range is read
// from the layout Plotly settled on, so a drag, a double-click reset and the steps table's
// zoom all count alike; a chart already at that range is left alone (no echo back).
export function linkTimeAxes(ctx, divs) {
  let busy = false;
  for (const src of divs) {
    src.on("plotly_relayout", () => {
      if (busy || current !== ctx || !src.layout) return;
      const [a, b] = src.layout.xaxis.range;
      const others = divs.filter((d) => d !== src && d.layout && (d.layout.xaxis.range[0] !== a || d.layout.xaxis.range[1] !== b));
      if (!others.length) return;
      busy = true;
      Promise.all(others.map((d) => window.Plotly.relayout(d, { "xaxis.range": [a, b], "xaxis.autorange": false })))
        .finally(() => { busy = false; });
    });
  }
}

// A y axis of bytes for values from lo (maybe negative: a change) to hi, labelled in
// binary units (lib/plotly.js bytesAxis); data plotted as bytes / scale.
export function signedBytesAxis(lo, hi, scale, extra = {}) {
  const axis = bytesAxis(Math.max(Math.abs(lo), Math.abs(hi), 1), scale, extra);
  if (lo >= 0) return axis;
  const neg = [];  // the positive ticks mirrored, down to the first past lo
  axis.tickvals.forEach((v, i) => {
    if (v > 0 && (!neg.length || neg[neg.length - 1][0] * scale > lo)) neg.push([-v, `−${axis.ticktext[i]}`]);
  });
  neg.reverse();
  return { ...axis, tickvals: neg.map((t) => t[0]).concat(axis.tickvals), ticktext: neg.map((t) => t[1]).concat(axis.ticktext) };
}

// -- summary pieces ----------------------------------------------------------------------

export function balance(allocs, deallocs, imbalance, sampledOnly, extra) {
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

export function tile(key, label, value, raw, note) {
  return el("div", { class: "mp-tile", "data-key": key },
    el("div", { class: "label" }, label),
    el("div", { class: "value", "data-value": raw === undefined || raw === null ? "" : String(raw) }, value),
    note ? el("div", { class: "note" }, note) : null);
}

export function timeLink(ctx, ms, index) {
  if (ms === undefined || ms === null) return "—";
  const i = index !== undefined && index >= 0 ? index : ctx.model && ctx.model.n ? nearestIndex(ctx.model.t, ms) : -1;
  if (i < 0) return fmtMs(ms);
  const state = { ...readState(), t: timeParam(ctx.model.t[i]) };
  return el("a", { href: stateUrl(state), class: "mp-time", onclick: (e) => { e.preventDefault(); selectIndex(ctx, i); } }, fmtMs(ms));
}

// -- leak hint pieces ----------------------------------------------------------------------

// One line over the checks: how many fired, or that none did.
export function leakVerdict(hints, none) {
  if (!hints.length) return el("p", { class: "mp-verdict ok", id: "mp-leak-verdict" }, none);
  const n = (sev) => hints.filter((h) => (h.severity || "info") === sev).length;
  const w = n("warning"), i = n("info");
  const text = w ? `${w} warning${w === 1 ? "" : "s"}${i ? ` and ${i} note${i === 1 ? "" : "s"}` : ""}: the evidence for each is below.`
    : `No warning; ${i} note${i === 1 ? "" : "s"} worth a look below.`;
  return el("p", { class: `mp-verdict ${w ? "bad" : ""}`, id: "mp-leak-verdict" }, text);
}

const SEVERITY_ORDER = { warning: 0, info: 1, clear: 2 };

export function sortChecks(checks) {
  return checks.map((c, i) => [c, i]).sort(([a, i], [b, j]) =>
    (SEVERITY_ORDER[a.dataset.status] ?? 1) - (SEVERITY_ORDER[b.dataset.status] ?? 1) || i - j).map(([c]) => c);
}

// One leak check: open when it fired (or when `hint` is just { open: true }).
export function check(title, hint, ...body) {
  const fired = hint && hint.kind !== undefined || (hint && hint.severity);
  const status = fired ? hint.severity || "info" : "clear";
  return el("details", { class: `mp-check ${status}`, open: hint ? true : undefined, "data-status": status, "data-kind": fired ? hint.kind || "" : "" },
    el("summary", {}, el("span", { class: `mp-sev ${status}` }, status), el("span", { class: "mp-check-title" }, title),
      fired && hint.message ? el("div", { class: "mp-check-msg" }, hint.message) : null),
    el("div", { class: "mp-check-body" }, body));
}

export function kv(pairs) {
  return el("dl", { class: "mp-kv" }, pairs.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}

export function miniTable(rows, columns, caption) {
  const shown = rows.slice(0, 50);
  return el("div", { class: "mp-mini-table" },
    caption ? el("div", { class: "muted small" }, caption) : null,
    el("table", { class: "mp-table compact" },
      el("thead", {}, el("tr", {}, columns.map(([label, , isNum]) => el("th", { class: isNum ? "num" : "" }, label)))),
      el("tbody", {}, shown.map((r) => el("tr", {}, columns.map(([, show, isNum]) => el("td", { class: isNum ? "num" : "" }, show(r) ?? "")))))),
    rows.length > shown.length ? el("div", { class: "muted small" }, `${rows.length - shown.length} more not shown`) : null);
}

// Draw a small chart once it has a width: now, or when its closed <details> opens.
export function lazyChart(ctx, div, spec) {
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
  const lo = Math.min(0, ...y.map(num), ...(bars || []).map(num)), hi = Math.max(1, ...y.map(num), ...(bars || []).map(num));
  const traces = [barsOnly
    ? { type: "bar", name, x, y: y.map((v) => num(v) / u.div), marker: { color: C.heap }, text: y.map((v) => fmtBytes(num(v))), hovertemplate: "%{x}: %{text}<extra></extra>", textposition: "none" }
    : { type: "scatter", mode: "lines+markers", name, x, y: y.map((v) => num(v) / u.div), line: { color: C.allocated, width: 2 }, marker: { size: 6 },
        text: y.map((v) => fmtBytes(num(v))), hovertemplate: "%{x}: %{text}<extra></extra>" }];
  if (fit) traces.push({ type: "scatter", mode: "lines", name: "least-squares fit", x, y: x.map((v) => fit(Number(v)) / u.div), line: { color: P.muted, dash: "dash", width: 1 }, hoverinfo: "skip" });
  if (bars) traces.push({ type: "bar", name: "change from the previous", x: x.slice(x.length - bars.length), y: bars.map((v) => num(v) / u.div), yaxis: "y",
    marker: { color: rgba(C.heap, 0.55) }, text: bars.map((v) => signedBytes(num(v))), hovertemplate: "%{x}: %{text}<extra>change</extra>", textposition: "none" });
  newPlot(div, traces, {
    height: 190, margin: { l: 68, r: 12, t: 8, b: 40 }, hovermode: "closest", barmode: "overlay",
    xaxis: { title: { text: xTitle, font: { size: 11 } }, type: typeof x[0] === "number" ? "linear" : "category", dtick: typeof x[0] === "number" ? 1 : undefined, tickfont: { size: 10 } },
    yaxis: signedBytesAxis(lo, hi, u.div, { rangemode: "tozero", tickfont: { size: 10 } }),
    showlegend: traces.length > 1, legend: { orientation: "h", x: 1, xanchor: "right", y: 1, yanchor: "bottom", font: { size: 10 } },
  }, { displayModeBar: false });
  ctx.charts.push(div);
}

// A series as a tiny canvas line: cheap enough for one per table row.
export function sparkline(values, labels) {
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

export function dataTable({ id, rows, columns, text, bindQ, sortKey, noun, placeholder, rowClass, onHover, onClick }) {
  return sortableTable({
    id, prefix: "mp", rows, text, sortKey, pageRows: PAGE_ROWS, rowClass, onHover, onClick,
    columns: columns.map((c) => (c.num ? { ...c, dataValue: true } : c)),
    // Every keystroke is not a view to go back to: replace, don't push.
    filter: { id: "mp-filter", placeholder, label: "filter the breakdown", delay: 120, onChange: bindQ ? (q) => setUrl({ ...readState(), q }) : null },
    count: { id: "mp-count", text: (matched, total) => `${matched.toLocaleString()} of ${total.toLocaleString()} ${noun}` },
  });
}

// -- small helpers -----------------------------------------------------------------------

export function fraction(v) {
  if (v === undefined || v === null) return 0;
  const n = Number(v);
  return Number.isFinite(n) ? n : null; // "NaN" from protobuf's JSON printer
}

export function psToMs(ps) { return num(ps) / 1e9; }

// Max filter to at most MAX_POINTS items: the largest of each window survives.
export function maxFilter(items, value) {
  const per = Math.ceil(items.length / MAX_POINTS), out = [];
  for (let i = 0; i < items.length; i += per) {
    let best = i;
    for (let j = i + 1; j < Math.min(i + per, items.length); j++) if (value(items[j]) > value(items[best])) best = j;
    out.push(items[best]);
  }
  return out;
}


export function bytesNode(bytes) {
  if (bytes === undefined || bytes === null) return "—";
  return el("span", { title: exact(bytes) }, fmtBytes(num(bytes)));
}

export function meterCell(bytes, of) {
  const share = of ? Math.min(1, num(bytes) / of) : 0;
  return el("span", { class: "mp-metercell", title: `${exact(bytes)} · ${pct(100 * share)} of ${fmtBytes(of)}` },
    el("span", { class: "mp-meter" }, el("span", { style: `width:${(100 * share).toFixed(1)}%` })), fmtBytes(num(bytes)));
}

// An op or scope name that may wrap after each '/' (not in the middle of a word).
export function opNode(name, cls = "mp-op") {
  const parts = String(name).split("/");
  return el("code", { class: cls }, parts.flatMap((p, i) => (i ? [el("wbr"), `/${p}`] : [p])));
}

export function dtypeText(dt) { return !dt || dt === "INVALID" ? "" : String(dt); }

export function humanize(key) {
  const known = { sizeBytes: "size", bytes: "bytes", stepSource: "steps from", bytesPerStep: "growth per step", bytesPerInterval: "growth per interval",
    stepsGrowing: "steps that grew", stepsCompared: "steps compared", neverFreedAfterFirstStep: "never freed, allocated after the first step",
    neverFreedByFrame: "never freed, by Python line", neverFreedByModule: "never freed, by module scope" };
  if (known[key]) return known[key];
  return String(key).replace(/([a-z0-9])([A-Z])/g, "$1 $2").replace(/_/g, " ").toLowerCase();
}

export function categoryLabel(c) { return String(c || "").toLowerCase().replace(/_/g, " "); }

// A label near the right edge goes to the left of its point, where there is room.
export function labelSide(xs, i) {
  if (i < 0 || xs.length < 2) return "top right";
  return (xs[i] - xs[0]) / (xs[xs.length - 1] - xs[0] || 1) > 0.7 ? "top left" : "top right";
}
