// JAX device-memory profile page: the memory_profile tool of a pprof run (one
// jax.profiler.save_device_memory_profile() file, or a folder of successive ones). Data:
// /data/plugin/profile/data?tag=memory_profile (tools/memory_profile_pprof.py builds it:
// overview {totals.byDeviceKind, icicle, topSites, buffers}, timeline {profiles[]},
// diff {grew[], shrank[]} with base_profile). This page only displays it.
// URL keys: profile (the file shown; default the last), base_profile (the profile it is
// diffed against: what grew, by stack, as pprof -diff_base), host (one device); base /
// base_host (docs/compare.md): another pprof run as the base, the same diff by stack in
// the diff JSON every tool answers (tools/compare_memory_profile.py diff_pprof).
import { el } from "../lib/dom.js";
import { go, readState } from "../lib/state.js";
import { cachedJson, errorBox } from "../lib/api.js";
import { fmtBytes, fmtCount as n, signedBytes } from "../lib/format.js";
import { SERIES } from "../lib/colors.js";
import { bytesAxis, purge, react as plotReact } from "../lib/plotly.js";
import { sortableTable } from "../lib/table.js";
import { drawIcicle } from "../lib/icicle.js";
import { COMPARE_KEYS, compareHead, comparePicker, comparing, deltaStyle, deltaTable } from "../lib/compare.js";

let charts = [];

const short = (file) => (file || "").split("/").slice(-2).join("/");
const siteText = (s) => (s ? `${s.function} (${short(s.file)}:${s.line})` : "<no stack>");
const deviceText = (d) => (d ? d : "no device (executables)");
// host= one device; none or ALL_HOSTS (the first entry of the run's hosts when it has
// several devices, app/pprofs.py pprof_hosts): every device summed.
const oneDevice = (state) => state.host && state.host !== "ALL_HOSTS";

function dataUrl(state, run) {
  const q = new URLSearchParams({ run: run.name, tag: "memory_profile" });
  for (const k of ["host", "profile", "base_profile", "base", "base_host"]) if (state[k]) q.set(k, state[k]);
  return `/data/plugin/profile/data?${q}`;
}

async function render(view, state, run) {
  leave();
  const root = el("div", { class: "mp", id: "pp-root" },
    el("div", { class: "mp-head" }, el("h1", {}, "Memory profile"),
      el("div", { class: "mp-subtitle muted" }, run.name, " · JAX device-memory profile (pprof)", oneDevice(state) ? ` · device ${state.host}` : " · all devices")),
    el("p", { class: "muted" }, "Reading the profile…"));
  root.insertBefore(comparePicker(state, run, { tool: "memory_profile" }), root.lastChild);
  view.replaceChildren(root);
  let d;
  try { d = await cachedJson(dataUrl(state, run)); } catch (err) { root.lastChild.replaceWith(errorBox(err, "No memory profile")); return; }
  if (!view.contains(root)) return;
  root.lastChild.remove();
  if (comparing(state)) { // another run as the base: the diff JSON, rows by stack
    root.append(el("div", { id: "pp-compare" }, compareHead(d), deltaTable(d, d.rows, { id: "pp-compare-rows", label: "Made at (stack)" })));
    return;
  }
  root.append(toolbar(d, state));
  if (d.profiles.length > 1) root.append(el("h2", {}, "Live bytes over the profiles"), timeline(d));
  if (d.diff) root.append(el("h2", {}, `What grew from ${d.diff.baseProfile} to ${d.diff.profile}`), diffSection(d.diff));
  const o = d.overview;
  root.append(el("h2", {}, `Live bytes: ${fmtBytes(o.totals.bytes)} in ${n(o.totals.count)} buffers and executables`),
    deviceTable(o.totals.byDeviceKind));
  const ice = el("div", { class: "mp-chart", id: "pp-icicle" });
  root.append(el("h2", {}, "Bytes by Python stack"),
    el("p", { class: "mp-hint" }, "Outermost frame at the top; click a box to zoom.",
      o.icicle.nodesOmitted ? ` ${n(o.icicle.nodesOmitted)} small nodes left out.` : ""), ice);
  if (o.icicle.totalBytes > 0) { drawIcicle(ice, o.icicle); charts.push(ice); } else ice.replaceChildren(el("p", { class: "muted" }, "No live bytes."));
  root.append(el("h2", {}, "Top allocation sites"),
    el("p", { class: "mp-hint" }, "Bytes by the innermost frame outside installed libraries (the line that made the buffer); cumulative: every stack through it."),
    sitesTable(o.topSites),
    el("h2", {}, "Buffers"), buffersTable(o.buffers));
}

function toolbar(d, state) {
  const pick = (id, label, value, options, key) => el("label", { class: "mp-picker" }, label,
    el("select", { id, onchange: (e) => go({ ...readState(), [key]: e.target.value }) },
      options.map(([v, text]) => el("option", { value: v, selected: v === value ? "" : null }, text))));
  const profiles = d.profiles.map((p) => [p, p]);
  return el("div", { class: "mp-toolbar", id: "pp-toolbar" },
    d.profiles.length > 1 ? pick("pp-profile", "Profile", d.profile, profiles, "profile") : null,
    d.profiles.length > 1 ? pick("pp-base", "Diff against", state.base_profile || "", [["", "— none —"], ...profiles], "base_profile") : null);
}

function timeline(d) {
  const div = el("div", { class: "mp-chart", id: "pp-timeline" });
  const t = d.timeline;
  const x = t.profiles.map((p) => p.profile);
  const traces = [{ type: "scatter", mode: "lines+markers", name: "all devices", x, y: t.profiles.map((p) => p.bytes), line: { color: SERIES[0] } },
    ...t.devices.filter((dev) => dev && t.devices.length > 2).map((dev, i) => ({ type: "scatter", mode: "lines+markers", name: dev, x,
      y: t.profiles.map((p) => p.byDevice[dev] || 0), line: { color: SERIES[(i + 1) % SERIES.length] } }))];
  const max = Math.max(1, ...t.profiles.map((p) => p.bytes));
  setTimeout(() => {
    plotReact(div, traces, { height: 280, margin: { l: 70, r: 10, t: 10, b: 60 }, yaxis: bytesAxis(max), xaxis: { type: "category" } });
    div.on && div.on("plotly_click", (ev) => { const p = ev.points && ev.points[0]; if (p) go({ ...readState(), profile: p.x }); });
  });
  charts.push(div);
  return div;
}

function deviceTable(rows) {
  return sortableTable({ id: "pp-devices", prefix: "mp", rows, sortKey: "bytes", columns: [
    { key: "device", label: "Device", value: (r) => r.device, show: (r) => deviceText(r.device) },
    { key: "kind", label: "Kind", value: (r) => r.kind },
    { key: "bytes", label: "Live bytes", num: true, value: (r) => r.bytes, show: (r) => fmtBytes(r.bytes) },
    { key: "count", label: "Count", num: true, value: (r) => r.count, show: (r) => n(r.count) },
  ] }).node;
}

function sitesTable(rows) {
  return sortableTable({ id: "pp-sites", prefix: "mp", rows, sortKey: "bytes", columns: [
    { key: "site", label: "Site", value: (r) => siteText(r) },
    { key: "bytes", label: "Bytes", num: true, value: (r) => r.bytes, show: (r) => fmtBytes(r.bytes) },
    { key: "count", label: "Count", num: true, value: (r) => r.count, show: (r) => n(r.count) },
    { key: "cumBytes", label: "Cumulative", num: true, value: (r) => r.cumBytes, show: (r) => fmtBytes(r.cumBytes) },
  ] }).node;
}

function buffersTable(b) {
  const t = sortableTable({ id: "pp-buffers", prefix: "mp", rows: b.rows, sortKey: "bytes", pageRows: 50,
    filter: { id: "pp-buffers-q", placeholder: "filter", label: "filter the buffers" }, text: (r) => `${r.device} ${r.kind} ${siteText(r.site)}`,
    columns: [
      { key: "bytes", label: "Bytes", num: true, value: (r) => r.bytes, show: (r) => fmtBytes(r.bytes) },
      { key: "device", label: "Device", value: (r) => r.device, show: (r) => deviceText(r.device) },
      { key: "kind", label: "Kind", value: (r) => r.kind },
      { key: "site", label: "Made at", value: (r) => siteText(r.site) },
    ] });
  return el("div", {}, t.node, b.omitted ? el("p", { class: "muted" }, `${n(b.omitted)} smaller ones left out.`) : null);
}

function diffSection(diff) {
  const rows = [...diff.grew, ...diff.shrank];
  const t = sortableTable({ id: "pp-diff", prefix: "mp", rows, sortKey: "deltaBytes",
    expand: { has: (r) => r.stack.length > 0, toggleClass: "mp-toggle",
      row: (r, span) => el("tr", { class: "mp-detail" }, el("td", { colspan: span },
        el("ol", { class: "pp-stack" }, r.stack.map((f) => el("li", {}, siteText(f)))))) },
    columns: [
      { key: "site", label: "Made at", value: (r) => siteText(r.site) },
      { key: "deltaBytes", label: "Δ bytes", num: true, value: (r) => r.deltaBytes, show: (r) => el("span", { style: deltaStyle(r.deltaBytes) }, signedBytes(r.deltaBytes)) },
      { key: "deltaCount", label: "Δ count", num: true, value: (r) => r.deltaCount },
      { key: "bytes", label: "Now", num: true, value: (r) => r.bytes, show: (r) => fmtBytes(r.bytes) },
    ] });
  return el("div", { id: "pp-diff-section" },
    el("p", { class: "mp-hint" }, `Live bytes ${fmtBytes(diff.baseBytes)} → ${fmtBytes(diff.bytes)} (`,
      el("span", { style: deltaStyle(diff.deltaBytes) }, signedBytes(diff.deltaBytes)),
      `); ${n(diff.stacksChanged)} stacks changed. Click a row for its stack (outermost first).`), t.node);
}

function leave() {
  purge(charts);
  charts = [];
}

export default {
  tool: "memory_profile",
  accepts: (run) => run.kind === "pprof",
  css: ["pages/memory_profile.css"],
  keys: {
    profile: { resetOn: ["run", "tool"] },
    base_profile: { resetOn: ["run", "tool"] },
    ...COMPARE_KEYS, // base, base_host: another run as the base (docs/compare.md)
  },
  render,
  leave,
};
