// OOM risk page: will it fit, and what to cut. Data: /data/plugin/profile/data?tag=oom_risk
// (tools/oom_risk.py's payload). URL keys: capacity (a size such as 80GiB, a byte count,
// or a device name such as H100; sent as the tool's device_memory, which reads all
// three, so a bad value's message names the device memory, not a parameter); the shell's
// module_name (the module assessed; default: the worst step module, docs/oom_risk.md) and host.
// Every contributor and finding links into the memory viewer (module_name + buffer) or
// the memory profile (memory_id + t, or a snapshot's device + event) at its evidence.
import { el } from "../lib/dom.js";
import { go, readState, stateUrl } from "../lib/state.js";
import { cachedJson, errorBox } from "../lib/api.js";
import { byteUnit, fmtBytes, fmtCount as n, fmtShare as pct } from "../lib/format.js";
import { OOM_CATEGORY as CATEGORY_COLORS, P, RISK as RISK_COLORS, RISK_ZONE } from "../lib/colors.js";
import { newPlot, purge } from "../lib/plotly.js";
import { PLAN_KEYS, jaxControl, planParams, planSection } from "./oom_risk_plan.js";
import { COMPARE_KEYS, comparePicker, comparing } from "../lib/compare.js";
import { whatChanged } from "./what_changed.js";

let charts = [];

function dataUrl(run, state) {
  const q = new URLSearchParams({ run: run.name, tag: "oom_risk" });
  if (state.host) q.set("host", state.host);
  if (state.module_name) q.set("module_name", state.module_name);
  const cap = (state.capacity || "").trim();
  if (cap) q.set("device_memory", cap);
  planParams(q, state); // batch=, shards= (oom_risk_plan.js)
  return `/data/plugin/profile/data?${q}`;
}

// A link object from the payload ({tool, module_name, buffer, memory_id, host, t, q})
// as a dashboard state: the same run, the evidence's tool and selection.
function linkState(link) {
  const s = { ...readState(), module_name: "", buffer: "", memory_id: "", t: "", q: "" };
  for (const k of ["tool", "module_name", "buffer", "memory_id", "host", "t", "q"]) if (link[k] !== undefined && link[k] !== null) s[k] = String(link[k]);
  return s;
}

function linkTo(link, text) {
  const s = linkState(link);
  return el("a", { href: stateUrl(s), class: "oom-link", onclick: (e) => { e.preventDefault(); go(s); } }, text || link.label || link.tool);
}

async function renderOomRisk(view, state, run) {
  purge(charts);
  charts = [];
  const root = el("div", { class: "oom" },
    el("div", { class: "oom-head" }, el("h1", {}, "OOM risk"), el("span", { class: "muted" }, run.name)),
    capacityForm(state),
    comparePicker(state, run, { tool: "oom_risk", modules: true }),
    // "What changed" against the base the picker chose (docs/compare.md), above the run's own answer
    comparing(state) ? el("section", { class: "cmp-section", id: "cmp-section" }) : null,
    el("p", { class: "muted", id: "oom-loading" }, "Assessing…"));
  if (comparing(state)) whatChanged(root.querySelector("#cmp-section"), dataUrl(run, state), state);
  // The tiers' colours for oom_risk.css (var(--risk-high), ...): the stylesheet cannot read
  // palette.json, and the report draws with the same colours.
  for (const [tier, color] of Object.entries(RISK_COLORS)) root.style.setProperty(`--risk-${tier.toLowerCase()}`, color);
  view.replaceChildren(root);
  let data;
  try { data = await cachedJson(dataUrl(run, state)); } catch (err) {
    if (!view.contains(root)) return;
    root.lastChild.replaceWith(errorBox(err, "Cannot assess this run"));
    return;
  }
  if (!view.contains(root)) return; // the user moved on
  root.lastChild.remove();
  root.append(...[
    headline(data),
    tiles(data),
    (data.hosts || []).length > 1 ? el("h2", {}, `Hosts (${data.hosts.length})`) : null,
    hostTable(data),
    el("div", { class: "oom-gauge" }, el("div", { class: "oom-gauge-label", id: "oom-gauge-label" }, gaugeLabel(data)),
      el("div", { id: "oom-gauge" })),
    el("h2", {}, `Findings (${data.findings.length})`), findings(data),
    planSection(data, linkTo),
    el("h2", {}, "Contributors at the peak"),
    el("p", { class: "oom-hint" }, `From the ${data.contributorsSource || "—"}. Each buffer sits in the first category whose rule matches (docs/oom_risk.md); click a box to open it.`),
    // Why the contributors are empty, unknown or from another figure (the tool says it).
    data.contributorsNote ? el("p", { class: "oom-note", id: "oom-contributors-note" }, data.contributorsNote) : null,
    el("div", { class: "oom-treemap", id: "oom-treemap" }),
    contributorTable(data),
    data.modules.length ? el("h2", {}, `Modules (${data.modules.length})`) : null,
    data.modules.length ? moduleTable(data, state) : null,
    el("h2", {}, "Peaks and fragmentation"),
    el("p", { class: "oom-hint" }, "Every peak the inputs state, each labelled with what it counts; the largest rates the run."),
    usageTable(data)].filter((x) => x !== null)); // append() would write "null"
  drawGauge(data);
  drawTreemap(data);
}

function capacityForm(state) {
  const input = el("input", { id: "oom-capacity", type: "text", value: state.capacity || "", size: 22,
    placeholder: "80GiB, 40GB, H100, bytes…", "aria-label": "device capacity" });
  const apply = () => go({ ...readState(), capacity: input.value.trim() });
  input.addEventListener("keydown", (e) => { if (e.key === "Enter") apply(); });
  return el("div", { class: "oom-capacity" },
    el("label", { for: "oom-capacity" }, "Capacity"), input,
    el("button", { type: "button", id: "oom-apply", onclick: apply }, "Apply"),
    state.capacity ? el("button", { type: "button", onclick: () => go({ ...readState(), capacity: "" }) }, "Clear") : null,
    el("span", { class: "muted small" }, "a size (80GiB = 80×2³⁰ bytes, 80GB = 80×10⁹), a byte count, or a device name; it goes into the URL"),
    jaxControl(state));
}

function headline(d) {
  return el("div", { class: "oom-headline", id: "oom-headline" },
    el("span", { class: "oom-risk", id: "oom-risk", style: `background:${RISK_COLORS[d.risk]}` }, d.risk),
    el("span", { class: "oom-reason" }, d.reason),
    d.module ? el("span", { class: "muted small", id: "oom-module", title: moduleWhy(d) }, "module ", el("code", {}, d.module),
      d.moduleChoice ? ` · ${d.moduleChoice.rule}` : "") : null,
    d.host && (d.hosts || []).length > 1 ? el("span", { class: "muted small", id: "oom-host" }, "host ", el("code", {}, d.host),
      readState().host ? "" : " (the worst of the run's hosts)") : null,
    overCapacity(d));
}

// Every module over capacity, named under the verdict (tools/oom_risk.py overCapacity):
// each fails when it runs, whichever module rates the run.
function overCapacity(d) {
  const over = d.overCapacity || [];
  if (!over.length) return null;
  return el("div", { class: "oom-over", id: "oom-over" }, `Over capacity (${over.length}): `,
    over.flatMap((o, i) => [i ? ", " : "", linkTo({ tool: "memory_viewer", module_name: o.moduleName }, o.moduleName),
      ` ${fmtBytes(o.peakBytes)} (${pct(o.utilization)})`]));
}

// Why this module was assessed (tools/oom_risk.py's moduleChoice): the worst step
// module, else the one that ran most in the profile, else the largest peak.
function moduleWhy(d) {
  const c = d.moduleChoice;
  if (!c) return "";
  const ms = c.ps ? ` (it ran ${(c.ps / 1e9).toFixed(3)} ms over ${n(c.events)} ${c.source || "events"})` : "";
  const of = c.steps ? `: the highest peak of ${c.steps.length} step module(s), ${c.steps.join(", ")}` : "";
  return `Assessed by the rule "${c.rule}"${of}${ms}; pick another in the module table below.`;
}

// A multi-host run is rated by its worst host; each host's verdict, one click to it.
function hostTable(d) {
  const hosts = d.hosts || [];
  if (hosts.length < 2) return null;
  return el("table", { class: "oom-table", id: "oom-hosts" },
    el("thead", {}, el("tr", {}, ...["host", "risk", "peak", "capacity", "source", "utilization", "findings"]
      .map((h, i) => el("th", { class: i >= 2 && i !== 4 ? "num" : "" }, h)))),
    el("tbody", {}, hosts.map((h) => el("tr", { class: h.host === d.host ? "selected" : "" },
      el("td", {}, el("a", { href: stateUrl({ ...readState(), host: h.host }), onclick: (e) => { e.preventDefault(); go({ ...readState(), host: h.host }); } }, h.host)),
      el("td", {}, h.risk ? el("span", { class: "oom-risk small", style: `background:${RISK_COLORS[h.risk] || RISK_COLORS.UNKNOWN}` }, h.risk) : (h.error || h.problem || "—")),
      el("td", { class: "num" }, h.peakBytes === undefined || h.peakBytes === null ? "—" : fmtBytes(h.peakBytes)),
      el("td", { class: "num" }, h.capacityBytes === undefined || h.capacityBytes === null ? "—" : fmtBytes(h.capacityBytes)),
      el("td", {}, h.capacitySource || "—"),
      el("td", { class: "num" }, pct(h.utilization)),
      el("td", { class: "num" }, n((h.findings || []).length))))));
}

function tiles(d) {
  const t = (label, value, sub, id) => el("div", { class: "oom-tile", id }, el("div", { class: "label" }, label), el("div", { class: "value" }, value), sub ? el("div", { class: "sub" }, sub) : null);
  return el("div", { class: "oom-tiles" },
    t(d.peakMeasure || "peak", fmtBytes(d.peakBytes), `${n(d.peakBytes)} bytes · ${d.peakSource || ""}`, "oom-peak"),
    t("capacity", d.capacityBytes === null ? "unknown" : fmtBytes(d.capacityBytes),
      d.capacitySource ? `${d.capacitySource}: ${d.capacityDetail}` : el("span", {}, "enter the device's memory above, or start profscope with ", el("code", { class: "nowrap" }, "--device-memory")), "oom-cap"),
    t("utilization", pct(d.utilization), null, "oom-util"),
    t("headroom", d.headroomBytes === null ? "—" : fmtBytes(d.headroomBytes), d.headroomBytes === null ? null : `${n(d.headroomBytes)} bytes`, "oom-headroom"),
    t("thresholds", `MEDIUM ≥ ${Math.round(100 * d.thresholds.medium)} %, HIGH ≥ ${Math.round(100 * d.thresholds.high)} %`, "OOM: an OOM event, or peak > capacity", "oom-thresholds"));
}

// What the gauge measures, written above it in the page's own text: Plotly's indicator
// puts its title left of a bullet gauge, right-aligned in the left margin, and cuts off
// whatever is wider than that margin ("ak allocated 2.60 GiB of 31.7 GiB").
function gaugeLabel(d) {
  const what = d.peakMeasure || "peak";
  return d.capacityBytes ? `${what} ${fmtBytes(d.peakBytes)} of ${fmtBytes(d.capacityBytes)}` : `${what} (no capacity: the gauge needs one)`;
}

function drawGauge(d) {
  const div = document.getElementById("oom-gauge");
  if (!window.Plotly || !div) return;
  const th = d.thresholds;
  let trace;
  if (d.capacityBytes) {
    const u = 100 * d.utilization;
    const top = Math.max(100, Math.ceil(u * 1.1 / 10) * 10);
    trace = { type: "indicator", mode: "gauge+number", value: u, number: { suffix: " %", valueformat: ".1f", font: { size: 30 } },
      gauge: { shape: "bullet", axis: { range: [0, top], ticksuffix: " %" }, bar: { color: RISK_COLORS[d.risk], thickness: 0.45 },
        steps: [{ range: [0, 100 * th.medium], color: RISK_ZONE.LOW }, { range: [100 * th.medium, 100 * th.high], color: RISK_ZONE.MEDIUM },
          { range: [100 * th.high, 100], color: RISK_ZONE.HIGH }, { range: [100, top], color: RISK_ZONE.OOM }],
        threshold: { line: { color: P.fg, width: 3 }, thickness: 0.9, value: 100 } } };
  } else {
    // The card's unit and digits (fmtBytes: two decimals under 10, one above), so the
    // two read the same number: Plotly's number format knows no binary units.
    const u = byteUnit(d.peakBytes || 1), v = (d.peakBytes || 0) / u.div;
    trace = { type: "indicator", mode: "number", value: v,
      number: { suffix: ` ${u.label}`, valueformat: u.div === 1 ? ".0f" : v < 10 ? ".2f" : ".1f" } };
  }
  newPlot(div, [trace], { height: 100, margin: { l: 30, r: 30, t: 10, b: 30 } }, { displayModeBar: false });
  charts.push(div);
}

function drawTreemap(d) {
  const div = document.getElementById("oom-treemap");
  if (!window.Plotly || !div || !d.contributors.length) return;
  // The root is the figure the contributors break down (contributorsMeasure: the compiler's
  // peak when the runtime peak has no breakdown), not always the run's peak.
  const root = `${d.contributorsMeasure || d.peakMeasure || "peak"} ${fmtBytes(d.contributorsPeakBytes ?? d.peakBytes)}`;
  const ids = ["peak"], labels = [root], parents = [""], values = [d.contributors.reduce((a, c) => a + c.bytes, 0)];
  const colors = ["#fff"], hover = [`${n(values[0])} bytes at the peak`], links = [null];
  for (const c of d.contributors) {
    ids.push(c.category); labels.push(c.label); parents.push("peak"); values.push(c.bytes);
    colors.push(CATEGORY_COLORS[c.category] || P.neutral); links.push(null);
    hover.push(`${c.label}<br>${fmtBytes(c.bytes)} (${pct(c.share)}), ${c.count} buffer(s)<br>${c.rules.join("<br>")}`);
    c.items.forEach((it, i) => {
      ids.push(`${c.category}/${i}`); labels.push(it.name || "(unnamed)"); parents.push(c.category); values.push(it.bytes);
      colors.push(CATEGORY_COLORS[c.category] || P.neutral); links.push(it.link);
      hover.push(`${it.name}<br>${fmtBytes(it.bytes)} (${n(it.bytes)} bytes)${it.shape ? "<br>" + it.shape : ""}<br>rule: ${it.rule}`);
    });
    if (c.othersBytes) {
      ids.push(`${c.category}/others`); labels.push(`${c.othersCount} more`); parents.push(c.category); values.push(c.othersBytes);
      colors.push("#ddd"); links.push(null); hover.push(`${c.othersCount} smaller buffers`);
    }
  }
  newPlot(div, [{ type: "treemap", ids, labels, parents, values, branchvalues: "total", maxdepth: 3,
    marker: { colors, line: { color: "#fff", width: 1 } }, text: hover, hovertemplate: "%{text}<extra></extra>",
    textinfo: "label+percent root", pathbar: { visible: true } }],
  { height: 420, margin: { l: 4, r: 4, t: 28, b: 4 } });
  div.on("plotly_click", (ev) => {
    const p = ev.points && ev.points[0];
    const link = p ? links[ids.indexOf(p.id)] : null;
    if (link) { go(linkState(link)); return false; } // a buffer: open its evidence
    return true; // a category: let the treemap zoom into it
  });
  charts.push(div);
}

function findings(d) {
  if (!d.findings.length) return el("p", { class: "oom-none", id: "oom-findings" }, "No finding: none of the rules fired on this run.");
  return el("div", { id: "oom-findings" }, d.findings.map((f) => el("div", { class: `oom-finding ${f.severity}`, "data-finding": f.id },
    el("div", { class: "title" }, f.title),
    el("div", {}, f.message),
    // The tool says the evidence in a sentence with its numbers (tools/oom_risk.py evidence_sentence).
    el("div", { class: "evidence" }, "Evidence: ", f.evidenceText || ""),
    (f.evidenceExamples || []).length ? el("ul", { class: "evidence examples" }, f.evidenceExamples.map((x) => el("li", {}, x))) : null,
    f.links.length ? el("div", { class: "links" }, "open: ", f.links.flatMap((l, i) => [i ? ", " : "", linkTo(l)])) : null)));
}

function contributorTable(d) {
  return el("table", { class: "oom-table", id: "oom-contributors" },
    el("thead", {}, el("tr", {}, el("th", {}, "category"), el("th", { class: "num" }, "bytes"), el("th", { class: "num" }, "share"),
      el("th", { class: "num" }, "buffers"), el("th", {}, "largest"), el("th", {}, "rule(s)"))),
    el("tbody", {}, d.contributors.map((c) => el("tr", {},
      el("td", {}, el("span", { class: "swatch", style: `background:${CATEGORY_COLORS[c.category] || P.neutral}` }), c.label),
      el("td", { class: "num", title: `${n(c.bytes)} bytes` }, fmtBytes(c.bytes)), el("td", { class: "num" }, pct(c.share)),
      el("td", { class: "num" }, n(c.count)),
      el("td", {}, c.items.slice(0, 3).flatMap((it, i) => [i ? el("br") : null, linkTo(it.link, it.name), " ", el("span", { class: "muted" }, fmtBytes(it.bytes))])),
      el("td", { class: "muted small", title: c.rules.length > 3 ? c.rules.join("\n") : null }, ruleText(c.rules))))));
}

// A category's matching rules: a TF profile's gradient rule names each op it matched,
// dozens of them; three are shown, the rest counted (all in the tooltip).
function ruleText(rules) {
  return rules.length > 3 ? `${rules.slice(0, 3).join("; ")}; … and ${rules.length - 3} more` : rules.join("; ");
}

function moduleTable(d, state) {
  return el("table", { class: "oom-table", id: "oom-modules" },
    el("thead", {}, el("tr", {}, el("th", {}, "module"), el("th", { class: "num" }, "peak"), el("th", { class: "num" }, "arguments"),
      el("th", { class: "num" }, "outputs"),
      el("th", { class: "num", title: "peak + the part of the training step's arguments (the train state) this module does not take: see docs/oom_risk.md" }, "with train state"),
      el("th", { class: "num" }, "utilization"), el("th", {}, "tier"), el("th", {}, ""))),
    el("tbody", {}, d.modules.map((m) => el("tr", { class: m.moduleName === d.module ? "selected" : "" },
      el("td", {}, el("code", {}, m.moduleName), m.stepKind ? el("span", { class: "muted small" }, ` ${m.stepKind} step`) : null),
      el("td", { class: "num", title: `${n(m.peakBytes)} bytes` }, fmtBytes(m.peakBytes)),
      el("td", { class: "num" }, fmtBytes(m.argumentBytes)), el("td", { class: "num" }, fmtBytes(m.outputBytes)),
      el("td", { class: "num", title: m.coResidentWith ? `with ${m.coResidentWith}'s state` : "" }, m.coResidentBytes === undefined ? "—" : fmtBytes(m.coResidentBytes)),
      el("td", { class: "num" }, pct(m.utilization)), el("td", {}, m.risk || "—"),
      el("td", {}, m.moduleName === d.module ? el("span", { class: "muted small" }, "assessed") :
        el("a", { href: stateUrl({ ...state, module_name: m.moduleName }), onclick: (e) => { e.preventDefault(); go({ ...readState(), module_name: m.moduleName }); } }, "assess"),
      " · ", linkTo({ tool: "memory_viewer", module_name: m.moduleName }, "memory viewer"))))));
}

function usageTable(d) {
  const rows = d.usage.map((u) => el("tr", { "data-measure": u.measure || "" }, el("td", {}, u.link ? linkTo(u.link, u.label) : u.label),
    el("td", { class: "num", title: `${n(u.bytes)} bytes`, "data-bytes": String(u.bytes) }, fmtBytes(u.bytes)), el("td", { class: "muted small" }, u.detail)));
  for (const f of d.fragmentation) rows.push(el("tr", {}, el("td", {}, `${f.kind} fragmentation`), el("td", { class: "num" }, pct(f.share)), el("td", { class: "muted small" }, f.rule)));
  for (const o of d.oomEvents) rows.push(el("tr", { class: "oom-event" }, el("td", {}, `OOM at event ${o.event}`),
    el("td", { class: "num" }, fmtBytes(o.requestedBytes)), el("td", { class: "muted small" }, `requested ${n(o.requestedBytes)} bytes; device free ${n(o.deviceFreeBytes)}; reserved ${n(o.reservedBytes)}; live ${n(o.liveBytes)}`)));
  return el("table", { class: "oom-table", id: "oom-usage" }, el("tbody", {}, rows));
}

export default {
  tool: "oom_risk",
  css: ["pages/oom_risk.css"],
  keys: { capacity: {}, ...PLAN_KEYS, ...COMPARE_KEYS },
  render: renderOomRisk,
};
