// profscope dashboard shell (an ES module; no build step). It owns the top bar (run,
// tool, host, module pickers), the run catalog, and which page module renders the view;
// the view state is the query string (lib/state.js), each page declaring its own keys.
import { $, el } from "./lib/dom.js";
import { defineKeys, go, onNavigate, readState, resetFor, stateUrl } from "./lib/state.js";
import { ApiError, errorBox, getJson } from "./lib/api.js";
import overview from "./pages/overview.js";
import { initCapture } from "./pages/capture.js";
import { showConversions } from "./lib/conversions.js";

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

const runDetails = new Map(); // run name -> promise of /api/run
let catalog = null;
let activePage = null; // the page module that drew the view

function pageFor(tool, run) {
  const name = tool.replace(/@$/, "");
  return PAGES.find((p) => p.tool === name && (!p.accepts || p.accepts(run))) || null;
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
  select.replaceChildren(...options.map((o) => el("option", { value: o.value, disabled: o.disabled, title: o.title }, o.label)));
  const known = options.some((o) => o.value === value);
  select.value = known ? value : options.length ? options[0].value : "";
}

async function render(state) {
  const view = $("#view");
  if (!catalog) catalog = await getJson("/api/runs");
  const runs = catalog.runs;
  if (!runs.length) {
    fillSelect($("#pick-run"), [], "");
    view.replaceChildren(el("h1", {}, "No runs found"),
      el("p", {}, "Nothing in ", el("code", {}, catalog.logdir), " looks like a profile. profscope looks for ",
        el("code", {}, "**/plugins/profile/<session>/<host>.xplane.pb"), ", XLA dumps (", el("code", {}, "*.hlo.pb"),
        "), PyTorch snapshots (", el("code", {}, "*.pickle"), ") and Chrome traces (", el("code", {}, "*.trace.json.gz"), ")."));
    return;
  }
  if (!state.run) return go({ ...state, run: runs[0].name }, { replace: true });
  const run = runs.find((r) => r.name === state.run);
  fillSelect($("#pick-run"), runs.map((r) => ({ value: r.name, label: r.name, title: r.kind })), state.run);
  if (!run) {
    view.replaceChildren(errorBox(new ApiError(404, { error: `no run named "${state.run}" in ${catalog.logdir}` }), "Run not found"));
    return;
  }
  document.title = `${state.tool || "overview"} · ${run.name} · profscope`;

  if (!runDetails.has(run.name)) runDetails.set(run.name, getJson(`/api/run?run=${encodeURIComponent(run.name)}`));
  let details;
  try { details = await runDetails.get(run.name); } catch (err) {
    runDetails.delete(run.name);
    view.replaceChildren(errorBox(err, `Cannot read run ${run.name}`));
    return;
  }
  if (readState().run !== run.name) return; // the user moved on meanwhile
  // Which tools a run offers needs a look inside its files, so it comes with the details.
  const tools = [{ value: "", label: "Overview" }].concat(details.tools.map((t) => ({
    value: t.name, label: t.title, title: t.summary })));
  // XProf names some tools with a trailing @ (trace_viewer@); profscope's links say
  // tool=trace_viewer: either spelling selects the tool's entry.
  const bare = (name) => (name || "").replace(/@$/, "");
  const shown = tools.find((t) => t.value && bare(t.value) === bare(state.tool));
  fillSelect($("#pick-tool"), tools, shown ? shown.value : state.tool);
  // Hosts too: a snapshot's devices are its hosts, known once the file was read.
  const hosts = details.hosts.length ? details.hosts.map((h) => ({ value: h, label: h })) : [{ value: "", label: "—" }];
  fillSelect($("#pick-host"), hosts, state.host);
  fillModules(details.modules, state.module_name);
  showConversions(state, details); // a multi-host run's hosts on the Dask cluster, if the server has one

  // An XProf link names its tool with tag=; the server turned every tag we have a page
  // for into tool= (server/pages.py), so a tag still here is a tool profscope lacks.
  const tag = new URLSearchParams(location.search).get("tag");
  if (tag !== null && !state.tool) return noSuchTool(view, state, details, tag, true);
  const page = pageFor(state.tool, run);
  if (!page && state.tool && !details.tools.some((t) => t.name === state.tool)) return noSuchTool(view, state, details, state.tool, false);
  if (page !== activePage) { // the page on screen is being replaced: let it free its charts
    if (activePage && activePage.leave) activePage.leave();
    activePage = page;
  }
  if (page) {
    await useStyles(page);
    if (stateUrl(readState()) !== stateUrl(state)) return; // the user moved on while the styles loaded
    return page.render(view, state, run, details);
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
    const tool = details.tools.find((t) => t.name === state.tool);
    view.replaceChildren(el("h1", {}, tool ? tool.title : state.tool), errorBox(err, "No data"));
  }
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
    el("p", {}, el("a", { href: stateUrl(open("")), onclick: (e) => { e.preventDefault(); go(open("")); } }, "Overview of this run")));
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
    if (state.run) fillSelect($("#pick-run"), catalog.runs.map((r) => ({ value: r.name, label: r.name, title: r.kind })), state.run);
  },
  openRun: (run) => { catalog = null; go({ ...resetFor(readState(), "run"), run, tool: "trace_viewer@" }); },
});
render(readState()).catch((err) => $("#view").replaceChildren(errorBox(err, "Cannot load runs")));
