// The trace viewer page's "All hosts" section, for a profile run with more than one host:
// which host is slow, at a glance. From /api/trace_hosts (tools/trace_hosts.py): per
// host its median step time, its device idle share (idle / (devices × span)), slowest
// first, and a roll-up with the median step, max / median and the stragglers, in words.
// Each host is a link that opens the timeline on that host (host= in the URL, the
// shell's key); the check boxes choose a subset that opens as one merged timeline
// (hosts=a,b, the key the trace API already takes), so both views are shareable links.
import { el, fill } from "../lib/dom.js";
import { go, readState, resetFor, stateUrl } from "../lib/state.js";
import { cachedJson, errorBox } from "../lib/api.js";
import { jobLine } from "./rank_job.js";
import { fmtCount, fmtDur, fmtShare } from "../lib/format.js";

const PS_PER_MS = 1e9;

// A multi-host profile, or a distributed job of traces (its ranks are hosts).
export function showsHosts(run, details) {
  return (run.kind === "profile" || Boolean(run.job)) && ((details && details.hosts) || run.hosts || []).length > 1;
}

// `shown`: the hosts on the timeline now (one, or the merged subset).
export function hostsOverview(run, shown) {
  const n = (run.hosts || []).length;
  const box = el("details", { class: "tvh", id: "tvh", open: true },
    el("summary", {}, el("strong", {}, run.job ? "All ranks" : "All hosts"), el("span", { class: "muted" }, ` · ${n} hosts: step time and device idle time, slowest first`)),
    jobLine(run, "tvh-job"),
    el("p", { class: "muted", id: "tvh-loading" }, `Reading the steps and device ops of ${n} hosts…`));
  cachedJson(`/api/trace_hosts?${new URLSearchParams({ run: run.name })}`).then(
    (data) => fill(box, box.firstChild, jobLine(run, "tvh-job"), ...body(data, new Set(shown))),
    (err) => fill(box, box.firstChild, jobLine(run, "tvh-job"), errorBox(err, "No overview of the hosts")));
  return box;
}

function hostState(host) {
  return { ...resetFor(readState(), "host"), host, hosts: "" };
}

function subsetState(list) {
  const s = { ...readState(), start_ms: "", end_ms: "", ev: "" };
  return list.length > 1 ? { ...s, hosts: list.join(","), host: "" } : { ...resetFor(s, "host"), hosts: "", host: list[0] || "" };
}

function link(state, text, attrs = {}) {
  return el("a", { href: stateUrl(state), ...attrs, onclick: (e) => { e.preventDefault(); go(state); } }, text);
}

function body(data, shown) {
  const r = data.rollup || {};
  const rows = data.hosts || [];
  const ok = rows.filter((h) => h.status === "ok");
  const maxStep = r.maxStepPs || 0;
  const chosen = new Set([...shown].filter((h) => rows.some((x) => x.host === h)));
  const open = el("a", { class: "tv-btn", id: "tvh-open" });
  const count = el("span", { class: "muted", id: "tvh-count" });
  const boxes = [];
  const sync = () => {
    const list = rows.map((h) => h.host).filter((h) => chosen.has(h));
    for (const b of boxes) b.checked = chosen.has(b.value);
    const s = subsetState(list);
    open.href = stateUrl(s);
    open.onclick = (e) => { e.preventDefault(); if (list.length) go(s); };
    open.textContent = list.length > 1 ? `Open ${list.length} hosts in one timeline` : list.length ? `Open ${list[0]}` : "Choose hosts to open";
    open.classList.toggle("disabled", !list.length);
    count.textContent = `${list.length} of ${rows.length} chosen`;
  };
  const pick = (list) => { chosen.clear(); for (const h of list) chosen.add(h); sync(); };

  const sentence = el("p", { class: "tvh-sentence", id: "tvh-summary" }, r.summary || "");
  const stats = el("div", { class: "tvh-stats", id: "tvh-stats" },
    stat("hostsWithSteps", "hosts with steps", `${r.hostsWithSteps} of ${r.hosts}`, r.hostsWithSteps),
    stat("medianStep", "median step", r.medianStepPs === null ? "—" : fmtDur(r.medianStepPs / PS_PER_MS), r.medianStepPs),
    stat("maxStep", "slowest", r.maxStepPs === null ? "—" : `${fmtDur(r.maxStepPs / PS_PER_MS)} (${r.slowestHost})`, r.maxStepPs),
    stat("maxOverMedian", "max / median", r.maxOverMedian === null || r.maxOverMedian === undefined ? "—" : `${r.maxOverMedian.toFixed(2)}×`, r.maxOverMedian),
    stat("stragglers", "stragglers", (r.stragglers || []).length ? r.stragglers.join(", ") : "none", (r.stragglers || []).join(",")),
    stat("medianIdle", "median device idle", fmtShare(r.medianIdleShare), r.medianIdleShare));
  const list = el("ol", { class: "tvh-list", id: "tvh-list" },
    el("li", { class: "tvh-row tvh-legend", "aria-hidden": "true" }, el("span", {}), el("span", {}, "host"),
      el("span", {}, "median step time"), el("span", {}), el("span", {}, "device idle"), el("span", {}), el("span", {}, "")),
    rows.map((h) => row(h, maxStep, shown, chosen, boxes, sync)));
  const tools = el("div", { class: "tvh-tools" },
    el("button", { type: "button", id: "tvh-pick-stragglers", disabled: !(r.stragglers || []).length,
      onclick: () => pick(r.stragglers || []) }, "Choose the stragglers"),
    el("button", { type: "button", id: "tvh-pick-worst", onclick: () => pick(ok.slice(0, 4).map((h) => h.host)) }, "Choose the 4 slowest"),
    el("button", { type: "button", id: "tvh-pick-none", onclick: () => pick([]) }, "Clear"),
    count, open);
  sync();
  return [sentence, stats, list, tools,
    el("p", { class: "tvh-hint muted" },
      "Step time: the median of a host's steps (events with a step_num stat, else its Steps line); the first step often includes compilation. ",
      "Device idle: the part of the host's profile span its devices ran no op (per device, overlapping ops counted once), over its devices with ops. ",
      "Click a host to open its timeline; tick several to open them merged.")];
}

function stat(key, label, text, raw) {
  return el("div", { class: "tvh-stat", "data-key": key, "data-value": raw === undefined || raw === null ? "" : String(raw) },
    el("span", { class: "label muted" }, label), " ", el("span", { class: "value" }, text));
}

function row(h, maxStep, shown, chosen, boxes, sync) {
  const here = shown.has(h.host);
  const attrs = { class: `tvh-row tvh-${h.status}${here ? " current" : ""}`, "data-host": h.host, "data-status": h.status };
  if (here) attrs["aria-current"] = "true";
  const box = el("input", { type: "checkbox", value: h.host, "aria-label": `choose ${h.host}`,
    onchange: (e) => { if (e.target.checked) chosen.add(h.host); else chosen.delete(h.host); sync(); } });
  boxes.push(box);
  const name = el("span", { class: "tvh-name" }, link(hostState(h.host), h.host, { class: "tvh-link", title: `Open the timeline of ${h.host}` }));
  if (h.status !== "ok") {
    return el("li", attrs, box, name, el("span", { class: `tvh-reason${h.status === "error" ? " bad" : " muted"}` }, h.reason || h.status));
  }
  attrs["data-step-ps"] = h.stepPs === null ? "" : String(h.stepPs);
  attrs["data-idle-share"] = h.idleShare === null ? "" : String(h.idleShare);
  const straggler = h.overMedian !== undefined && h.overMedian !== null && h.overMedian >= 1.1;
  const stepW = h.stepPs !== null && maxStep ? (100 * h.stepPs) / maxStep : 0;
  const stepCell = h.stepPs === null
    ? el("span", { class: "tvh-track none", title: h.reason }, el("span", { class: "muted" }, "no step markers"))
    : el("span", { class: "tvh-track", title: `${fmtCount(h.stepCount)} steps (${h.stepSource}): median ${fmtDur(h.stepPs / PS_PER_MS)}, mean ${fmtDur(h.stepMeanPs / PS_PER_MS)}, max ${fmtDur(h.stepMaxPs / PS_PER_MS)} (${h.slowestStep})` },
      el("span", { class: `tvh-bar step${straggler ? " straggler" : ""}`, style: `width: ${stepW.toFixed(2)}%` }));
  const stepText = el("span", { class: "tvh-value tvh-step" }, h.stepPs === null ? "—" : fmtDur(h.stepPs / PS_PER_MS));
  const idleCell = h.idleShare === null
    ? el("span", { class: "tvh-track none", title: h.deviceReason || "" }, el("span", { class: "muted" }, "no device ops"))
    : el("span", { class: "tvh-track", title: `${h.deviceCount} device(s) with ops (${h.deviceSource}): busy ${fmtDur(h.busyPs / PS_PER_MS)}, idle ${fmtDur(h.idlePs / PS_PER_MS)} of ${fmtDur(h.spanPs / PS_PER_MS)} each` },
      el("span", { class: "tvh-bar idle", style: `width: ${(100 * h.idleShare).toFixed(2)}%` }));
  const idleText = el("span", { class: "tvh-value tvh-idle" }, h.idleShare === null ? "—" : fmtShare(h.idleShare));
  const detail = [];
  if (h.stepPs !== null) detail.push(`${fmtCount(h.stepCount)} step${h.stepCount === 1 ? "" : "s"}${h.overMedian ? ` · ${h.overMedian.toFixed(2)}× median` : ""}`);
  detail.push(h.deviceCount ? `${h.deviceCount} device${h.deviceCount > 1 ? "s" : ""}` : "no devices");
  detail.push(`span ${fmtDur(h.spanPs / PS_PER_MS)}`);
  return el("li", attrs, box, name, stepCell, stepText, idleCell, idleText, el("span", { class: "tvh-detail muted" }, detail.join(" · ")));
}
