// Steps & ops compared with a base (issue 36, docs/compare.md "Steps & ops"): shown when
// the URL has base= (another run) or base_host= (another host of this run), as the
// "Compare with…" picker of lib/compare.js writes them. Data: the
// data route with those keys, which answers the diff JSON (tools/compare_steps_ops.py):
// totals (the mean step time) split by category in groups.category, step_time (median,
// p90), rows (the ops table with a delta column, sorted by the change). Every number is
// the server's: this module only lays them out.
import { el } from "../lib/dom.js";
import { go, readState } from "../lib/state.js";
import { cachedJson, errorBox } from "../lib/api.js";
import { fmtCount } from "../lib/format.js";
import { P } from "../lib/colors.js";
import { compareHead, compareParams, deltaStyle, deltaTable, fmtAmount, fmtDelta } from "../lib/compare.js";
import { escapePlotly, LEGEND_TOP, newPlot } from "../lib/plotly.js";

const KIND_NAMES = { hlo: "HLO ops", kernel: "kernels", framework: "framework ops" };
const us = (v) => fmtAmount(v, "us");
// A time change, "+1.234 ms" slower (red) or "−1.234 ms" faster (green): lib/compare.js's.
const deltaCell = (v) => el("span", { class: "cmp-delta", style: deltaStyle(v) }, fmtDelta(v, "us"));

function compareUrl(run, state) {
  const q = new URLSearchParams({ run: run.name, tag: "steps_ops" });
  if (state.host) q.set("host", state.host);
  return `/data/plugin/profile/data?${compareParams(q, state)}`;
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
    compareHead(d), // what against what, the mean step's change, why when not comparable
    d.comparable ? compareTiles(d) : null,
    d.comparable && d.groups.category.length ? el("section", {}, el("h2", {}, "Mean step time by category"),
      el("p", { class: "so-hint" }, "Each category's time per step, averaged over the steps and devices; with idle they add up to the mean step time."),
      el("div", { class: "so-chart", id: "so-compare-split" }),
    deltaTable(d, d.groups.category, { id: "so-compare-categories", label: "Category" })) : null,
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
  const kind = kinds.includes(state.kind) ? state.kind : ["hlo", "kernel"].find((k) => kinds.includes(k)) || kinds[0];
  const rows = d.rows.filter((r) => r.kind === kind);
  const tot = (d.ops_totals || {})[kind];
  const only = (w) => rows.filter((r) => r.in === w).length;
  return el("section", {}, el("h2", {}, "Ops, by their change"),
    el("p", { class: "so-hint", id: "so-compare-ops-note" }, "Matched by name, then (one op left on each side) by category; the others are only in one run. ",
      tot ? [`All ${KIND_NAMES[kind] || kind}: ${us(tot.base)} → ${us(tot.current)} (`, deltaCell(tot.delta), "); "] : null,
      `${fmtCount(only("base_only"))} only in base, ${fmtCount(only("current_only"))} only in current.`),
    kinds.length > 1 ? el("div", { class: "so-controls" }, el("select", { id: "so-compare-kind", "aria-label": "kind of op",
      onchange: (e) => go({ ...readState(), kind: e.target.value }) },
    kinds.map((k) => el("option", { value: k, selected: k === kind }, KIND_NAMES[k] || k)))) : null,
    deltaTable(d, rows, { id: "so-compare-ops", label: "Op", extra: [
      { key: "category", label: "Category", value: (r) => r.category ?? "" },
      { key: "occ", label: "Occurrences", num: true, value: (r) => r.occurrences_current - r.occurrences_base,
        show: (r) => `${fmtCount(r.occurrences_base)} → ${fmtCount(r.occurrences_current)}` }] }));
}
