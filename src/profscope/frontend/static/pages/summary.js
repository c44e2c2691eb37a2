// Summary page: what is wrong with this run and what to do, the page a run opens on.
// Data: /data/plugin/profile/data?tag=summary (tools/analysis.py summarize(), the JSON of
// docs/analysis.md): status (OPTIMAL / NEEDS_ATTENTION / NOT_ASSESSED), the summary sentences, the key
// metrics, findings P0 first (each with what / evidence / impact / fix; every evidence
// link is a dashboard URL query string that opens the exact view), hosts[] for
// host=ALL_HOSTS (worst host first), refused[] (parts that could not be read). The page
// only displays: every number and sentence comes from the answer.
// URL keys: finding ("<id>" or "<id>@<host>": the finding open and scrolled to); capacity
// (the OOM risk page's key: a size, a byte count or a device name, sent as the tool's
// device_memory, for runs that name no capacity, a snapshot); host is the shell's
// (ALL_HOSTS: every host at once, XProf's name).
import { el } from "../lib/dom.js";
import { go, readState, stateUrl } from "../lib/state.js";
import { cachedJson, errorBox } from "../lib/api.js";
import { fmtBytes, fmtCount, fmtShare } from "../lib/format.js";
import { P, RISK, SERIES } from "../lib/colors.js";
import { unreadableNote } from "./overview.js";
import { COMPARE_KEYS, comparePicker, comparing } from "../lib/compare.js";
import { whatChanged } from "./what_changed.js";

const ALL_HOSTS = "ALL_HOSTS"; // XProf's name for every host at once (profile_plugin.py)
// A status or priority in the OOM-risk tiers' colours: P0 as the HIGH tier, P1 as MEDIUM;
// NOT_ASSESSED (nothing of the run could be read) as UNKNOWN, grey, never a green verdict.
const STATUS_COLOR = { OPTIMAL: RISK.LOW, NEEDS_ATTENTION: RISK.HIGH, NOT_ASSESSED: RISK.UNKNOWN };
const statusText = (status) => status.replaceAll("_", " ");
const PRIORITY_COLOR = { P0: RISK.HIGH, P1: RISK.MEDIUM, P2: P.band };
const PRIORITY_WORDS = { P0: "critical", P1: "major", P2: "minor" };
const AREA_WORDS = { time: "step time", memory: "memory", compiler: "compiler" };
const IDLE_COLOR = P.silver; // idle as Steps & ops draws it (steps_ops.js)
const INPUT_WORDS = { steps_ops: "Steps & ops", oom_risk: "OOM risk", memory_profile: "memory profile", hlo: "HLO modules" };

function dataUrl(run, state) {
  const q = new URLSearchParams({ run: run.name, tag: "summary" });
  if (state.host) q.set("host", state.host);
  const cap = (state.capacity || "").trim();
  if (cap) q.set("device_memory", cap);
  return `/data/plugin/profile/data?${q}`;
}

const us = (v) => (v === null || v === undefined ? "—" : v >= 1e6 ? `${(v / 1e6).toFixed(3)} s` : v >= 1e3 ? `${(v / 1e3).toFixed(3)} ms` : `${v.toFixed(3)} µs`);
const stepLabel = (step) => (/^\d+$/.test(String(step)) ? `#${step}` : String(step));
const findingKey = (f) => (f.host ? `${f.id}@${f.host}` : f.id);

function link(state, text, attrs = {}) {
  return el("a", { href: stateUrl(state), onclick: (e) => { e.preventDefault(); go(state); }, ...attrs }, text);
}

// An evidence link: the answer's own dashboard query string ("?run=R&tool=steps_ops&step=3"),
// opened in place (its keys are the pages' declared URL keys).
function evidenceLink(query, text) {
  const state = Object.fromEntries(new URLSearchParams(query));
  return el("a", { href: query, class: "sm-open", onclick: (e) => { e.preventDefault(); go(state); } }, text);
}

function badge(text, color, attrs = {}) {
  return el("span", { class: "sm-badge", style: `background: ${color}`, ...attrs }, text);
}

async function render(view, state, run, details, shell) {
  const note = unreadableNote(state, run, shell); // the log directory's runs that cannot be read
  const root = el("div", { class: "sm" }, note,
    el("div", { class: "sm-head" }, el("h1", { id: "run-title" }, run.name), el("span", { class: "muted" }, "Summary"),
      hostSwitch(state, details), link({ ...state, tool: "overview", finding: "" }, "Run overview", { id: "sm-overview-link", class: "sm-small" })),
    comparePicker(state, { ...run, hosts: details.hosts || run.hosts }, { tool: "summary" }),
    // "What changed" against the base the picker chose (docs/compare.md), above the run's own summary
    comparing(state) ? el("section", { class: "cmp-section", id: "cmp-section" }) : null,
    el("p", { class: "muted", id: "sm-loading" }, "Reading the run's steps, ops and memory…"));
  view.replaceChildren(root);
  if (comparing(state)) whatChanged(root.querySelector("#cmp-section"), dataUrl(run, state), state);
  let data;
  try { data = await cachedJson(dataUrl(run, state)); } catch (err) {
    if (view.contains(root)) {
      root.lastChild.replaceWith(...[errorBox(err, "Cannot summarise this run"),
        state.capacity ? el("p", {}, link({ ...state, capacity: "" }, "Summarise without the capacity given", { id: "sm-clear-capacity" })) : null].filter((x) => x !== null));
    }
    return;
  }
  if (!view.contains(root)) return; // the user moved on
  // A multi-host profile's summary is of every host by default (docs/analysis.md, "All
  // hosts"): the URL and the Host picker say so rather than naming the first host.
  if (!state.host && data.host === ALL_HOSTS) return go({ ...state, host: ALL_HOSTS }, { replace: true });
  root.lastChild.remove();
  const head = root.querySelector(".sm-head");
  head.insertBefore(badge(statusText(data.status), STATUS_COLOR[data.status] || P.neutral,
    { id: "sm-status", "data-status": data.status }), head.children[1]);
  root.append(...[
    el("p", { class: "sm-summary", id: "sm-summary" }, data.summary),
    (data.refused || []).length ? refusedNote(data.refused) : null, // what the numbers below leave out
    metricTiles(data, state),
    categoryBar(data.metrics && data.metrics.categories),
    data.hosts ? hostsTable(data, state) : null,
    findingsSection(data, state),
    inputsLine(data),
  ].filter((x) => x !== null));
  const open = state.finding && root.querySelector(`[data-key="${CSS.escape(state.finding)}"]`);
  if (open) open.scrollIntoView({ block: "start" });
}

// The run's hosts, and "All hosts" when it has several (host=ALL_HOSTS).
function hostSwitch(state, details) {
  if ((details.hosts || []).length < 2) return null;
  return state.host === ALL_HOSTS
    ? el("span", { class: "sm-small" }, "all hosts · ", link({ ...state, host: details.hosts[0], finding: "" }, "one host"))
    : el("span", { class: "sm-small" }, link({ ...state, host: ALL_HOSTS, finding: "" }, `All ${details.hosts.length} hosts`, { id: "sm-all-hosts" }));
}

function tile(label, value, sub, id) {
  return el("div", { class: "sm-tile", id }, el("div", { class: "label" }, label), el("div", { class: "value" }, value),
    sub ? el("div", { class: "sub" }, sub) : null);
}

// The key metrics: step time, device busy/idle, peak memory vs capacity with its tier,
// roofline; a part the answer has no numbers for is left out (its input is in `inputs`).
function metricTiles(d, state) {
  const m = d.metrics || {};
  const s = m.steps;
  const dev = m.device;
  const mem = m.memory;
  const roof = m.roofline;
  const stepsState = { ...state, tool: "steps_ops", finding: "" };
  const tiles = [
    s ? tile("Steps", fmtCount(s.count), s.step_source ? `found by ${s.step_source}` : null, "sm-steps") : null,
    s ? tile("Median step", us(s.median_us), s.p90_us !== null && s.p90_us !== undefined ? `p90 ${us(s.p90_us)}` : null, "sm-median") : null,
    s && s.slowest_step !== null && s.slowest_step !== undefined
      ? tile("Slowest step", us(s.slowest_us), d.host === ALL_HOSTS ? stepLabel(s.slowest_step)
        : link({ ...stepsState, step: String(s.slowest_step) }, `${stepLabel(s.slowest_step)} in Steps & ops`, { id: "sm-slowest-link" }), "sm-slowest") : null,
    dev ? tile("Device busy", fmtShare(dev.busy_share), `idle ${fmtShare(dev.idle_share)}`, "sm-device") : null,
    mem ? tile("Peak memory", fmtBytes(mem.peak_bytes), [
      mem.capacity_bytes ? `of ${fmtBytes(mem.capacity_bytes)} (${fmtShare(mem.utilization)})` : "capacity unknown",
      ...(mem.risk ? [" · ", badge(mem.risk, RISK[mem.risk] || P.neutral, { class: "sm-badge small", id: "sm-risk" })] : []),
      mem.source ? el("div", {}, mem.source) : null,
      !mem.capacity_bytes || state.capacity ? capacityForm(state) : null], "sm-memory") : null,
    roof ? tile("Roofline", roof.flops_utilization !== null && roof.flops_utilization !== undefined ? `${fmtShare(roof.flops_utilization)} of peak FLOPs` : "—",
      roof.hbm_utilization !== null && roof.hbm_utilization !== undefined ? `${fmtShare(roof.hbm_utilization)} of peak HBM bandwidth` : null, "sm-roofline") : null,
  ].filter((x) => x !== null);
  return tiles.length ? el("div", { class: "sm-tiles", id: "sm-metrics" }, tiles)
    : el("p", { class: "muted", id: "sm-metrics" }, "No step or memory numbers in this run.");
}

// The device's memory where the run names none (a snapshot), as the OOM risk page asks it:
// the memory rules then rate the peak against it.
function capacityForm(state) {
  const input = el("input", { id: "sm-capacity", type: "text", value: state.capacity || "", size: 10,
    placeholder: "80GiB, H100…", "aria-label": "device memory" });
  const apply = () => go({ ...readState(), capacity: input.value.trim() });
  input.addEventListener("keydown", (e) => { if (e.key === "Enter") apply(); });
  return el("div", { class: "sm-capacity" }, el("label", { for: "sm-capacity" }, "device memory "), input,
    el("button", { type: "button", onclick: apply }, "Apply"),
    state.capacity ? el("button", { type: "button", onclick: () => go({ ...readState(), capacity: "" }) }, "Clear") : null);
}

// Where step time goes (device time per step of the median step, by category), as one
// stacked bar with its legend: plain boxes, no chart library.
function categoryBar(cats) {
  const shown = (cats || []).filter((c) => c.share > 0);
  if (!shown.length) return null;
  const color = (i) => (shown[i].key === "idle" ? IDLE_COLOR : SERIES[i % SERIES.length]);
  return el("section", { id: "sm-categories" }, el("h2", {}, "Where step time goes"),
    el("div", { class: "sm-bar", role: "img", "aria-label": shown.map((c) => `${c.label} ${fmtShare(c.share)}`).join(", ") },
      shown.map((c, i) => el("span", { style: `width: ${(100 * c.share).toFixed(2)}%; background: ${color(i)}`, title: `${c.label}: ${us(c.us)} (${fmtShare(c.share)})`, "data-key": c.key }))),
    el("ul", { class: "sm-legend" }, shown.map((c, i) => el("li", {}, el("span", { class: "sm-swatch", style: `background: ${color(i)}` }),
      `${c.label} ${fmtShare(c.share)}`, el("span", { class: "muted" }, ` ${us(c.us)}`)))));
}

function refusedNote(refused) {
  return el("div", { class: "note", id: "sm-refused", role: "status" },
    `${refused.length === 1 ? "A part" : `${refused.length} parts`} of this run could not be read; the summary is made from the rest:`,
    el("ul", {}, refused.map((x) => el("li", {}, el("code", {}, x.file), el("span", { class: "unreadable" }, `: ${x.reason}`)))));
}

// host=ALL_HOSTS: every host's status and finding counts, worst host first; a host opens
// its own summary.
function hostsTable(d, state) {
  return el("section", {}, el("h2", {}, `Hosts (${d.hosts.length})`),
    el("table", { class: "sm-table", id: "sm-hosts" },
      el("thead", {}, el("tr", {}, ["host", "status", "P0", "P1", "P2", "median step", "peak memory"].map((h, i) => el("th", { class: i > 1 ? "num" : null }, h)))),
      el("tbody", {}, d.hosts.map((h) => el("tr", { "data-host": h.host },
        el("td", {}, link({ ...state, host: h.host, finding: "" }, h.host)),
        el("td", {}, h.error ? el("span", { class: "unreadable" }, `cannot be read: ${h.error}`) : badge(statusText(h.status), STATUS_COLOR[h.status] || P.neutral, { class: "sm-badge small" })),
        ...["P0", "P1", "P2"].map((p) => el("td", { class: "num" }, h.counts && !h.error ? fmtCount(h.counts[p]) : "—")),
        el("td", { class: "num" }, us(h.median_us)), el("td", { class: "num" }, h.peak_bytes === null || h.peak_bytes === undefined ? "—" : fmtBytes(h.peak_bytes)))))));
}

function findingsSection(d, state) {
  const findings = d.findings || [];
  const counts = ["P0", "P1", "P2"].map((p) => [p, findings.filter((f) => f.priority === p).length]).filter(([, n]) => n);
  return el("section", { id: "sm-findings" },
    el("h2", {}, `Findings (${findings.length})`, counts.length ? el("span", { class: "muted sm-counts" }, ` ${counts.map(([p, n]) => `${n} ${p}`).join(" · ")}`) : null),
    findings.length ? findings.map((f) => finding(f, state, d))
      : d.status === "NOT_ASSESSED" ? el("p", { class: "muted", id: "sm-no-findings" }, "No rule could run: nothing of this run was read.")
        : el("p", { class: "sm-none", id: "sm-no-findings" }, "No finding: none of the rules fired on this run."));
}

function finding(f, state, d) {
  const key = findingKey(f);
  const open = state.finding === key;
  const impact = f.impact || {};
  return el("article", { class: `sm-finding${open ? " selected" : ""}`, "data-key": key, "data-id": f.id, "data-priority": f.priority,
    style: `border-left-color: ${PRIORITY_COLOR[f.priority] || P.neutral}` },
    el("header", {},
      badge(f.priority, PRIORITY_COLOR[f.priority] || P.neutral, { class: "sm-badge small", title: PRIORITY_WORDS[f.priority] }),
      link({ ...state, finding: open ? "" : key }, f.title, { class: "sm-title" }),
      el("span", { class: "muted sm-small" }, ` ${AREA_WORDS[f.area] || f.area}${f.host && d.host === ALL_HOSTS ? ` · ${f.host}` : ""}`)),
    el("dl", {},
      el("dt", {}, "What"), el("dd", { class: "sm-what" }, f.what),
      el("dt", {}, "Evidence"), el("dd", {}, el("ul", { class: "sm-evidence" }, (f.evidence || []).map((x) => el("li", {},
        el("span", { class: "muted" }, `${x.label}: `), x.link ? evidenceLink(x.link, x.value) : x.value)))),
      el("dt", {}, "Impact"), el("dd", { class: "sm-impact" }, impact.text || "—"),
      el("dt", {}, "Fix"), el("dd", { class: "sm-fix" }, f.fix)));
}

function inputsLine(d) {
  const inputs = Object.entries(d.inputs || {});
  if (!inputs.length) return null;
  return el("p", { class: "muted sm-small", id: "sm-inputs" }, "Made from: ",
    inputs.map(([k, v]) => `${INPUT_WORDS[k] || k} ${v ? "✓" : "—"}`).join(" · "));
}

export default {
  tool: "summary",
  css: ["pages/summary.css"],
  keys: { finding: { resetOn: ["run", "tool", "host"] }, capacity: {}, ...COMPARE_KEYS },
  render,
};
