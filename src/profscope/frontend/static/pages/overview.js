// Overview page (no tool picked): the run's kind, files, HLO modules and tools. A module
// opens in the memory viewer (what its buffers are is what a module page shows). Runs of
// the log directory that the shell found unreadable are named at the top, with why.
import { el, fill } from "../lib/dom.js";
import { fmtBytes } from "../lib/format.js";
import { go, stateUrl } from "../lib/state.js";
import { bytesAxis, escapePlotly, newPlot } from "../lib/plotly.js";

const KIND_LABELS = { profile: "profile session", xla_dump: "XLA dump folder", torch_snapshot: "PyTorch memory snapshot", chrome_trace: "Chrome trace" };

// The runs the shell could not read (shell.unreadable: name -> reason), each a link; the
// Summary (the page a run opens on) shows it too.
export function unreadableNote(state, run, shell) {
  const bad = [...((shell && shell.unreadable) || new Map())].filter(([name]) => name !== run.name);
  if (!bad.length) return null;
  const open = (name) => ({ run: name });
  return el("div", { class: "note", id: "unreadable-runs", role: "status" },
    `${bad.length === 1 ? "A run" : `${bad.length} runs`} in this log directory cannot be read (opening one says why in full):`,
    el("ul", {}, bad.map(([name, reason]) => el("li", { "data-run": name },
      el("a", { href: stateUrl(open(name)), onclick: (e) => { e.preventDefault(); go(open(name)); } }, name),
      el("span", { class: "unreadable" }, `: ${reason}`)))));
}

// Files of the log directory profscope recognises but does not read (/api/runs'
// `unsupported`: file, kind, reason), so none is passed over without a word; the
// "No runs found" page shows it too.
export function unsupportedNote(catalog) {
  const files = (catalog && catalog.unsupported) || [];
  if (!files.length) return null;
  return el("section", { id: "unsupported-files" },
    el("h2", {}, `Recognised but not read (${files.length})`),
    el("table", {},
      el("thead", {}, el("tr", {}, el("th", {}, "file"), el("th", {}, "kind"), el("th", {}, "run"), el("th", {}, "why not"))),
      el("tbody", {}, files.map((u) => el("tr", { "data-file": u.file },
        el("td", { class: "path" }, u.file), el("td", {}, u.kind), el("td", {}, u.run || "—"), el("td", {}, u.reason))))));
}

function render(view, state, run, details, shell) {
  const toolCards = details.tools.map((t) => el("div", { class: "card", "data-tool": t.name },
    el("h3", {}, el("a", { href: stateUrl({ ...state, tool: t.name }), onclick: (e) => { e.preventDefault(); go({ ...state, tool: t.name }); } }, t.title)),
    el("div", {}, t.summary),
    el("div", { class: "tag" }, `tag=${t.name}`)));
  const files = el("table", { id: "files" },
    el("thead", {}, el("tr", {}, el("th", {}, "file"), el("th", {}, "kind"), el("th", { class: "num" }, "size"))),
    el("tbody", {}, details.files.map((f) => el("tr", {}, el("td", { class: "path" }, f.path), el("td", {}, f.kind), el("td", { class: "num" }, fmtBytes(f.size))))));
  const viewer = details.tools.find((t) => t.name === "memory_viewer");
  // Without a memory viewer for this run, a click still picks the module for the other tools.
  const moduleState = (m) => (viewer ? { ...state, tool: "memory_viewer", module_name: m } : { ...state, module_name: m });
  const modules = details.modules.length
    ? el("ul", { class: "modules", id: "modules" }, details.modules.map((m) => el("li", {
        class: m === state.module_name ? "selected" : "", "data-module": m, onclick: () => go(moduleState(m)) },
      el("a", { href: stateUrl(moduleState(m)), onclick: (e) => { e.preventDefault(); e.stopPropagation(); go(moduleState(m)); } }, m))))
    : el("p", { class: "muted" }, "No compiled HLO modules recorded in this run.");
  fill(view,
    unreadableNote(state, run, shell),
    el("h1", { id: "run-title" }, run.name),
    el("dl", { class: "kv" },
      el("dt", {}, "kind"), el("dd", {}, KIND_LABELS[run.kind] || run.kind),
      el("dt", {}, "folder"), el("dd", {}, el("code", {}, run.folder || ".")),
      // a JAX memory profile's hosts offer ALL_HOSTS (app/pprofs.py): not a host of its own
      el("dt", {}, "hosts"), el("dd", {}, details.hosts.filter((h) => h !== "ALL_HOSTS").join(", ") || "—"),
      el("dt", {}, "files"), el("dd", {}, `${run.fileCount} (${fmtBytes(run.totalBytes)})`),
      el("dt", {}, "modules"), el("dd", {}, String(details.modules.length))),
    el("h2", {}, "Tools"), el("div", { class: "cards" }, toolCards),
    el("div", { class: "grid2" },
      el("div", {}, el("h2", {}, "Files"), files),
      el("div", {}, el("h2", {}, `HLO modules (${details.modules.length})`),
        viewer && details.modules.length ? el("p", { class: "muted" }, "Click a module to open it in the memory viewer.") : null, modules,
        el("h2", {}, "File sizes"), el("div", { id: "sizes" }))),
    unsupportedNote(shell && shell.catalog));
  if (window.Plotly && details.files.length) {
    const sorted = [...details.files].sort((a, b) => b.size - a.size).slice(0, 20).reverse();
    newPlot("sizes", [{ type: "bar", orientation: "h", x: sorted.map((f) => f.size),
      y: sorted.map((f) => escapePlotly(f.path.split("/").pop())), customdata: sorted.map((f) => fmtBytes(f.size)),
      hovertemplate: "%{y}<br>%{customdata} (%{x:,} bytes)<extra></extra>" }],
    { margin: { l: 220, r: 10, t: 10, b: 40 }, xaxis: bytesAxis(Math.max(...sorted.map((f) => f.size)), 1, { title: { text: "file size" } }) });
  }
}

// tool=overview: a bare ?run=R opens the run's Summary (app.js openingTool), this page is one pick away.
export default { tool: "overview", title: "overview", css: [], keys: {}, render };
