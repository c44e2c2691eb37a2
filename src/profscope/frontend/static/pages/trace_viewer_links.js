// The trace viewer's links to the other tools (issue 37, docs/trace_viewer.md "Links"):
// an XLA op → its instruction in the module's HLO view and its buffers in the memory
// viewer; a PyTorch kernel, a [memory] counter point or an allocator counter point →
// the memory profile at that time. The server decides which targets exist
// (app/trace_viewer_links.py: /api/trace/event's `links`, /api/trace/counter's `memoryProfile`);
// this module only draws what it is given, so no link here is a dead one.
import { el } from "../lib/dom.js";
import { go, stateUrl } from "../lib/state.js";

// The trace viewer's own keys, left behind when another tool opens.
const LEAVE = { ev: "", start_ms: "", end_ms: "", q: "", hosts: "", flows: "", ctr: "", ct: "" };

function link(id, state, text) {
  return el("a", { id, href: stateUrl(state), onclick: (e) => { e.preventDefault(); go(state); } }, text);
}

// Each link's state: tool, host and the target's own keys (URL contracts: /tmp contract
// of issue 37, kept in docs/links.md).
export function hloState(state, l) {
  return { ...state, ...LEAVE, tool: "memory_viewer", host: l.host || state.host, module_name: l.module_name, view: "hlo", instr: l.instr };
}

export function memoryViewerState(state, l) {
  return { ...state, ...LEAVE, tool: "memory_viewer", host: l.host || state.host, module_name: l.module_name, hlo_op: l.hlo_op || "" };
}

export function memoryProfileState(state, l) {
  return { ...state, ...LEAVE, tool: "memory_profile", host: l.host || state.host, memory_id: l.memory_id, t: l.t };
}

// The links of one event's card (null when it has none).
export function eventLinks(ev, state) {
  const l = ev.links || {};
  const out = [];
  if (l.hlo) out.push(link("tv-hlo-link", hloState(state, l.hlo), `HLO of ${l.hlo.instr} in ${l.hlo.module_name} →`));
  if (l.memoryViewer) {
    const m = l.memoryViewer;
    out.push(link("tv-memory-link", memoryViewerState(state, m), `Memory viewer for ${m.module_name}${m.hlo_op ? `, buffers of ${m.hlo_op}` : ""} →`));
  }
  if (l.memoryProfile) out.push(link("tv-mp-link", memoryProfileState(state, l.memoryProfile), `Memory profile of ${l.memoryProfile.memory_id} at this time →`));
  if (!out.length) return null;
  return el("p", { class: "tv-links" }, out.flatMap((a, i) => (i ? [el("br"), a] : [a])));
}

// The card of a counter point (/api/trace/counter's answer): its value and time, the
// peak buttons, and the memory profile link or why there is none.
export function counterCard(p, state, { fmtValue, fmtTime, onPeak, onZoom }) {
  const mp = p.memoryProfile;
  return [
    el("div", { class: "tv-card-head" },
      el("h3", { class: "tv-card-name", title: p.name }, p.name),
      el("button", { type: "button", id: "tv-counter-zoom", title: "Zoom to this point", onclick: onZoom }, "Zoom here")),
    el("dl", { class: "kv tv-kv", id: "tv-counter" },
      el("dt", {}, "value"), el("dd", { id: "tv-counter-value", "data-value": String(p.value) }, fmtValue(p.value, p.unit)),
      el("dt", {}, "at"), el("dd", { id: "tv-counter-time", "data-time": String(p.time) }, `${fmtTime(p.time)} since the trace start`),
      p.host ? [el("dt", {}, "host"), el("dd", {}, p.host)] : null),
    el("p", { class: "tv-links" },
      el("button", { type: "button", id: "tv-peak-window", title: "The largest value of this counter in the window on screen", onclick: () => onPeak("window") }, "Peak in window"),
      " ",
      el("button", { type: "button", id: "tv-peak-all", title: "The largest value of this counter in the whole trace", onclick: () => onPeak("all") }, "Peak in trace")),
    mp ? el("p", { class: "tv-links" }, link("tv-mp-link", memoryProfileState(state, mp), `Memory profile of ${mp.memory_id} at this event →`))
      : el("p", { class: "muted small", id: "tv-mp-none" }, `No memory profile link: ${p.why || "none"}.`),
  ];
}
