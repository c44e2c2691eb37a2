// Steps & ops page: why is my step slow. Data: /data/plugin/profile/data?tag=steps_ops
// (the answer of /api/steps_ops, docs/steps_and_ops.md): the steps' time per device by
// category (`categories` is the stacking order; idle is drawn on top), and `ops`, the
// device ops ranked (HLO ops, kernels, framework ops) with their slowest occurrence.
// URL keys: step (the step whose ops the table shows, asked of the server as step=),
// within ("0": every occurrence, not only those inside steps), kind / category / module /
// device (the table's selectors; no kind: the device's own rows, see defaultKind; "all":
// every kind), opq (its filter box), sort ("-total_us": a column,
// "-" for descending), op (the row whose details are open). host=ALL_HOSTS (XProf's
// name) shows every host's step times side by side, the straggler host marked. base /
// base_host (another run, another host): the compare view (pages/steps_ops_compare.js).
// XProf's hlo_stats and op_profile open here too, on the HLO rows (kind=hlo): the same
// counts as XProf's tables (tests/test_op_table.py), with links XProf's JSON lacks.
import { el } from "../lib/dom.js";
import { go, readState, setUrl, stateUrl } from "../lib/state.js";
import { cachedJson, errorBox } from "../lib/api.js";
import { fmtCount, fmtDur, fmtShare } from "../lib/format.js";
import { P, SERIES } from "../lib/colors.js";
import { escapePlotly, LEGEND_TOP, newPlot, purge } from "../lib/plotly.js";
import { sortableTable } from "../lib/table.js";
import { COMPARE_KEYS, comparePicker, comparing } from "../lib/compare.js";
import { renderCompare } from "./steps_ops_compare.js";

const ALL_HOSTS = "ALL_HOSTS"; // XProf's name for every host at once (profile_plugin.py)
const IDLE_COLOR = P.silver;
const PAD_US = 50; // µs shown either side of an occurrence in the trace viewer's window
let charts = [];

function dataUrl(run, state) {
  const q = new URLSearchParams({ run: run.name, tag: "steps_ops" });
  if (state.host) q.set("host", state.host);
  if (state.within === "0") q.set("within_steps", "0");
  if (state.step && state.host !== ALL_HOSTS) q.set("step", state.step);
  return `/data/plugin/profile/data?${q}`;
}

const us = (v) => (v === null || v === undefined ? "—" : v >= 1e6 ? `${(v / 1e6).toFixed(3)} s` : v >= 1e3 ? `${(v / 1e3).toFixed(3)} ms` : `${v.toFixed(3)} µs`);
// A time axis in the unit its largest value reads best in (µs, ms, s), as fmtDur writes
// the page's other times: { label, div } (values in µs are divided by div).
function usUnit(maxUs) {
  return maxUs >= 1e6 ? { label: "s", div: 1e6 } : maxUs >= 1e3 ? { label: "ms", div: 1e3 } : { label: "µs", div: 1 };
}
// A log axis's ticks (µs values) at the powers of ten from lo to hi, each in its own unit
// ("100 µs", "1 ms", "10 s"): one unit for the whole axis would print 0.0001 s.
function logTicks(lo, hi) {
  const tickvals = [];
  for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) tickvals.push(10 ** e);
  return { tickvals, ticktext: tickvals.map((v) => fmtDur(v / 1e3)) };
}
// A device as the trace viewer names it: an xplane's plane ("/device:GPU:1"), a PyTorch
// GPU's name ("GPU 0"), else its id.
const deviceName = (dev) => String(dev.plane ?? dev.name ?? dev.device);
const stepLabel = (step) => (/^\d+$/.test(String(step)) ? `#${step}` : String(step)); // "#12", "train 0"
const opKey = (r) => [r.kind, r.program_id || "", r.name].join("|");

function link(state, text, attrs = {}) {
  return el("a", { href: stateUrl(state), onclick: (e) => { e.preventDefault(); go(state); }, ...attrs }, text);
}

async function renderStepsOps(view, state, run, details) {
  if (state.tool !== "steps_ops") { // XProf's op tools open this page on their HLO rows
    return go({ ...state, tool: "steps_ops", kind: state.kind || "hlo" }, { replace: true });
  }
  purge(charts);
  charts = [];
  const root = el("div", { class: "so" }, el("div", { class: "so-head" }, el("h1", {}, "Steps & ops"),
    el("span", { class: "muted" }, run.name), hostSwitch(state, details)),
  comparePicker(state, { ...run, hosts: details.hosts || run.hosts }, { tool: "steps_ops" }),
  el("p", { class: "muted", id: "so-loading" }, "Reading steps and ops…"));
  view.replaceChildren(root);
  if (comparing(state)) { // compared with a base (docs/compare.md): its own view
    root.lastChild.remove();
    charts = await renderCompare(view, root, state, run);
    return;
  }
  let data;
  try { data = await cachedJson(dataUrl(run, state)); } catch (err) {
    if (!view.contains(root)) return;
    root.lastChild.replaceWith(...[errorBox(err, "Cannot read the steps and ops of this run"),
      state.step ? el("p", {}, link({ ...state, step: "" }, "Show every step")) : null].filter((x) => x !== null));
    return;
  }
  if (!view.contains(root)) return; // the user moved on
  root.lastChild.remove();
  root.append(...[
    summaryTiles(data, state),
    data.summary && data.summary.missing ? el("div", { class: "note", id: "so-missing" }, el("strong", {}, "Missing: "), data.summary.missing) : null,
    data.hosts ? hostsSection(data, state) : null,
    stepsSection(data, state),
    data.hosts && !(data.ops || []).length
      ? el("p", { class: "muted", id: "so-ops-per-host" }, "The ops table is per host: pick one in the Host menu, or ", link({ ...state, host: details.hosts[0] }, "open the first"), ".")
      : opsSection(data, state, { ...run, modules: details.modules || [] }),
  ].filter((x) => x !== null));
  drawCharts(data, state);
}

// The run's hosts, and "All hosts" when it has several (host=ALL_HOSTS).
function hostSwitch(state, details) {
  if ((details.hosts || []).length < 2) return null;
  return state.host === ALL_HOSTS
    ? el("span", { class: "so-hosts" }, "all hosts · ", link({ ...state, host: details.hosts[0], step: "" }, "one host"))
    : el("span", { class: "so-hosts" }, link({ ...state, host: ALL_HOSTS, step: "", op: "" }, `All ${details.hosts.length} hosts`, { id: "so-all-hosts" }));
}

function tile(label, value, sub, id) {
  return el("div", { class: "so-tile", id }, el("div", { class: "label" }, label), el("div", { class: "value" }, value),
    sub ? el("div", { class: "sub" }, sub) : null);
}

function summaryTiles(d, state) {
  if (d.hosts) return hostsTiles(d);
  const s = d.summary || {};
  const names = new Map(d.steps.flatMap((st) => (st.devices || []).map((x) => [String(x.device), deviceName(x)])));
  const who = s.slowest_straggler ? s.slowest_straggler.device ?? s.slowest_straggler.host : null;
  const straggler = who !== null && who !== undefined ? `straggler: ${names.get(String(who)) ?? who}` : null;
  return el("div", { class: "so-tiles", id: "so-summary" },
    tile("Steps", fmtCount(s.steps ?? 0), s.step_source ? `found by ${s.step_source}` : d.source, "so-steps-count"),
    tile("Median step", us(s.median_us), s.p90_us !== undefined ? `p90 ${us(s.p90_us)}` : null),
    tile("Slowest step", s.slowest_step !== undefined ? stepLabel(s.slowest_step) : "—", s.slowest_us !== undefined ? [us(s.slowest_us), straggler ? ` · ${straggler}` : ""].join("") : null),
    opsTile(d, state),
    state.step ? tile("Selected step", stepLabel(state.step), link({ ...state, step: "" }, "show every step", { id: "so-clear-step" })) : null);
}

// The rows of the kind the table shows (the device's own by default), and every kind's
// count beside it: on the V100 trace 69 kernels, of 148 rows with the framework ops.
function opsTile(d, state) {
  const all = d.ops || [];
  const kind = state.kind || defaultKind(all);
  const shown = kind === ALL_KINDS ? all.length : all.filter((r) => r.kind === kind).length;
  const counts = new Map(Object.keys(KIND_NAMES).map((k) => [k, 0]));  // HLO ops, kernels, framework ops: that order
  for (const r of all) counts.set(r.kind, (counts.get(r.kind) || 0) + 1);
  const kinds = [...counts].filter(([, n]) => n);
  const label = kind === ALL_KINDS ? "Ops, every kind" : `Ops: ${KIND_NAMES[kind] || kind}`;
  const sub = kinds.length > 1 ? kinds.map(([k, n]) => `${fmtCount(n)} ${KIND_NAMES[k] || k}`).join(" · ") : null;
  return tile(label, fmtCount(shown), sub, "so-ops-count");
}

// host=ALL_HOSTS: what reads across hosts (one host's median or ops mean nothing here):
// how many hosts have steps, the slowest host by median step time (the straggler host),
// and the slowest step of any host.
function hostsTiles(d) {
  const withSteps = d.hosts.filter((h) => !unreadable(h) && h.steps > 0);
  const bad = d.hosts.filter(unreadable).length;
  const slowHost = d.hosts.find((h) => h.host === d.straggler_host)
    || withSteps.reduce((a, h) => (a && a.median_us >= h.median_us ? a : h), null);
  const slowStep = withSteps.reduce((a, h) => (a && a.slowest_us >= h.slowest_us ? a : h), null);
  const s = d.summary || {};
  return el("div", { class: "so-tiles", id: "so-summary" },
    tile("Hosts with steps", `${fmtCount(withSteps.length)} of ${fmtCount(d.hosts.length)}`,
      `${fmtCount(s.steps ?? 0)} steps${s.step_source ? `, found by ${s.step_source}` : ""}${bad ? ` · ${bad} unreadable` : ""}`, "so-hosts-count"),
    tile(d.straggler_host ? "Straggler host: median step" : "Slowest host: median step", slowHost ? us(slowHost.median_us) : "—",
      slowHost ? `${slowHost.host} · p90 ${us(slowHost.p90_us)}` : null, "so-slowest-host"),
    tile("Slowest step, any host", slowStep ? us(slowStep.slowest_us) : "—",
      slowStep ? `${stepLabel(slowStep.slowest_step)} on ${slowStep.host}` : null, "so-slowest-any"),
    tile("Ops", "per host", "pick a host in the Host menu"));
}

// Every host's step times side by side (helper A's hosts[] for host=ALL_HOSTS).
// A host whose file cannot be read is a row with its error (status "error", reason, file,
// as /api/trace_hosts has them): listed under the chart, the others drawn.
const unreadable = (h) => h.status === "error";

function hostsSection(d) {
  const bad = d.hosts.filter(unreadable);
  return el("section", {}, el("h2", {}, `Hosts (${d.hosts.length})`),
    d.straggler_host ? el("p", { class: "so-hint", id: "so-straggler-host" }, "Straggler host: ", el("strong", {}, d.straggler_host),
      " (the highest median step time); click a host's bars to open it.") : el("p", { class: "so-hint" }, "Click a host's bars to open it."),
    el("div", { class: "so-chart", id: "so-hosts-chart" }),
    bad.length ? el("ul", { class: "so-host-errors", id: "so-host-errors" }, bad.map((h) => el("li", {},
      el("strong", {}, h.host), ": cannot be read: ", h.reason,
      h.file && !String(h.reason).includes(h.file) ? el("span", { class: "muted" }, ` (${h.file})`) : null))) : null);
}

function stepsSection(d, state) {
  if (!(d.steps || []).length) {
    return el("section", {}, el("h2", {}, "Step time"), el("p", { class: "muted", id: "so-no-steps" },
      d.hosts ? "Pick a host for its steps by device." : "No steps to draw: the table below covers the whole profile."));
  }
  return el("section", {}, el("h2", {}, `Step time (${d.steps.length} steps)`),
    el("p", { class: "so-hint" }, "Device time per step by category, idle on top; click a bar to show that step's ops."),
    el("div", { class: "so-chart", id: "so-steps-chart" }), stepTable(d, state));
}

// The numbers behind the chart: one row per step and device (bound: what limits it); a
// step without devices (a CPU-only profile or trace) is one row, the host's step time.
// Made when first opened: a CPU-only profile's 44,000 steps are 264,000 cells.
function stepTable(d, state) {
  const rows = d.steps.flatMap((s) => ((s.devices || []).length ? s.devices : [null]).map((dev) => ({ s, dev })));
  const details = el("details", { class: "so-step-details" }, el("summary", {}, `Steps as a table (${fmtCount(rows.length)} rows)`));
  details.addEventListener("toggle", () => {
    if (!details.open || details.querySelector("table")) return;
    details.append(el("table", { class: "so-table", id: "so-step-table" },
      el("thead", {}, el("tr", {}, ["step", "device", "step time", "busy", "idle", "bound"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows.map(({ s, dev }) => el("tr", { class: String(s.step) === state.step ? "selected" : null, "data-step": s.step },
        el("td", {}, link({ ...state, step: String(s.step), op: "" }, stepLabel(s.step))), el("td", {}, dev ? deviceName(dev) : "host"),
        el("td", { class: "num" }, us(s.step_time_us)), el("td", { class: "num" }, dev ? us(dev.busy_us) : "—"),
        el("td", { class: "num" }, dev ? us(dev.idle_us) : "—"), el("td", {}, (dev && dev.bound) || "—"))))));
  });
  return details;
}

function drawCharts(d, state) {
  const steps = document.getElementById("so-steps-chart");
  if (steps) charts.push(drawSteps(steps, d, state));
  const hosts = document.getElementById("so-hosts-chart");
  if (hosts) charts.push(drawHosts(hosts, d));
}

// One bar per step (per step and device when there are several devices: Plotly's
// two-level category axis), the categories stacked in the answer's order, idle on top.
function drawSteps(div, d, state) {
  // an answer without `categories` (older PyTorch answers): the keys of time_us, in order
  const keys = d.categories || [...new Set(d.steps.flatMap((s) => (s.devices || []).flatMap((x) => Object.keys(x.time_us || {}))))];
  const cats = keys.map((c) => (typeof c === "string" ? { key: c, label: c } : c));
  const devices = [...new Set(d.steps.flatMap((s) => (s.devices || []).map((x) => String(x.device))))];
  const many = devices.length > 1;
  // no device in the steps (a CPU-only profile or trace): the host's step time alone
  const points = d.steps.flatMap((s) => ((s.devices || []).length ? s.devices : [{ device: "host", time_us: {}, idle_us: 0, host: s.step_time_us }]).map((dev) => ({ s, dev })));
  const x = many ? [points.map((p) => stepLabel(p.s.step)), points.map((p) => deviceName(p.dev))] : points.map((p) => stepLabel(p.s.step));
  // the stacks' tallest (categories, idle, the host's time) sets the axis's unit
  const unit = usUnit(Math.max(0, ...points.map((p) => Object.values(p.dev.time_us || {}).reduce((a, v) => a + v, 0) + (p.dev.idle_us || 0) + (p.dev.host || 0))));
  const selected = points.map((p) => (state.step && String(p.s.step) === state.step ? 1 : state.step ? 0.35 : 1));
  const bar = (name, color, y) => ({ type: "bar", name: escapePlotly(name), x, y: y.map((v) => v / unit.div), customdata: points.map((p) => String(p.s.step)),
    showlegend: y.some((v) => v > 0), // a category no step has is left out of the legend
    marker: { color, opacity: selected }, hovertext: y.map((v) => `${escapePlotly(name)} ${us(v)}`), hovertemplate: "%{x}: %{hovertext}<extra></extra>" });
  const traces = cats.map((c, i) => bar(c.label || c.key, SERIES[i % SERIES.length], points.map((p) => (p.dev.time_us || {})[c.key] || 0)));
  traces.push(bar("idle", IDLE_COLOR, points.map((p) => p.dev.idle_us || 0)));
  if (points.some((p) => p.dev.host !== undefined)) traces.push(bar("step time (host, no device)", P.neutral, points.map((p) => p.dev.host || 0)));
  // A series no step has draws nothing but still costs Plotly a bar per step: a CPU-only
  // profile's 44,000 steps made 8 x 44,000 empty and full bars, 35 s to draw in Chromium.
  const drawn = traces.filter((t) => t.showlegend);
  newPlot(div, drawn.length ? drawn : traces.slice(-1), { barmode: "stack", height: 320, margin: { l: 70, r: 20, t: 30, b: many ? 70 : 50 },
    yaxis: { title: { text: `step time (${unit.label})` } }, legend: LEGEND_TOP, showlegend: true });
  div.on("plotly_click", (ev) => {
    const step = ev.points && ev.points[0] && ev.points[0].customdata;
    if (step !== undefined) go({ ...readState(), step: step === readState().step ? "" : step, op: "" });
  });
  return div;
}

// Per host: its median, p90 and slowest step; the straggler host's bars outlined.
function drawHosts(div, all) {
  const d = { ...all, hosts: all.hosts.filter((h) => !unreadable(h)) };
  const hosts = d.hosts.map((h) => h.host);
  const marked = hosts.map((h) => (h === d.straggler_host ? 3 : 0));
  const names = hosts.map((h) => (h === d.straggler_host ? `${escapePlotly(h)} ★` : escapePlotly(h)));
  // hosts whose steps differ by orders of magnitude (a TPU host beside CPU ones): a log axis
  // (its ticks in µs, each labelled in its own unit), else one unit for the axis
  const times = d.hosts.flatMap((h) => [h.median_us, h.slowest_us]).filter((v) => v > 0);
  const log = times.length && Math.max(...times) > 100 * Math.min(...times);
  const unit = log ? { label: "log", div: 1 } : usUnit(Math.max(0, ...times));
  const bar = (name, key, color) => ({ type: "bar", name, x: names, y: d.hosts.map((h) => (h[key] ?? null) === null ? null : h[key] / unit.div),
    customdata: hosts, marker: { color, line: { width: marked, color: P.bad } },
    hovertext: d.hosts.map((h) => `${name} ${us(h[key])}`), hovertemplate: "%{x}: %{hovertext}<extra></extra>" });
  newPlot(div, [bar("median", "median_us", P.blue), bar("p90", "p90_us", P.orange), bar("slowest", "slowest_us", P.red)],
    { barmode: "group", height: 300, margin: { l: 70, r: 20, t: 30, b: 80 }, legend: LEGEND_TOP,
      yaxis: { title: { text: `step time (${unit.label})` }, type: log ? "log" : "linear",
        ...(log ? logTicks(Math.min(...times), Math.max(...times)) : {}) } });
  div.on("plotly_click", (ev) => {
    const host = ev.points && ev.points[0] && ev.points[0].customdata;
    if (host) go({ ...readState(), host, step: "", op: "" });
  });
  return div;
}

export default {
  tool: "steps_ops",
  // XProf's HLO op tools have no page of their own: their numbers are this table's HLO rows
  alsoFor: ["hlo_stats", "op_profile"],
  css: ["pages/steps_ops.css"],
  keys: {
    step: { resetOn: ["run", "tool", "host"] },
    within: { resetOn: ["run"] },
    kind: { resetOn: ["run"] },
    category: { resetOn: ["run", "kind"] },
    module: { resetOn: ["run"] },
    device: { resetOn: ["run", "host"] },
    opq: { resetOn: ["run"] },
    sort: {},
    op: { resetOn: ["run", "tool", "host"] },
    ...COMPARE_KEYS, // base, base_host: the compare view (pages/steps_ops_compare.js)
  },
  render: renderStepsOps,
};

// -- the ops table -----------------------------------------------------------------------

const COLUMNS = [
  { key: "name", label: "op", value: (r) => r.name, show: (r) => el("span", { class: "so-name", title: r.name }, r.name) },
  { key: "kind", label: "kind", value: (r) => r.kind },
  { key: "category", label: "category", value: (r) => r.category ?? "" },
  { key: "module", label: "module", value: (r) => r.module ?? "" },
  { key: "occurrences", label: "occurrences", num: true, value: (r) => r.occurrences, show: (r) => fmtCount(r.occurrences) },
  { key: "total_us", label: "total", num: true, value: (r) => r.total_us, show: (r) => us(r.total_us) },
  { key: "self_us", label: "self", num: true, value: (r) => r.self_us ?? -1, show: (r) => us(r.self_us) },
  { key: "average_us", label: "average", num: true, value: (r) => r.average_us ?? -1, show: (r) => us(r.average_us) },
  { key: "share", label: "share", num: true, value: (r) => r.share ?? -1, show: (r) => fmtShare(r.share) },
  { key: "roofline", label: "bound", value: (r) => (r.roofline ? r.roofline.bound : ""), show: (r) => (r.roofline ? r.roofline.bound : "—") },
];

const IN_STEP = { key: "in_step", label: "in step", num: true, value: (r) => (r.in_step ? r.in_step.total_us : -1),
  show: (r) => (r.in_step ? `${fmtCount(r.in_step.events)} × · ${us(r.in_step.total_us)}` : "—"),
  title: () => "this op's events on the XLA Ops line that start in the step, with their time as the timeline shows it" };

// the devices an op ran on (the answer's `devices`; its slowest occurrence's without them)
const devicesOf = (r) => (r.devices ? r.devices.map(String) : r.slowest && r.slowest.device !== null && r.slowest.device !== undefined ? [String(r.slowest.device)] : []);

function selector(id, label, key, values, state) {
  const options = [el("option", { value: "" }, `every ${label}`), ...values.map((v) => el("option", { value: v }, v))];
  const s = el("select", { id, "aria-label": label, onchange: () => go({ ...readState(), [key]: s.value, op: "" }) }, options);
  s.value = values.includes(state[key]) ? state[key] : "";
  return s;
}

// The kind the table shows without kind= in the URL: the device's own rows, whose shares
// add up to at most the device time (HLO ops where the xplane has them, else kernels).
// Framework ops nest over the same kernels (a backward op, its aten:: op, its child), and
// kernels run inside HLO ops: mixing kinds counts the same device time several times.
function defaultKind(all) {
  return [HLO_KIND, "kernel"].find((k) => all.some((r) => r.kind === k)) || ALL_KINDS;
}
const HLO_KIND = "hlo";
const KIND_NAMES = { hlo: "HLO ops", kernel: "kernels", framework: "framework ops" };
const ALL_KINDS = "all"; // kind=all: every kind, overlapping

function opsSection(d, state, run) {
  const all = d.ops || [];
  const uniq = (f) => [...new Set(all.map(f).filter(Boolean))].sort();
  const kind = state.kind || defaultKind(all);
  const rows = all.filter((r) => (kind === ALL_KINDS || r.kind === kind) && (!state.category || r.category === state.category)
    && (!state.module || r.module === state.module) && (!state.device || devicesOf(r).includes(state.device)));
  const sort = state.sort || "-total_us";
  // one step chosen on an xplane: the HLO rows' own events in it (`in_step`), a column
  const columns = all.some((r) => r.in_step) ? [...COLUMNS.slice(0, 5), IN_STEP, ...COLUMNS.slice(5)] : COLUMNS;
  const table = sortableTable({
    id: "so-ops", rows, columns, prefix: "so", sortKey: sort.replace(/^-/, ""), descending: sort.startsWith("-"),
    text: (r) => `${r.name} ${r.kind} ${r.category ?? ""} ${r.module ?? ""}`,
    filter: { id: "so-filter", placeholder: "filter ops", label: "filter ops", value: state.opq, onChange: (q) => setUrl({ ...readState(), opq: q }) },
    count: { id: "so-count", text: (m, n) => `${fmtCount(m)} of ${fmtCount(n)} ops` }, pageRows: 50,
    empty: (q) => (q ? `No op matches "${q}".` : all.length ? "No op of this kind, category, module or device." : "No device op in this profile (see Missing above)."),
    rowClass: (r) => (opKey(r) === state.op ? "selected" : null),
    onClick: (r) => go({ ...readState(), op: opKey(r) === readState().op ? "" : opKey(r) }),
  });
  // the sort the user clicks goes into the URL (the table keeps its own state)
  table.node.addEventListener("click", (e) => {
    const th = e.target.closest("th.sortable");
    if (!th) return;
    const now = table.node.querySelector('th[aria-sort="ascending"], th[aria-sort="descending"]');
    if (now) setUrl({ ...readState(), sort: `${now.getAttribute("aria-sort") === "descending" ? "-" : ""}${now.dataset.key}` });
  });
  const chosen = all.find((r) => opKey(r) === state.op);
  const hasSteps = (d.steps || []).length > 0 || Object.values(d.ops_scope || {}).includes("steps");
  return el("section", {}, el("h2", {}, state.step ? `Ops of step ${stepLabel(state.step)}` : "Ops, ranked"),
    el("div", { class: "so-controls" },
      kindSelector(uniq((r) => r.kind), kind),
      selector("so-category", "category", "category", uniq((r) => (kind === ALL_KINDS || r.kind === kind ? r.category : null)), state),
      selector("so-module", "module", "module", uniq((r) => r.module), state),
      selector("so-device", "device", "device", [...new Set(all.flatMap(devicesOf))].sort(), state),
      el("label", { class: "so-within", title: "only the occurrences inside steps (HLO rows are always the whole profile, as XProf counts them)" },
        el("input", { type: "checkbox", id: "so-within", checked: state.within !== "0" && hasSteps, disabled: !hasSteps && state.within !== "0",
          onchange: (e) => go({ ...readState(), within: e.target.checked ? "" : "0", op: "" }) }), " within steps only")),
    shareNote(d, kind, uniq((r) => r.kind)), scopeNote(d, state), chosen ? opDetails(chosen, d, state, run) : null, table.node);
}

// An HLO row whose module the run's memory viewer lists (the module picker's names): only
// then do its memory viewer and HLO view exist; a module without its proto has neither.
function listed(r, run) {
  return r.kind === "hlo" && !!r.module && (run.modules || []).includes(r.module);
}

// The op's line in its module's HLO text (the memory viewer's view=hlo), drawn once
// GET /api/hlo says the module has an instruction of that name (never a dead link);
// otherwise a muted note says why.
function hloLink(r, d, state, run) {
  if (!listed(r, run)) return null;
  const host = d.host || state.host;
  const q = new URLSearchParams({ run: run.name, module_name: r.module, instr: r.name });
  if (host) q.set("host", host);
  const spot = el("span", { id: "so-hlo-spot" });
  const none = (why) => spot.replaceChildren(" · ", el("span", { class: "muted", id: "so-hlo-none", title: why }, "no HLO text"));
  cachedJson(`/api/hlo?${q}`).then((a) => {
    if (!a.instruction) return none(`${r.module} has no instruction named ${r.name}`);
    const target = { run: run.name, tool: "memory_viewer", host: host || "", module_name: r.module, view: "hlo", instr: r.name };
    spot.replaceChildren(" · ", link(target, `HLO of ${r.name}`, { id: "so-hlo-link" }));
  }, (err) => none(`the HLO text could not be read: ${err.message || err}`));
  return spot;
}

// The kinds, each alone, and every kind at once (kind=all); the one shown is selected.
function kindSelector(kinds, kind) {
  const label = KIND_NAMES;
  // a kind= this run has no row of (an old link): still named, the table then says so
  const shown = kind === ALL_KINDS || kinds.includes(kind) ? kinds : [...kinds, kind];
  const options = [...shown.map((k) => el("option", { value: k }, label[k] || k)), el("option", { value: ALL_KINDS }, "every kind (overlapping)")];
  const s = el("select", { id: "so-kind", "aria-label": "kind", onchange: () => go({ ...readState(), kind: s.value, op: "" }) }, options);
  s.value = kind;
  return s;
}

// What the share column is of (the answer's share_of, per kind): said above the table.
function shareNote(d, kind, kinds) {
  const of = d.share_of || {};
  if (kind === ALL_KINDS && kinds.length === 1) kind = kinds[0]; // one kind in the table: its own words
  const text = kind === ALL_KINDS
    ? !kinds.length ? null : "Share: kinds overlap (a framework op's time is its kernels', a kernel runs inside an HLO op), so shares of different kinds do not add up."
    : of[kind] ? `Share: of ${of[kind]}.` : null;
  return text ? el("p", { class: "so-hint", id: "so-share-of" }, text) : null;
}

function scopeNote(d, state) {
  const scope = d.ops_scope || {};
  if (!state.step || scope.hlo !== "profile") return null;
  return el("p", { class: "so-hint", id: "so-scope-note" }, "HLO rows count the whole profile (XProf's op metrics keep no step per occurrence); ",
    "their \"in step\" column is the op's events of this step on the XLA Ops line; kernels and framework ops are this step's.");
}

// One op: its numbers, and links to its slowest occurrence in the trace viewer and, for
// an HLO op of a module the run's memory viewer lists (run.modules), to its buffers there
// and to its line in the module's HLO text (hloLink).
function opDetails(r, d, state, run) {
  const s = r.slowest;
  const trace = s ? { ...state, tool: "trace_viewer@", host: s.host || d.host || state.host, start_ms: String((s.start_us - PAD_US) / 1e3),
    end_ms: String((s.start_us + s.dur_us + PAD_US) / 1e3), ev: String(s.event_id), op: "", step: "", opq: "" } : null;
  const chartCat = r.step_category ? ((d.categories || []).find((c) => c.key === r.step_category) || { label: r.step_category }).label : null;
  const facts = [["kind", r.kind], ["category", r.category], ["in the step chart", chartCat], ["module", r.module], ["occurrences", fmtCount(r.occurrences)],
    ["total", us(r.total_us)], ["self", us(r.self_us)], ["average", us(r.average_us)], ["share", fmtShare(r.share)],
    ["host time", r.host_us !== undefined ? us(r.host_us) : null], ["framework op", r.framework_op],
    ["FLOPs", r.flops !== null && r.flops !== undefined ? fmtCount(r.flops) : null],
    ["bytes accessed", r.bytes_accessed !== null && r.bytes_accessed !== undefined ? fmtCount(r.bytes_accessed) : null],
    ["roofline", r.roofline ? `${r.roofline.bound}-bound: ${r.roofline.intensity.toFixed(3)} FLOP/byte, ridge ${r.roofline.ridge.toFixed(1)}` : null],
    ["devices", (r.devices || []).join(", ") || null],
    ["in this step", r.in_step ? `${fmtCount(r.in_step.events)} events, ${us(r.in_step.total_us)} on the XLA Ops line` : null],
    ["slowest", s ? `${us(s.dur_us)} at ${us(s.start_us)} on ${s.device ?? ""} ${s.track}` : null]].filter(([, v]) => v !== null && v !== undefined && v !== "");
  return el("div", { class: "so-op", id: "so-op" }, el("h3", {}, r.name),
    el("dl", {}, facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])),
    el("div", { class: "so-links" },
      trace ? link(trace, "Open the slowest occurrence in the trace viewer", { id: "so-trace-link" }) : el("span", { class: "muted" }, "no occurrence located in the timeline"),
      listed(r, run) ? [" · ", link({ ...state, tool: "memory_viewer", module_name: r.module, hlo_op: r.name, op: "", step: "" }, `Memory viewer of ${r.module}`, { id: "so-memory-link" })] : null,
      hloLink(r, d, state, run),
      " · ", link({ ...state, op: "" }, "close")));
}

