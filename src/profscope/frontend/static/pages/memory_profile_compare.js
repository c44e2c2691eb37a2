// The memory profile compared with a base (issue 36, docs/compare.md "Memory profile"):
// shown when the URL has base= (another run) or base_host= (another host), as the
// "Compare with…" picker of lib/compare.js writes them. Data: the data
// route with those keys, which answers the diff JSON (tools/compare_memory_profile.py):
// totals (the peak bytes in use), rows (what was live at the peak, by framework op, shape
// and dtype), groups (by framework op, by region type), peak / fragmentation / allocations
// (every allocation event of the run: xplanes, traces and snapshots alike) / capacity side
// by side, and both sampled timelines on one axis (timeline.align: "step" or "time").
// Every number is the server's: this module only lays them out.
import { el } from "../lib/dom.js";
import { cachedJson, errorBox } from "../lib/api.js";
import { byteUnit, fmtBytes, fmtCount } from "../lib/format.js";
import { P } from "../lib/colors.js";
import { compareHead, compareParams, deltaStyle, deltaTable, fmtDelta } from "../lib/compare.js";
import { escapePlotly, LEGEND_TOP, newPlot, purge } from "../lib/plotly.js";

let charts = [];

// A change of bytes, more red, less green: lib/compare.js's.
const deltaCell = (v) => el("span", { class: "cmp-delta", style: deltaStyle(v) }, fmtDelta(v, "bytes"));

function compareUrl(run, state) {
  const q = new URLSearchParams({ run: run.name, tag: "memory_profile" });
  if (state.host) q.set("host", state.host);
  return `/data/plugin/profile/data?${compareParams(q, state)}`;
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
  const alloc = (ref) => (ref.allocator ? ` · allocator ${ref.allocator}` : "");
  root.append(...[
    compareHead({ ...d, base: { ...d.base, label: d.base.label + alloc(d.base) }, current: { ...d.current, label: d.current.label + alloc(d.current) } }),
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
  return el("section", {}, el("h2", {}, "Live at the peak, by its change"),
    el("p", { class: "muted mp-hint" }, "What the allocator held at each run's peak, matched by framework op, shape and dtype; grouped by region type and by op below."),
    deltaTable(d, d.rows, { id: "mp-compare-live", label: "Buffer (op, shape, dtype)", extra: [
      { key: "category", label: "Region (XProf's regionType)", value: (r) => r.category ?? "" },
      { key: "buffers", label: "Buffers", num: true, value: (r) => r.buffers_current - r.buffers_base, show: (r) => `${fmtCount(r.buffers_base)} → ${fmtCount(r.buffers_current)}` }] }),
    el("h3", {}, "By region type"), deltaTable(d, d.groups.category, { id: "mp-compare-category", label: "Region type" }),
    el("h3", {}, "By framework op"), deltaTable(d, d.groups.framework_op, { id: "mp-compare-op", label: "Framework op" }));
}
