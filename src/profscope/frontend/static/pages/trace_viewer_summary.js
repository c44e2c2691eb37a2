// Trace viewer's range summary: Alt-drag over the timeline selects a time range and this
// table lists every slice name in it, as Catapult's and Perfetto's area selections do
// (occurrences, wall time, self time: wall minus the children on the same thread, avg,
// max), computed on the server from the index: /api/trace/summary?start_ms=&end_ms=
// (docs/trace_viewer.md). Wall and self time count only the part of a slice inside the
// range. Click a column header to sort by it (again: reverse).
import { el, fill } from "../lib/dom.js";
import { errorBox, getJson } from "../lib/api.js";
import { fmtCount, fmtDur, fmtTime } from "../lib/format.js";

const COLUMNS = [
  ["name", "Name", "Slice name"],
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
  const s = { data: null, key: "wallMs", desc: true, seq: 0, range: null };
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
  const rows = [...d.rows];
  const k = s.key, dir = s.desc ? -1 : 1;
  rows.sort((p, q) => (k === "name" ? p.name.localeCompare(q.name) : p[k] - q[k]) * dir || p.name.localeCompare(q.name));
  const head = el("tr", {}, COLUMNS.map(([key, label, title]) => el("th", {
    class: key === "name" ? "" : "num", title, "data-key": key, "aria-sort": key === k ? (s.desc ? "descending" : "ascending") : null,
    onclick: () => { s.desc = s.key === key ? !s.desc : key !== "name"; s.key = key; render(s); },
  }, label, key === k ? (s.desc ? " ▼" : " ▲") : "")));
  const body = rows.map((r) => el("tr", {},
    el("td", { class: "tv-summary-name", title: r.name }, r.name),
    el("td", { class: "num" }, fmtCount(r.count)),
    el("td", { class: "num" }, fmtDur(r.wallMs)),
    el("td", { class: "num" }, fmtDur(r.selfMs)),
    el("td", { class: "num" }, fmtDur(r.avgMs)),
    el("td", { class: "num" }, fmtDur(r.maxMs))));
  fill(s.node,
    el("div", { class: "tv-summary-head" },
      el("strong", {}, "Range summary"),
      el("span", { class: "muted", id: "tv-summary-range" },
        ` ${fmtTime(a, (b - a) / 1000)} – ${fmtTime(b, (b - a) / 1000)} · ${fmtDur(d.durationMs)} · ${fmtCount(d.slices)} slices, ${fmtCount(rows.length)} names`),
      el("button", { type: "button", id: "tv-summary-close", title: "Close the summary", onclick: () => s.clear() }, "×")),
    el("div", { class: "tv-summary-scroll" }, el("table", { class: "tv-summary-table", id: "tv-summary-table" },
      el("thead", {}, head), el("tbody", {}, body))));
}
