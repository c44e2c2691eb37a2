// Steps & ops compared with a base (issue 36, docs/compare.md "Steps & ops"): shown when
// the URL has base= (another run) or base_host= (another host of this run). Data: the
// data route with those keys, which answers the diff JSON (tools/compare_steps_ops.py):
// totals (the mean step time) split by category in groups.category, step_time (median,
// p90), rows (the ops table with a delta column, sorted by the change). Every number is
// the server's: this module only lays them out.
import { el } from "../lib/dom.js";
import { go, readState, stateUrl } from "../lib/state.js";
import { cachedJson, errorBox } from "../lib/api.js";
import { fmtCount } from "../lib/format.js";
import { P } from "../lib/colors.js";
import { escapePlotly, LEGEND_TOP, newPlot } from "../lib/plotly.js";
import { sortableTable } from "../lib/table.js";

const KIND_NAMES = { hlo: "HLO ops", kernel: "kernels", framework: "framework ops" };
const IN_NAMES = { both: "both", base_only: "only in base", current_only: "only in current" };

const us = (v) => (v === null || v === undefined ? "—" : Math.abs(v) >= 1e6 ? `${(v / 1e6).toFixed(3)} s` : Math.abs(v) >= 1e3 ? `${(v / 1e3).toFixed(3)} ms` : `${v.toFixed(3)} µs`);
// A time change: "+1.234 ms" (slower, red), "−1.234 ms" (faster, green), "0" (grey).
function deltaCell(v) {
  if (v === null || v === undefined) return el("span", { class: "muted" }, "—");
  const cls = v > 0 ? "so-up" : v < 0 ? "so-down" : "so-same";
  return el("span", { class: cls }, v > 0 ? `+${us(v)}` : v < 0 ? `−${us(-v)}` : "0");
}

function link(state, text, attrs = {}) {
  return el("a", { href: stateUrl(state), onclick: (e) => { e.preventDefault(); go(state); }, ...attrs }, text);
}

export function compareUrl(run, state) {
  const q = new URLSearchParams({ run: run.name, tag: "steps_ops" });
  for (const k of ["host", "base", "base_host"]) if (state[k]) q.set(k, state[k]);
  return `/data/plugin/profile/data?${q}`;
}

// The page in compare mode: `root` is the page's element, its head already drawn.
export async function renderCompare(view, root, state, run) {
  const loading = el("p", { class: "muted", id: "so-loading" }, "Comparing…");
  root.append(loading);
  let d;
  try { d = await cachedJson(compareUrl(run, state)); } catch (err) {
    if (view.contains(root)) loading.replaceWith(errorBox(err, "Cannot compare these runs"));
    return [];
  }
  if (!view.contains(root)) return [];
  loading.remove();
  root.append(...[
    el("p", { class: "so-compare-refs", id: "so-compare-refs" }, "Base: ", el("strong", {}, d.base.label), " → current: ",
      el("strong", {}, d.current.label), " · ", link({ ...state, base: "", base_host: "" }, "stop comparing", { id: "so-compare-stop" })),
    d.why ? el("div", { class: "note", id: "so-compare-why" }, el("strong", {}, d.comparable ? "Note: " : "Cannot compare: "), d.why) : null,
    d.comparable ? compareTiles(d) : null,
    d.comparable && d.groups.category.length ? el("section", {}, el("h2", {}, "Mean step time by category"),
      el("p", { class: "so-hint" }, "Each category's time per step, averaged over the steps and devices; with idle they add up to the mean step time."),
      el("div", { class: "so-chart", id: "so-compare-split" }), categoryTable(d)) : null,
    d.comparable ? opsSection(d, state) : null,
  ].filter((x) => x !== null));
  return d.comparable && d.groups.category.length ? [drawSplit(d)] : [];
}

function tile(label, value, sub, id) {
  return el("div", { class: "so-tile", id }, el("div", { class: "label" }, label), el("div", { class: "value" }, value),
    sub ? el("div", { class: "sub" }, sub) : null);
}

function compareTiles(d) {
  const st = d.step_time, t = d.totals;
  const pair = (x) => `${us(x.base)} → ${us(x.current)}`;
  const only = (w) => d.rows.filter((r) => r.in === w).length;
  return el("div", { class: "so-tiles", id: "so-compare-summary" },
    tile("Mean step", deltaCell(t.delta), pair(t), "so-compare-mean"),
    tile("Median step", deltaCell(st.median.delta), pair(st.median), "so-compare-median"),
    tile("p90 step", deltaCell(st.p90.delta), pair(st.p90), "so-compare-p90"),
    tile("Steps", `${fmtCount(d.steps.base)} → ${fmtCount(d.steps.current)}`, null),
    tile("Ops", `${fmtCount(d.rows.length)}`, `${fmtCount(only("base_only"))} only in base · ${fmtCount(only("current_only"))} only in current`, "so-compare-ops-count"));
}

function categoryTable(d) {
  return sortableTable({
    id: "so-compare-categories", rows: d.groups.category, prefix: "so", sortKey: "abs", descending: true,
    columns: [
      { key: "label", label: "category", value: (r) => r.label },
      { key: "base", label: "base", num: true, value: (r) => r.base, show: (r) => us(r.base) },
      { key: "current", label: "current", num: true, value: (r) => r.current, show: (r) => us(r.current) },
      { key: "abs", label: "change", num: true, value: (r) => Math.abs(r.delta), show: (r) => deltaCell(r.delta) },
    ],
  }).node;
}

// Base and current side by side per category, the change written on the current's bar.
function drawSplit(d) {
  const rows = d.groups.category;
  const div = document.getElementById("so-compare-split");
  const labels = rows.map((r) => escapePlotly(r.label));
  const bar = (name, key, color) => ({ type: "bar", orientation: "h", name: escapePlotly(name), y: labels, x: rows.map((r) => r[key] / 1e3),
    marker: { color }, hovertemplate: `%{y}: %{x:.3f} ms<extra>${escapePlotly(name)}</extra>` });
  newPlot(div, [bar(`base: ${d.base.label}`, "base", P.silver), bar(`current: ${d.current.label}`, "current", P.blue)], {
    barmode: "group", height: 80 + 44 * rows.length, margin: { l: 170, r: 20, t: 40, b: 40 },
    xaxis: { title: { text: "ms per step" } }, yaxis: { autorange: "reversed" }, legend: LEGEND_TOP,
  });
  return div;
}

function opsSection(d, state) {
  const kinds = Object.keys(d.ops_totals || {});
  const kind = kinds.includes(state.kind) ? state.kind : kinds.includes("hlo") ? "hlo" : kinds.includes("kernel") ? "kernel" : kinds[0];
  const rows = d.rows.filter((r) => r.kind === kind);
  const tot = (d.ops_totals || {})[kind];
  const table = sortableTable({
    id: "so-compare-ops", rows, prefix: "so", sortKey: "abs", descending: true, pageRows: 50,
    text: (r) => `${r.label} ${r.category ?? ""} ${r.module ?? ""} ${IN_NAMES[r.in]}`,
    filter: { id: "so-compare-filter", placeholder: "filter ops", label: "filter ops" },
    count: { id: "so-compare-count", text: (m, n) => `${fmtCount(m)} of ${fmtCount(n)} ops` },
    rowClass: (r) => `so-in-${r.in}`,
    columns: [
      { key: "label", label: "op", value: (r) => r.label, show: (r) => el("span", { class: "so-name", title: r.label }, r.label) },
      { key: "category", label: "category", value: (r) => r.category ?? "" },
      { key: "in", label: "in", value: (r) => IN_NAMES[r.in], show: (r) => el("span", { class: `so-tag so-tag-${r.in}` }, IN_NAMES[r.in]) },
      { key: "match", label: "matched by", value: (r) => r.match ?? "" },
      { key: "occ", label: "occurrences", num: true, value: (r) => r.occurrences_current - r.occurrences_base,
        show: (r) => `${fmtCount(r.occurrences_base)} → ${fmtCount(r.occurrences_current)}` },
      { key: "base", label: "base", num: true, value: (r) => r.base, show: (r) => (r.in === "current_only" ? "—" : us(r.base)) },
      { key: "current", label: "current", num: true, value: (r) => r.current, show: (r) => (r.in === "base_only" ? "—" : us(r.current)) },
      { key: "abs", label: "change", num: true, value: (r) => Math.abs(r.delta), show: (r) => deltaCell(r.delta) },
    ],
  });
  return el("section", {}, el("h2", {}, "Ops, by their change"),
    el("p", { class: "so-hint" }, "Matched by name, then (one op left on each side) by category; the others are only in one run. ",
      tot ? `All ${KIND_NAMES[kind] || kind}: ${us(tot.base)} → ${us(tot.current)} (` : "", tot ? deltaCell(tot.delta) : "", tot ? ")." : ""),
    el("div", { class: "so-controls" }, kinds.length > 1 ? el("select", { id: "so-compare-kind", "aria-label": "kind of op",
      onchange: (e) => go({ ...readState(), kind: e.target.value }) },
    kinds.map((k) => el("option", { value: k, selected: k === kind }, KIND_NAMES[k] || k))) : null),
    table.node);
}
