// The memory profile page's "All hosts" section, for a profile run with more than one
// host: every host's peak side by side, worst first, from /api/memory_hosts
// (tools/memory_hosts.py: rows with status ok / noAllocatorEvents / error, and a
// rollup with max, min, median, mean, imbalance and max / median). Each host is a link
// that sets host= in the URL (the shell's key; the page's own keys reset with it) and,
// for a host with a peak, memory_id= its peak's allocator: the page would otherwise open
// on memoryIds[0] (sorted by name, as XProf's), often not the allocator that peaked (the
// TF GPU profile peaks on GPU_6_bfc and opens on GPU_1_bfc). The view a click opens is
// shareable.
import { el, fill } from "../lib/dom.js";
import { go, readState, resetFor, stateUrl } from "../lib/state.js";
import { cachedJson, errorBox } from "../lib/api.js";
import { exact, fmtBytes, fmtMs, fmtShare } from "../lib/format.js";
import { psToMs } from "./memory_profile_parts.js";
import { jobLine } from "./rank_job.js";

// A multi-host profile, or a distributed job of snapshots or traces (its ranks are hosts).
export function showsHosts(run) {
  return (run.kind === "profile" || Boolean(run.job)) && (run.hosts || []).length > 1;
}

// The section, filled when the roll-up arrives; `current` is the host on screen.
export function hostsSection(run, current) {
  const title = run.job ? "All ranks" : "All hosts";
  const box = el("section", { class: "mp-hosts", id: "mp-hosts", "aria-label": title },
    el("h2", {}, title), jobLine(run), el("p", { class: "muted" }, `Reading the memory peaks of ${run.hosts.length} hosts…`));
  cachedJson(`/api/memory_hosts?${new URLSearchParams({ run: run.name })}`).then(
    (data) => fill(box, el("h2", {}, title), jobLine(run), ...body(data, current)),
    (err) => fill(box, el("h2", {}, title), jobLine(run), errorBox(err, "No memory peaks per host")));
  return box;
}

function hostUrlState(host, memoryId) {
  const s = { ...resetFor(readState(), "host"), host };
  if (memoryId) s.memory_id = memoryId;
  return s;
}

function hostLink(host, memoryId) {
  const s = hostUrlState(host, memoryId);
  return el("a", { href: stateUrl(s), class: "mp-host-link", onclick: (e) => { e.preventDefault(); go(s); } }, host);
}

function body(data, current) {
  const r = data.rollup || {};
  const rows = data.hosts || [];
  const ok = rows.filter((h) => h.status === "ok");
  if (!ok.length) {
    return [el("p", { class: "mp-note", id: "mp-hosts-summary" }, "No host of this run has allocator events."), list(rows, current, 1)];
  }
  const worst = ok[0];
  // One scale for every bar: the worst peak, or a capacity close enough to it to be
  // drawn (a 144 GiB device beside a 460 MiB peak would flatten every bar).
  const caps = ok.map((h) => h.capacityBytes).filter((c) => c && c <= 2 * r.maxBytes);
  const scale = Math.max(r.maxBytes, ...caps) || 1;
  const ratio = r.maxOverMedian;
  const sentence = el("p", { class: "mp-hosts-sentence", id: "mp-hosts-summary" },
    hostLink(worst.host, worst.memoryId), " peaks at ", el("strong", {}, fmtBytes(worst.peakBytes)),
    ` (${worst.peakMeasure}, allocator ${worst.memoryId || "(no name)"})`,
    ratio !== null && ratio !== undefined && ok.length > 1
      ? [", ", el("strong", { "data-value": String(ratio) }, `${ratio.toFixed(2)}×`), ` the median host (${fmtBytes(r.medianBytes)})`] : "",
    ok.length > 1 ? `; the lowest peak is ${fmtBytes(r.minBytes)}, ${fmtShare(r.imbalance)} below the worst ((max − min) / max).` : ".");
  const stats = el("div", { class: "mp-hosts-stats", id: "mp-hosts-stats" },
    stat("hosts", "hosts with a peak", `${r.hosts} of ${rows.length}`),
    stat("max", "max", fmtBytes(r.maxBytes), r.maxBytes),
    stat("median", "median", fmtBytes(r.medianBytes), r.medianBytes),
    stat("mean", "mean", fmtBytes(r.meanBytes), r.meanBytes),
    stat("min", "min", fmtBytes(r.minBytes), r.minBytes),
    stat("imbalance", "imbalance (max − min) / max", fmtShare(r.imbalance), r.imbalance),
    stat("maxOverMedian", "max / median", ratio === null || ratio === undefined ? "—" : `${ratio.toFixed(2)}×`, ratio));
  const oom = hostUrlState("");
  oom.tool = "oom_risk";
  return [sentence, stats, list(rows, current, scale),
    el("p", { class: "mp-hint" }, "A host's peak is its allocator with the highest peak allocated (stack + heap in use) in the profiled window; the line is its capacity. Click a host to open its memory profile. ",
      el("a", { href: stateUrl(oom), onclick: (e) => { e.preventDefault(); go(oom); } }, "OOM risk"), " rates this run by its worst host.")];
}

function stat(key, label, text, raw) {
  return el("div", { class: "mp-hosts-stat", "data-key": key, "data-value": raw === undefined || raw === null ? "" : String(raw) },
    el("span", { class: "label" }, label), " ", el("span", { class: "value" }, text));
}

function list(rows, current, scale) {
  return el("ol", { class: "mp-hosts-list", id: "mp-hosts-list" }, rows.map((h) => {
    const here = h.host === current;
    const attrs = { class: `mp-host-row ${h.status}${here ? " current" : ""}`, "data-host": h.host, "data-status": h.status };
    if (here) attrs["aria-current"] = "true";
    if (h.status !== "ok") {
      return el("li", attrs, el("span", { class: "mp-host-name" }, hostLink(h.host)),
        el("span", { class: h.status === "error" ? "mp-host-reason bad" : "mp-host-reason muted" }, h.reason || h.status));
    }
    const w = Math.min(100, (100 * h.peakBytes) / scale);
    const cap = h.capacityBytes;
    const capMark = cap && cap <= scale ? el("span", { class: "mp-host-cap", style: `left: ${((100 * cap) / scale).toFixed(2)}%`, title: `capacity ${fmtBytes(cap)}` }) : null;
    attrs["data-peak"] = String(h.peakBytes);
    return el("li", attrs,
      el("span", { class: "mp-host-name" }, hostLink(h.host, h.memoryId)),
      el("span", { class: "mp-host-track", title: `${exact(h.peakBytes)} at ${fmtMs(psToMs(h.peakTimePs))}` },
        el("span", { class: "mp-host-bar", style: `width: ${w.toFixed(2)}%` }), capMark),
      el("span", { class: "mp-host-peak" }, fmtBytes(h.peakBytes)),
      el("span", { class: "mp-host-detail muted" },
        cap ? `${fmtShare(h.utilization)} of ${fmtBytes(cap)}${cap > scale ? " (capacity off scale)" : ""}` : "capacity unknown",
        ` · allocator ${h.memoryId || "(no name)"} at ${fmtMs(psToMs(h.peakTimePs))}`));
  }));
}
