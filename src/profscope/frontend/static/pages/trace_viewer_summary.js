// Trace viewer's range summary: Alt-drag over the timeline selects a time range and this
// table lists every slice name in it, as Catapult's and Perfetto's area selections do
// (occurrences, wall time, self time: wall minus the children on the same thread, avg,
// max), computed on the server from the index: /api/trace/summary?start_ms=&end_ms=
// (docs/trace_viewer.md). Wall and self time count only the part of a slice inside the
// range. Click a column header to sort by it (again: reverse). A name has one row for the
// devices' tracks and one for the host's ("Where"); the Device / Host buttons show one side
// alone (host Python frames otherwise outrank every kernel by wall time).
import { el, fill } from "../lib/dom.js";
import { errorBox, getJson } from "../lib/api.js";
import { fmtCount, fmtDur, fmtTime } from "../lib/format.js";

const COLUMNS = [
  ["name", "Name", "Slice name"],
  ["device", "Where", "Device: on a device's tracks (kernels, XLA ops, copies); host: on the host's threads"],
  ["count", "Occurrences", "Slices of this name overlapping the range"],
  ["wallMs", "Wall time", "Sum of their durations inside the range"],
  ["selfMs", "Self time", "Wall time minus that of their children (the slices nested in them on the same track)"],
  ["avgMs", "Average", "Wall time / occurrences"],
  ["maxMs", "Max", "Longest one inside the range"],
];

// `params(extra)`: the page's URLSearchParams for run/host(s) plus `extra`.
// `onRange(range)`: the range summarized ([a, b] in ms, null once closed), for the page
// to keep it shaded on the timeline while its table is open.
export function makeSummary(params, onRange = () => {}) {
  const s = { data: null, key: "wallMs", desc: true, seq: 0, range: null, side: "all" };
  s.node = el("div", { class: "tv-summary", id: "tv-summary", hidden: true });
  s.clear = () => { s.seq++; s.data = null; s.range = null; s.node.hidden = true; s.node.replaceChildren(); onRange(null); };
  s.show = async (a, b) => {
    const seq = ++s.seq;
    s.range = [a, b];
    onRange(s.range);
    s.node.hidden = false;
    fill(s.node, el("p", { class: "muted" }, `Summarizing ${fmtDur(b - a)}…`));
    s.node.dataset.busy = "1";
    try {
      const data = await getJson(`/api/trace/summary?${params({ start_ms: String(a), end_ms: String(b) })}`);
      if (seq !== s.seq) return;
      s.data = data;
      render(s);
    } catch (err) {
      if (seq === s.seq) fill(s.node, errorBox(err, "the range summary"));
    } finally {
      if (seq === s.seq) delete s.node.dataset.busy;
    }
  };
  return s;
}

function render(s) {
  const d = s.data, [a, b] = d.window;
  const counts = { all: d.rows.length, device: d.rows.filter((r) => r.device).length };
  counts.host = counts.all - counts.device;
  const rows = d.rows.filter((r) => s.side === "all" || r.device === (s.side === "device"));
  const k = s.key, dir = s.desc ? -1 : 1;
  const cmp = (p, q) => (k === "name" ? p.name.localeCompare(q.name) : k === "device" ? p.device - q.device : p[k] - q[k]);
  rows.sort((p, q) => cmp(p, q) * dir || p.name.localeCompare(q.name));
  const sides = el("span", { class: "tv-summary-sides", id: "tv-summary-sides", role: "group" },
    [["all", "All"], ["device", "Device"], ["host", "Host"]].map(([side, label]) => el("button", {
      type: "button", "data-side": side, "aria-pressed": String(s.side === side), disabled: side !== "all" && !counts[side],
      title: side === "all" ? "Every slice name in the range" : `Only the names on the ${side}'s tracks`,
      onclick: () => { s.side = side; render(s); },
    }, `${label} (${fmtCount(counts[side])})`)));
  const head = el("tr", {}, COLUMNS.map(([key, label, title]) => el("th", {
    class: key === "name" ? "" : "num", title, "data-key": key, "aria-sort": key === k ? (s.desc ? "descending" : "ascending") : null,
    onclick: () => { s.desc = s.key === key ? !s.desc : key !== "name"; s.key = key; render(s); },
  }, label, key === k ? (s.desc ? " ▼" : " ▲") : "")));
  const body = rows.map((r) => el("tr", {},
    el("td", { class: "tv-summary-name", title: r.name }, r.name),
    el("td", { class: "tv-summary-where" }, r.device ? "device" : "host"),
    el("td", { class: "num" }, fmtCount(r.count)),
    el("td", { class: "num" }, fmtDur(r.wallMs)),
    el("td", { class: "num" }, fmtDur(r.selfMs)),
    el("td", { class: "num" }, fmtDur(r.avgMs)),
    el("td", { class: "num" }, fmtDur(r.maxMs))));
  fill(s.node,
    el("div", { class: "tv-summary-head" },
      el("strong", {}, "Range summary"),
      el("span", { class: "muted", id: "tv-summary-range" },
        ` ${fmtTime(a, (b - a) / 1000)} – ${fmtTime(b, (b - a) / 1000)} · ${fmtDur(d.durationMs)} · ${fmtCount(d.slices)} slices, ${fmtCount(d.rows.length)} names`),
      sides,
      el("button", { type: "button", id: "tv-summary-close", title: "Close the summary", onclick: () => s.clear() }, "×")),
    el("div", { class: "tv-summary-scroll" }, el("table", { class: "tv-summary-table", id: "tv-summary-table" },
      el("thead", {}, head), el("tbody", {}, body))));
}
