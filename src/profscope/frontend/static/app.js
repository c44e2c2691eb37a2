// profscope dashboard shell (an ES module; no build step). It owns the top bar (run,
// tool, host, module pickers), the run catalog, and which page module renders the view;
// the view state is the query string (lib/state.js), each page declaring its own keys.
import { $, el, fill } from "./lib/dom.js";
import { defineKeys, go, onNavigate, readState, resetFor, stateUrl } from "./lib/state.js";
import { ApiError, errorBox, getJson } from "./lib/api.js";
import overview, { unsupportedNote } from "./pages/overview.js";
import { initCapture } from "./pages/capture.js";
import { showConversions } from "./lib/conversions.js";
import { fmtHosts } from "./lib/format.js";

// The page modules, in the order their URL keys appear in a link: the run overview, then
// those of the tools, which the server's tool table names (index.html #page-modules).
// The shell picks the first page whose `tool` is the URL's tool and that `accepts` the
// run (two pages draw the memory_profile tool: allocator/trace memory, and snapshots).
const toolPages = JSON.parse(document.getElementById("page-modules").textContent);
const PAGES = [overview, ...(await Promise.all(toolPages.map((name) => import(`./pages/${name}`)))).map((m) => m.default)];

// The shell's own keys; a new run starts every view fresh, a new host or module too.
defineKeys({
  run: {},
  tool: {},
  host: { resetOn: ["run"] },
  module_name: { resetOn: ["run"] },
});
for (const page of PAGES) defineKeys(page.keys || {});

// Every tool's title (index.html #tool-titles), to name the open tool in the picker on a
// run that has no input for it (the run's own tools come with its details).
const TOOL_TITLES = JSON.parse(document.getElementById("tool-titles").textContent);
const bare = (name) => (name || "").replace(/@$/, "");
// The page a run opens on (a bare ?run=R, and XProf's overview_page tag): its Summary
// (issue 35: status, findings, what to do) where the run has that tool; else the run
// overview, which has a URL of its own (tool=overview) so it stays one pick away.
const DEFAULT_TOOL = "summary";
const OVERVIEW = "overview";
const openingTool = (details) => (details.tools.some((t) => t.name === DEFAULT_TOOL) ? DEFAULT_TOOL : OVERVIEW);

const runDetails = new Map(); // run name -> promise of /api/run
// Runs whose /api/run was refused with a 4xx (a truncated xplane, an LFS pointer): name ->
// the reason. The run picker and the overview mark them; the first run opened is one that reads.
const unreadable = new Map();
// How many runs the first view tries before it shows the first one's error: each try reads
// a run's files (cached), and a log directory of broken runs is not worth reading whole.
const MAX_FIRST_TRIES = 20;
let catalog = null;
let activePage = null; // the page module that drew the view

function pageFor(tool, run) {
  const name = tool.replace(/@$/, "");
  // alsoFor: tools drawn by another tool's page (XProf's hlo_stats and op_profile: Steps & ops)
  return PAGES.find((p) => (p.tool === name || (p.alsoFor || []).includes(name)) && (!p.accepts || p.accepts(run))) || null;
}

// A page loads app.css (always there) and its own stylesheets only; a page is drawn once
// its stylesheets have loaded, so it never shows unstyled.
const sheets = new Map(); // href -> promise, resolved when loaded (or failed)
function useStyles(page) {
  const wanted = new Set((page.css || []).map((name) => `/static/${name}`));
  for (const link of document.querySelectorAll("link[data-page-css]")) {
    if (!wanted.has(link.getAttribute("href"))) { link.remove(); sheets.delete(link.getAttribute("href")); }
  }
  return Promise.all([...wanted].map((href) => {
    if (!sheets.has(href)) {
      const link = el("link", { rel: "stylesheet", href, "data-page-css": "" });
      sheets.set(href, new Promise((resolve) => { link.onload = resolve; link.onerror = resolve; }));
      document.head.append(link);
    }
    return sheets.get(href);
  }));
}

function fillSelect(select, options, value) {
  select.replaceChildren(...options.map((o) => el("option", { value: o.value, disabled: o.disabled, title: o.title, ...o.attrs }, o.label)));
  const known = options.some((o) => o.value === value);
  select.value = known ? value : options.length ? options[0].value : "";
}

// A run's details (/api/run), fetched once; a 4xx (its files cannot be read) is kept in
// `unreadable` with the server's reason, and the promise rejects with it.
function runInfo(name) {
  if (!runDetails.has(name)) {
    const promise = getJson(`/api/run?run=${encodeURIComponent(name)}`);
    promise.then(() => unreadable.delete(name), (err) => {
      runDetails.delete(name); // tried again on the next visit (the server remembers a bad file's error)
      if (err.status >= 400 && err.status < 500) unreadable.set(name, reasonOf(err));
    });
    runDetails.set(name, promise);
  }
  return runDetails.get(name);
}

// The server's message without the file path it starts with (the error's `file` says it).
function reasonOf(err) {
  const file = err.body && err.body.file;
  return file && err.message.startsWith(`${file}: `) ? err.message.slice(file.length + 2) : err.message;
}

// The run picker's entries: a run known to be unreadable says so, and why; after the runs,
// the files recognised but not read that are part of no run (/api/runs' `unsupported`),
// greyed out, with theirs (those inside a run are in the overview's table).
function runOptions(runs) {
  return runs.map((r) => unreadable.has(r.name)
    ? { value: r.name, label: `⚠ ${r.name} (cannot be read: ${unreadable.get(r.name)})`, title: unreadable.get(r.name), attrs: { "data-unreadable": "" } }
    : { value: r.name, label: r.job ? `${r.name} (${r.job.ranks.length} ranks)` : r.name, title: r.job ? `${r.kind}: ${r.job.rule}` : r.kind })
    .concat(((catalog && catalog.unsupported) || []).filter((u) => u.run === null).map((u) => ({
      value: `unsupported:${u.file}`, disabled: true, label: `⊘ ${u.file} (not read: ${u.reason})`, title: u.reason,
      attrs: { "data-unsupported": u.kind } })));
}

// The run a bare URL opens: the first in the catalog whose files read, so one broken
// profile first in the list does not greet the user with its error. A 5xx or no answer
// (the server's trouble, not the run's) stops the search there.
async function firstReadableRun(runs) {
  for (const r of runs.slice(0, MAX_FIRST_TRIES)) {
    try { await runInfo(r.name); return r.name; } catch (err) { if (!unreadable.has(r.name)) return r.name; }
  }
  return runs[0].name;
}

async function render(state) {
  const view = $("#view");
  if (!catalog) catalog = await getJson("/api/runs");
  const runs = catalog.runs;
  if (!runs.length) {
    fillSelect($("#pick-run"), runOptions([]), "");
    view.replaceChildren(el("h1", {}, "No runs found"),
      el("p", {}, "Nothing in ", el("code", {}, catalog.logdir),
        (catalog.unsupported || []).length ? " is a profile profscope reads (what it recognises is listed below, with why). profscope reads " : " looks like a profile. profscope looks for ",
        el("code", {}, "**/plugins/profile/<session>/<host>.xplane.pb"), ", XLA dumps (", el("code", {}, "*.hlo.pb"),
        "), PyTorch snapshots (", el("code", {}, "*.pickle"), ") and Chrome traces (", el("code", {}, "*.trace.json.gz"), ")."),
      unsupportedNote(catalog));
    return;
  }
  if (!state.run) {
    const first = await firstReadableRun(runs);
    if (readState().run) return; // the user picked a run meanwhile
    return go({ ...state, run: first }, { replace: true });
  }
  const run = runs.find((r) => r.name === state.run);
  fillSelect($("#pick-run"), runOptions(runs), state.run);
  if (!run) {
    view.replaceChildren(errorBox(new ApiError(404, { error: `no run named "${state.run}" in ${catalog.logdir}` }), "Run not found"));
    return;
  }
  document.title = `${state.tool || "overview"} · ${run.name} · profscope`;

  let details;
  try { details = await runInfo(run.name); } catch (err) {
    if (readState().run !== run.name) return;
    return unreadableRun(view, state, runs, run, err);
  }
  if (readState().run !== run.name) return; // the user moved on meanwhile
  // Which tools a run offers needs a look inside its files, so it comes with the details.
  // The Summary first (the tool table lists it first), the overview next.
  const tool = state.tool || openingTool(details);
  const tools = details.tools.map((t) => ({ value: t.name, label: t.title, title: t.summary }));
  tools.splice(tools.length && tools[0].value === DEFAULT_TOOL ? 1 : 0, 0, { value: OVERVIEW, label: "Overview", title: "the run's files, hosts, modules and tools" });
  // XProf names some tools with a trailing @ (trace_viewer@); profscope's links say
  // tool=trace_viewer: either spelling selects the tool's entry.
  const shown = tools.find((t) => bare(t.value) === bare(tool));
  // A page draws a tool this run has no input for (the memory viewer of a profile without
  // HLO modules, opened from a link): the picker still names the tool on screen.
  const known = Object.keys(TOOL_TITLES).find((name) => bare(name) === bare(tool));
  if (!shown && known && pageFor(tool, run)) {
    tools.push({ value: tool, label: `${TOOL_TITLES[known]} (no input)`, title: "this run has no input for this tool" });
  }
  fillSelect($("#pick-tool"), tools, shown ? shown.value : tool);
  // Hosts too: a snapshot's devices are its hosts, known once the file was read.
  // A run whose hosts list offers ALL_HOSTS itself (a JAX memory profile's devices,
  // app/pprofs.py: its page sums every device by default) names it as the entry below does.
  const single = details.hosts.filter((h) => h !== "ALL_HOSTS");
  const hostOption = (h) => (h === "ALL_HOSTS" ? { value: h, label: `all ${single.length} hosts: ${fmtHosts(single)}`, title: single.join("\n") } : { value: h, label: h });
  const hosts = details.hosts.length ? details.hosts.map(hostOption) : [{ value: "", label: "—" }];
  // Several hosts merged on one timeline (the trace viewer's hosts=a,b): the picker says
  // which, rather than showing the first host as if it were the one open. Picking a host
  // from the list opens that host alone (hosts resets on host).
  const merged = (state.hosts || "").split(",").filter((h) => details.hosts.includes(h));
  if (merged.length > 1) {
    hosts.unshift({ value: "", label: `${merged.length} hosts: ${fmtHosts(merged)}`, title: merged.join("\n"), attrs: { "data-merged": merged.join(",") } });
  }
  // Every host at once (host=ALL_HOSTS, XProf's name: Steps & ops, the overview page):
  // the picker says so too, as it says which hosts a merged timeline holds.
  const allHosts = state.host === "ALL_HOSTS" && details.hosts.length > 1 && !details.hosts.includes("ALL_HOSTS");
  if (allHosts) {
    hosts.unshift({ value: "ALL_HOSTS", label: `all ${details.hosts.length} hosts: ${fmtHosts(details.hosts)}`, title: details.hosts.join("\n") });
  }
  fillSelect($("#pick-host"), hosts, merged.length > 1 ? "" : state.host);
  fillModules(details.modules, state.module_name);
  showConversions(state, details); // a multi-host run's hosts on the Dask cluster, if the server has one

  // An XProf link names its tool with tag=; the server turned every tag we have a page
  // for into tool= (server/pages.py), so a tag still here is a tool profscope lacks.
  const tag = new URLSearchParams(location.search).get("tag");
  if (tag !== null && !state.tool) return noSuchTool(view, state, details, tag, true);
  const page = pageFor(tool, run);
  if (!page && state.tool && !details.tools.some((t) => t.name === state.tool)) return noSuchTool(view, state, details, state.tool, false);
  if (page !== activePage) { // the page on screen is being replaced: let it free its charts
    if (activePage && activePage.leave) activePage.leave();
    activePage = page;
  }
  if (page) {
    await useStyles(page);
    if (stateUrl(readState()) !== stateUrl(state)) return; // the user moved on while the styles loaded
    return page.render(view, state, run, details, { unreadable, catalog });
  }
  // No page for this tool yet: show what the data API says (a clear 404 for now).
  await useStyles({ css: [] });
  const q = new URLSearchParams({ run: run.name, tag: state.tool });
  if (state.host) q.set("host", state.host);
  if (state.module_name) q.set("module_name", state.module_name);
  try {
    const data = await getJson(`/data/plugin/profile/data?${q}`);
    view.replaceChildren(el("pre", {}, JSON.stringify(data, null, 1).slice(0, 20000)));
  } catch (err) {
    const row = details.tools.find((t) => t.name === state.tool);
    view.replaceChildren(el("h1", {}, row ? row.title : state.tool), errorBox(err, "No data"));
  }
}

// A run whose files cannot be read: the reason, and the log directory's other runs to
// open instead (the ones known to be unreadable marked, with theirs).
function unreadableRun(view, state, runs, run, err) {
  if (activePage && activePage.leave) activePage.leave();
  activePage = null;
  fillSelect($("#pick-run"), runOptions(runs), run.name);
  fillSelect($("#pick-tool"), [{ value: "", label: "Overview" }], "");
  fillSelect($("#pick-host"), [{ value: "", label: "—" }], "");
  fillModules([], "");
  const others = runs.filter((r) => r.name !== run.name);
  const shown = others.slice(0, 50);
  const open = (name) => ({ ...resetFor(state, "run"), run: name, tool: "" });
  fill(view, errorBox(err, `Cannot read run ${run.name}`),
    others.length ? el("h2", {}, `The other runs in ${catalog.logdir} (${others.length})`) : null,
    el("ul", { id: "run-list", class: "run-list" }, shown.map((r) => el("li", { "data-run": r.name },
      el("a", { href: stateUrl(open(r.name)), onclick: (e) => { e.preventDefault(); go(open(r.name)); } }, r.name),
      unreadable.has(r.name)
        ? el("span", { class: "unreadable" }, ` cannot be read: ${unreadable.get(r.name)}`)
        : el("span", { class: "muted" }, ` ${r.kind}`)))),
    others.length > shown.length ? el("p", { class: "muted" }, `and ${others.length - shown.length} more in the Run picker above.`) : null);
}

// A tool this run does not have (an XProf tool we lack, or a mistyped link): say so, and
// link the tools it has.
async function noSuchTool(view, state, details, name, fromTag) {
  if (activePage && activePage.leave) activePage.leave();
  activePage = null;
  await useStyles({ css: [] });
  const tools = details.tools;
  const open = (tool) => ({ ...state, tool });
  view.replaceChildren(
    el("h1", {}, "No such tool"),
    el("div", { class: "error", role: "alert", id: "no-such-tool" },
      fromTag ? ["This link asks for the XProf tool ", el("code", {}, `tag=${name}`), ", which profscope does not have."]
        : ["profscope has no tool ", el("code", {}, name), " for this run."]),
    el("p", {}, tools.length ? `The tools profscope has for ${state.run}:` : `profscope has no tool for ${state.run}.`),
    el("ul", { id: "tool-list" }, tools.map((t) => el("li", {},
      el("a", { href: stateUrl(open(t.name)), "data-tool": t.name, onclick: (e) => { e.preventDefault(); go(open(t.name)); } }, t.title),
      el("span", { class: "muted" }, ` (tag=${t.name}): ${t.summary}`)))),
    el("p", {}, el("a", { href: stateUrl(open(OVERVIEW)), onclick: (e) => { e.preventDefault(); go(open(OVERVIEW)); } }, "Overview of this run")));
}

function fillModules(modules, value) {
  const filter = $("#module-filter").value.trim().toLowerCase();
  const shown = modules.filter((m) => !filter || m.toLowerCase().includes(filter) || m === value);
  const options = [{ value: "", label: modules.length ? `(${modules.length} module${modules.length === 1 ? "" : "s"})` : "—" }]
    .concat(shown.map((m) => ({ value: m, label: m })));
  fillSelect($("#pick-module"), options, value);
}

function onPick(event) {
  const param = event.target.dataset.param;
  // A new run, tool, host or module starts that view fresh: each key says what resets it.
  const state = resetFor(readState(), param);
  state[param] = event.target.value;
  go(state);
}

onNavigate(render);
for (const id of ["#pick-run", "#pick-tool", "#pick-host", "#pick-module"]) $(id).addEventListener("change", onPick);
$("#module-filter").addEventListener("input", async () => {
  const state = readState();
  if (state.run && runDetails.has(state.run)) fillModules((await runDetails.get(state.run)).modules, state.module_name);
});
$("#copy-link").addEventListener("click", async () => {
  try { await navigator.clipboard.writeText(location.href); } catch { window.prompt("Copy this link:", location.href); return; }
  const t = el("div", { class: "toast" }, "Link copied");
  document.body.append(t);
  setTimeout(() => t.remove(), 1500);
});
window.addEventListener("popstate", () => render(readState()));
// A captured run is new to the catalog: refetch it, and open the run with its timeline.
initCapture({
  runsChanged: async () => {
    catalog = await getJson("/api/runs");
    const state = readState();
    if (state.run) fillSelect($("#pick-run"), runOptions(catalog.runs), state.run);
  },
  openRun: (run) => { catalog = null; go({ ...resetFor(readState(), "run"), run, tool: "trace_viewer@" }); },
});
render(readState()).catch((err) => $("#view").replaceChildren(errorBox(err, "Cannot load runs")));
