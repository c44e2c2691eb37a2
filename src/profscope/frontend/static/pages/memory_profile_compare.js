// The memory profile compared with a base (issue 36, docs/compare.md "Memory profile"):
// shown when the URL has base= (another run) or base_host= (another host). Data: the data
// route with those keys, which answers the diff JSON (tools/compare_memory_profile.py):
// totals (the peak bytes in use), rows (what was live at the peak, by framework op, shape
// and dtype), groups (by framework op, by region type), peak / fragmentation / allocations
// / capacity side by side, and both sampled timelines on one axis (timeline.align: "step"
// or "time"). Every number is the server's: this module only lays them out.
import { el } from "../lib/dom.js";
import { go, stateUrl } from "../lib/state.js";
import { cachedJson, errorBox } from "../lib/api.js";
import { byteUnit, fmtBytes, fmtCount, signedBytes } from "../lib/format.js";
import { P } from "../lib/colors.js";
import { escapePlotly, LEGEND_TOP, newPlot, purge } from "../lib/plotly.js";
import { sortableTable } from "../lib/table.js";

const IN_NAMES = { both: "both", base_only: "only in base", current_only: "only in current" };
let charts = [];

function link(state, text, attrs = {}) {
  return el("a", { href: stateUrl(state), onclick: (e) => { e.preventDefault(); go(state); }, ...attrs }, text);
}

// A change of bytes: more is red, less green, none grey.
function deltaCell(v) {
  if (v === null || v === undefined) return el("span", { class: "muted" }, "—");
  return el("span", { class: v > 0 ? "mp-up" : v < 0 ? "mp-down" : "mp-same" }, v === 0 ? "0 B" : signedBytes(v));
}

function compareUrl(run, state) {
  const q = new URLSearchParams({ run: run.name, tag: "memory_profile" });
  for (const k of ["host", "base", "base_host"]) if (state[k]) q.set(k, state[k]);
  return `/data/plugin/profile/data?${q}`;
}

export function leaveCompare() {
  purge(charts);
  charts = [];
}

// The page in compare mode: `root` is the page's element, its head already drawn.
export async function renderMemoryCompare(view, root, state, run) {
  leaveCompare();
  const loading = el("p", { class: "muted", id: "mp-loading" }, "Comparing…");
  root.append(loading);
  let d;
  try { d = await cachedJson(compareUrl(run, state)); } catch (err) {
    if (view.contains(root)) loading.replaceWith(errorBox(err, "Cannot compare these memory profiles"));
    return;
  }
  if (!view.contains(root)) return;
  loading.remove();
  const alloc = (ref) => (ref.allocator ? ` (${ref.allocator})` : "");
  root.append(...[
    el("p", { class: "mp-compare-refs", id: "mp-compare-refs" }, "Base: ", el("strong", {}, d.base.label + alloc(d.base)), " → current: ",
      el("strong", {}, d.current.label + alloc(d.current)), " · ", link({ ...state, base: "", base_host: "" }, "stop comparing", { id: "mp-compare-stop" })),
    d.why ? el("div", { class: "mp-note", id: "mp-compare-why" }, el("strong", {}, d.comparable ? "Note: " : "Cannot compare: "), d.why) : null,
    d.comparable ? tiles(d) : null,
    d.comparable ? el("section", {}, el("h2", {}, "Both timelines"), el("p", { class: "muted mp-hint" }, d.timeline.align === "step"
      ? "Aligned by step: each sample at its step's number plus its place within that step."
      : "Aligned by time from each run's first sample (not both runs have two steps or more)."),
    el("div", { class: "mp-chart", id: "mp-compare-timeline" })) : null,
    d.comparable ? liveSection(d) : null,
  ].filter((x) => x !== null));
  if (d.comparable) charts.push(drawTimelines(d));
}

function tile(label, value, sub, id) {
  return el("div", { class: "mp-compare-tile", id }, el("div", { class: "label" }, label), el("div", { class: "value" }, value),
    sub ? el("div", { class: "sub" }, sub) : null);
}

function tiles(d) {
  const bytes = (x) => `${x.base === null ? "—" : fmtBytes(x.base)} → ${x.current === null ? "—" : fmtBytes(x.current)}`;
  const f = d.fragmentation, a = d.allocations;
  const pct = (v) => (v === null || v === undefined ? "—" : `${(100 * v).toFixed(1)} %`);
  return el("div", { class: "mp-compare-tiles", id: "mp-compare-summary" },
    tile("Peak in use", deltaCell(d.totals.delta), bytes(d.totals), "mp-compare-peak"),
    tile("Fragmentation at the peak", f.delta === null ? "—" : `${f.delta > 0 ? "+" : ""}${(100 * f.delta).toFixed(1)} pts`,
      `${pct(f.base)} → ${pct(f.current)}`, "mp-compare-frag"),
    tile("Allocations", a.delta === null ? "—" : `${a.delta > 0 ? "+" : ""}${fmtCount(a.delta)}`,
      a.base === null && a.current === null ? "not counted in these runs' answers" : `${fmtCount(a.base)} → ${fmtCount(a.current)}`, "mp-compare-allocs"),
    tile("Not itemised (residual)", fmtBytes(Math.abs(d.totals.residual ?? 0)), "of the peak's change, not explained by a live buffer", "mp-compare-residual"),
    d.capacity.current !== null || d.capacity.base !== null ? tile("Capacity", bytes(d.capacity), null) : null);
}

// Both runs' bytes in use over the aligned axis: base grey, current blue.
function drawTimelines(d) {
  const div = document.getElementById("mp-compare-timeline");
  const tl = d.timeline;
  const max = Math.max(1, ...tl.base.bytes, ...tl.current.bytes);
  const unit = byteUnit(max);
  const byStep = tl.align === "step";
  // the base drawn wider under the current: two equal runs still show both lines
  const line = (side, name, color, width) => ({
    type: "scatter", mode: "lines", name: escapePlotly(name), line: { color, width, shape: "hv" },
    x: byStep ? tl[side].x : tl[side].x.map((v) => v / 1e3), y: tl[side].bytes.map((b) => b / unit.div),
    hovertemplate: `%{y:.2f} ${unit.label} at ${byStep ? "step %{x:.2f}" : "%{x:.3f} ms"}<extra>${escapePlotly(name)}</extra>`,
  });
  newPlot(div, [line("base", `base: ${d.base.label}`, P.silver, 4), line("current", `current: ${d.current.label}`, P.blue, 1.5)], {
    height: 340, margin: { l: 70, r: 20, t: 40, b: 50 }, legend: LEGEND_TOP,
    xaxis: { title: { text: byStep ? "step (its number, then its share of the step's time)" : "time from the first sample (ms)" }, dtick: byStep ? 1 : undefined },
    yaxis: { title: { text: `in use (${unit.label})` }, rangemode: "tozero" },
  });
  return div;
}

function liveSection(d) {
  const table = (id, rows, first, more = []) => sortableTable({
    id, rows, prefix: "mp", sortKey: "abs", descending: true, pageRows: 50,
    text: (r) => `${r.label} ${r.category ?? ""} ${IN_NAMES[r.in]}`,
    filter: id === "mp-compare-live" ? { id: "mp-compare-filter", placeholder: "filter buffers", label: "filter buffers" } : null,
    rowClass: (r) => `mp-in-${r.in}`,
    columns: [first, ...more,
      { key: "in", label: "in", value: (r) => IN_NAMES[r.in], show: (r) => el("span", { class: `mp-tag mp-tag-${r.in}` }, IN_NAMES[r.in]) },
      { key: "base", label: "base", num: true, value: (r) => r.base, show: (r) => (r.in === "current_only" ? "—" : fmtBytes(r.base)) },
      { key: "current", label: "current", num: true, value: (r) => r.current, show: (r) => (r.in === "base_only" ? "—" : fmtBytes(r.current)) },
      { key: "abs", label: "change", num: true, value: (r) => Math.abs(r.delta), show: (r) => deltaCell(r.delta) }],
  }).node;
  const name = { key: "label", label: "", value: (r) => r.label, show: (r) => el("span", { class: "mp-name", title: r.label }, r.label) };
  return el("section", {}, el("h2", {}, "Live at the peak, by its change"),
    el("p", { class: "muted mp-hint" }, "What the allocator held at each run's peak, matched by framework op, shape and dtype; grouped by region type and by op below."),
    table("mp-compare-live", d.rows, { ...name, label: "buffer (op, shape, dtype)" }, [
      { key: "category", label: "region (XProf's regionType)", value: (r) => r.category ?? "" },
      { key: "buffers", label: "buffers", num: true, value: (r) => r.buffers_current - r.buffers_base, show: (r) => `${fmtCount(r.buffers_base)} → ${fmtCount(r.buffers_current)}` }]),
    el("h3", {}, "By region type"), table("mp-compare-category", d.groups.category, { ...name, label: "region type" }),
    el("h3", {}, "By framework op"), table("mp-compare-op", d.groups.framework_op, { ...name, label: "framework op" }));
}
