// profscope dashboard shell. The whole view state lives in the query string
// (?run=&tool=&host=&module_name=&memory_space=), so a copied URL reopens the same
// view and back/forward walk through views. Tool pages register in TOOL_VIEWS.
"use strict";

const PARAMS = ["run", "tool", "host", "hosts", "module_name", "memory_space", "buffer", "memory_id", "t", "q", "start_ms", "end_ms", "ev", "flows", "capacity", "x", "win", "other"];
const $ = (sel) => document.querySelector(sel);
const runDetails = new Map(); // run name -> promise of /api/run
let catalog = null;

// Tool renderers: name -> async (el, state, run) => void. Later tools add themselves.
window.TOOL_VIEWS = window.TOOL_VIEWS || {};

function readState() {
  const q = new URLSearchParams(location.search);
  return Object.fromEntries(PARAMS.map((k) => [k, q.get(k) || ""]));
}

function stateUrl(state) {
  const q = new URLSearchParams();
  for (const k of PARAMS) if (state[k]) q.set(k, state[k]);
  const s = q.toString();
  return s ? `?${s}` : location.pathname;
}

function go(state, { replace = false } = {}) {
  const url = stateUrl(state);
  if (url !== location.search) history[replace ? "replaceState" : "pushState"](null, "", url);
  render(readState());
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
  return node;
}

function fmtBytes(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(n < 10 ? 2 : 1) : n} ${units[i]}`;
}

class ApiError extends Error {
  constructor(status, body) { super(body.error || `HTTP ${status}`); this.status = status; this.body = body; }
}

async function getJson(url) {
  const res = await withProgress(fetch(url));
  const text = await res.text();
  let body;
  try { body = JSON.parse(text); } catch { body = { error: text || res.statusText }; }
  if (!res.ok) throw new ApiError(res.status, body);
  return body;
}

// Show the server's progress board while a request is slow.
let pending = 0;
async function withProgress(promise) {
  pending++;
  const box = $("#progress");
  let done = false;
  let timer = setTimeout(async function poll() {
    if (done) return;
    box.hidden = false;
    try {
      const { jobs } = await (await fetch("/api/progress")).json();
      if (done) return; // the request finished while this poll was in flight
      const job = jobs[0];
      box.querySelector(".label").textContent = job ? `${job.label}${job.message ? ": " + job.message : ""} (${job.elapsedSeconds}s)` : "working…";
      box.querySelector(".bar").style.setProperty("--p", `${Math.round(100 * (job ? job.fraction : 0))}%`);
    } catch { /* the poll is best effort */ }
    if (!done) timer = setTimeout(poll, 500);
  }, 300);
  try { return await promise; } finally {
    done = true;
    clearTimeout(timer);
    if (--pending === 0) box.hidden = true;
  }
}

// Tool pages re-render on every state change (a hover selection, a filter); this keeps
// their last few payloads so those changes do not refetch. A failed request is dropped
// so the next render retries.
const jsonCache = new Map();
function cachedJson(url, keep = 8) {
  if (!jsonCache.has(url)) {
    const promise = getJson(url);
    promise.catch(() => jsonCache.delete(url));
    jsonCache.set(url, promise);
    while (jsonCache.size > keep) jsonCache.delete(jsonCache.keys().next().value);
  }
  return jsonCache.get(url);
}

function fillSelect(select, options, value) {
  select.replaceChildren(...options.map((o) => el("option", { value: o.value, disabled: o.disabled, title: o.title }, o.label)));
  const known = options.some((o) => o.value === value);
  select.value = known ? value : options.length ? options[0].value : "";
}

function errorBox(err, what) {
  const body = err.body || {};
  return el("div", { class: "error", role: "alert" },
    el("strong", {}, `${what}: `), err.message,
    body.file ? el("div", {}, "file: ", el("code", {}, body.file)) : null,
    err.status ? el("div", { class: "muted" }, `HTTP ${err.status}`) : null);
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
    value: t.name, label: t.title + (t.implemented ? "" : " (coming)"), title: t.summary })));
  fillSelect($("#pick-tool"), tools, state.tool);
  // Hosts too: a snapshot's devices are its hosts, known once the file was read.
  const hosts = details.hosts.length ? details.hosts.map((h) => ({ value: h, label: h })) : [{ value: "", label: "—" }];
  fillSelect($("#pick-host"), hosts, state.host);
  fillModules(details.modules, state.module_name);

  if (!state.tool) return renderOverview(view, run, details, state);
  const toolView = window.TOOL_VIEWS[state.tool.replace(/@$/, "")];
  if (toolView) return toolView(view, state, run, details);
  // No page for this tool yet: show what the data API says (a clear 404 for now).
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

function fillModules(modules, value) {
  const filter = $("#module-filter").value.trim().toLowerCase();
  const shown = modules.filter((m) => !filter || m.toLowerCase().includes(filter) || m === value);
  const options = [{ value: "", label: modules.length ? `(${modules.length} modules)` : "—" }]
    .concat(shown.map((m) => ({ value: m, label: m })));
  fillSelect($("#pick-module"), options, value);
}

function renderOverview(view, run, details, state) {
  const kindLabel = { profile: "profile session", xla_dump: "XLA dump folder", torch_snapshot: "PyTorch memory snapshot", chrome_trace: "Chrome trace" }[run.kind] || run.kind;
  const toolCards = details.tools.map((t) => el("div", { class: `card${t.implemented ? "" : " off"}`, "data-tool": t.name },
    el("h3", {}, t.implemented ? el("a", { href: stateUrl({ ...state, tool: t.name }), onclick: (e) => { e.preventDefault(); go({ ...state, tool: t.name }); } }, t.title) : t.title),
    el("div", {}, t.summary),
    el("div", { class: "tag" }, t.implemented ? `tag=${t.name}` : "not in this version yet")));
  const files = el("table", { id: "files" },
    el("thead", {}, el("tr", {}, el("th", {}, "file"), el("th", {}, "kind"), el("th", { class: "num" }, "size"))),
    el("tbody", {}, details.files.map((f) => el("tr", {}, el("td", { class: "path" }, f.path), el("td", {}, f.kind), el("td", { class: "num" }, fmtBytes(f.size))))));
  const modules = details.modules.length
    ? el("ul", { class: "modules", id: "modules" }, details.modules.map((m) => el("li", {
        class: m === state.module_name ? "selected" : "", onclick: () => go({ ...state, module_name: m }) }, m)))
    : el("p", { class: "muted" }, "No compiled HLO modules recorded in this run.");
  view.replaceChildren(
    el("h1", { id: "run-title" }, run.name),
    el("dl", { class: "kv" },
      el("dt", {}, "kind"), el("dd", {}, kindLabel),
      el("dt", {}, "folder"), el("dd", {}, el("code", {}, run.folder || ".")),
      el("dt", {}, "hosts"), el("dd", {}, details.hosts.join(", ") || "—"),
      el("dt", {}, "files"), el("dd", {}, `${run.fileCount} (${fmtBytes(run.totalBytes)})`),
      el("dt", {}, "modules"), el("dd", {}, String(details.modules.length))),
    el("h2", {}, "Tools"), el("div", { class: "cards" }, toolCards),
    el("div", { class: "grid2" },
      el("div", {}, el("h2", {}, "Files"), files),
      el("div", {}, el("h2", {}, `HLO modules (${details.modules.length})`), modules,
        el("h2", {}, "File sizes"), el("div", { id: "sizes" }))));
  if (window.Plotly && details.files.length) {
    const sorted = [...details.files].sort((a, b) => b.size - a.size).slice(0, 20).reverse();
    Plotly.newPlot("sizes", [{ type: "bar", orientation: "h", x: sorted.map((f) => f.size),
      y: sorted.map((f) => f.path.split("/").pop()), hovertemplate: "%{y}<br>%{x:,} bytes<extra></extra>" }],
      { margin: { l: 220, r: 10, t: 10, b: 30 }, xaxis: { title: { text: "bytes" } } },
      { displaylogo: false, responsive: true });
  }
}

function onPick(event) {
  const param = event.target.dataset.param;
  const state = readState();
  state[param] = event.target.value;
  // A new run, module or tool starts that view fresh: drop selections made in the old one.
  if (param === "run" || param === "tool" || param === "host") Object.assign(state, { x: "", win: "", other: "" });
  if (param === "run") Object.assign(state, { host: "", hosts: "", module_name: "", memory_space: "", buffer: "", memory_id: "", t: "", q: "", start_ms: "", end_ms: "", ev: "" });
  if (param === "module_name" || param === "memory_space") state.buffer = "";
  if (param === "tool" || param === "host") Object.assign(state, { memory_id: "", t: "", q: "", start_ms: "", end_ms: "", ev: "" });
  if (param === "host") state.hosts = ""; // one host picked: the trace viewer's merged hosts end
  go(state);
}

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
render(readState()).catch((err) => $("#view").replaceChildren(errorBox(err, "Cannot load runs")));
