// Compare (issue 36, docs/compare.md): the "Compare with…" picker, the diff's head and the
// delta table, shared by every page that compares (memory viewer, memory profile,
// snapshots, Steps & ops, OOM risk, Summary). The picker writes base, base_host and
// base_module into the URL (a copied link reopens the same comparison); a page sends them
// to its data route (compareParams) and draws the diff JSON the route then answers.
// Rows: { key, label, in: both|base_only|current_only, base, current, delta, match,
// link_base, link_current }; a growth is drawn red, a shrink green (costs go up or down).
import { el, fill } from "./dom.js";
import { go, stateUrl } from "./state.js";
import { cachedJson, getJson } from "./api.js";
import { fmtBytes, fmtShare } from "./format.js";
import { RISK } from "./colors.js";
import { sortableTable } from "./table.js";

// The URL keys, for a page's `keys`: a new run forgets its base, a new base its host/module.
export const COMPARE_KEYS = {
  base: { resetOn: ["run"] },
  base_host: { resetOn: ["run", "base"] },
  base_module: { resetOn: ["run", "base"] },
};
const FIELDS = Object.keys(COMPARE_KEYS);
export const GROWTH = RISK.HIGH;
export const SHRINK = RISK.LOW;

export function comparing(state) { return FIELDS.some((k) => state[k]); }

// The compare fields of the state on a data URL's parameters (URLSearchParams).
export function compareParams(q, state) {
  for (const k of FIELDS) if (state[k]) q.set(k, state[k]);
  return q;
}

// A value in the diff's unit: "bytes" or "us" (µs), as the tools' totals say.
export function fmtAmount(v, unit) {
  if (v === null || v === undefined) return "—";
  if (unit === "bytes") return fmtBytes(v);
  const a = Math.abs(v), sign = v < 0 ? "−" : "";
  return sign + (a >= 1e6 ? `${(a / 1e6).toFixed(3)} s` : a >= 1e3 ? `${(a / 1e3).toFixed(3)} ms` : `${a.toFixed(3)} µs`);
}

export function fmtDelta(v, unit) {
  if (v === null || v === undefined) return "—";
  if (!v) return unit === "bytes" ? "0 B" : "0";
  return (v > 0 ? "+" : "−") + fmtAmount(Math.abs(v), unit);
}

export function deltaStyle(v) { return v > 0 ? `color: ${GROWTH}` : v < 0 ? `color: ${SHRINK}` : null; }

function openLink(query, text, cls) {
  if (!query) return null;
  const state = Object.fromEntries(new URLSearchParams(query));
  return el("a", { href: query, class: cls, onclick: (e) => { e.preventDefault(); go(state); } }, text);
}

// The diff's head: what against what, the verdict then → now, the total and its change,
// what the rows leave unattributed (the residual), or why nothing could be compared.
export function compareHead(diff) {
  const t = diff.totals;
  const unit = t ? t.unit : null;
  const share = t && t.base ? ` (${t.delta >= 0 ? "+" : "−"}${fmtShare(Math.abs(t.delta / t.base))})` : "";
  const verdict = diff.verdict;
  return el("div", { class: "cmp-head", id: "cmp-head", "data-comparable": String(diff.comparable !== false) },
    el("div", { class: "cmp-sides" },
      el("span", { class: "cmp-side", id: "cmp-side-base" }, el("b", {}, "base "), diff.base.label),
      el("span", { class: "cmp-arrow" }, "→"),
      el("span", { class: "cmp-side", id: "cmp-side-current" }, el("b", {}, "current "), diff.current.label)),
    diff.comparable === false
      ? el("p", { class: "cmp-why", id: "cmp-why" }, `Cannot compare: ${diff.why}`)
      : null,
    verdict ? el("p", { class: "cmp-verdict", id: "cmp-verdict", "data-change": verdict.change }, el("b", {}, "Verdict "), verdict.text,
      verdict.change && verdict.change !== "same" ? ` (${verdict.change})` : "") : null,
    t ? el("p", { class: "cmp-total", id: "cmp-total" }, el("b", {}, "Total "),
      `${fmtAmount(t.base, unit)} → ${fmtAmount(t.current, unit)}, `,
      el("span", { class: "cmp-delta", style: deltaStyle(t.delta), "data-delta": String(t.delta) }, fmtDelta(t.delta, unit) + share),
      t.residual ? el("span", { class: "muted" }, `; not attributed to a row: ${fmtDelta(t.residual, unit)}`) : null) : null,
    diff.comparable !== false && diff.why ? el("p", { class: "muted" }, diff.why) : null);
}

const IN_WORDS = { both: "both", base_only: "base only", current_only: "current only" };

// The rows with their change, largest first (the diff's order), +/− coloured; a row
// present in one side only is marked. opts: id, unit (default the totals'), onHover(row|null),
// pageRows, extra columns ({ key, label, value, show, num }) after the label.
export function deltaTable(diff, rows, opts = {}) {
  const unit = opts.unit || (diff.totals && diff.totals.unit) || "bytes";
  const columns = [
    { key: "label", label: opts.label || "What", value: (r) => r.label, nowrap: false },
    ...(opts.extra || []),
    { key: "in", label: "In", value: (r) => IN_WORDS[r.in] || r.in,
      show: (r) => el("span", { class: `cmp-in cmp-${r.in}` }, IN_WORDS[r.in] || r.in) },
    { key: "base", label: "Base", num: true, value: (r) => r.base, show: (r) => fmtAmount(r.base, unit) },
    { key: "current", label: "Current", num: true, value: (r) => r.current, show: (r) => fmtAmount(r.current, unit) },
    { key: "delta", label: "Change", num: true, value: (r) => r.delta, sortValue: (r) => Math.abs(r.delta),
      show: (r) => el("span", { class: "cmp-delta", style: deltaStyle(r.delta) }, fmtDelta(r.delta, unit)) },
    { key: "match", label: "Matched by", value: (r) => r.match || "—" },
    { key: "open", label: "", value: () => "",
      show: (r) => el("span", { class: "cmp-open" }, openLink(r.link_base, "base", "cmp-link"), " ", openLink(r.link_current, "current", "cmp-link")) },
  ];
  const table = sortableTable({
    id: opts.id || "cmp-table", rows, columns, prefix: "cmp", sortKey: "delta", descending: true,
    text: (r) => `${r.label} ${r.key} ${r.in} ${r.match || ""}`,
    filter: rows.length > 12 ? { id: `${opts.id || "cmp-table"}-filter`, placeholder: "Filter rows", label: "Filter rows" } : null,
    pageRows: opts.pageRows || 50,
    rowClass: (r) => `cmp-row-${r.in}`,
    onHover: opts.onHover,
  });
  return table.node;
}

// The "Compare with…" picker: the base run (every run of the catalog, the run's own kind
// first), its host and, with modules: true, its module; "Straggler vs median host" on a
// run of several hosts (from /api/trace_hosts: the slowest host against the median one);
// "Stop comparing". Every choice is a URL change (go), the page redraws from the URL.
export function comparePicker(state, run, opts = {}) {
  const box = el("div", { class: "cmp-picker", id: "cmp-picker" }, el("span", { class: "cmp-title" }, "Compare with…"));
  // no base run while comparing: another host or module of this run
  const runSel = el("select", { id: "cmp-base", "aria-label": "Compare with run" },
    el("option", { value: "" }, comparing(state) ? "— this run —" : "— nothing —"));
  const hostSel = el("select", { id: "cmp-base-host", "aria-label": "Base host" });
  const modSel = opts.modules ? el("select", { id: "cmp-base-module", "aria-label": "Base module" }) : null;
  const pick = (changes) => go({ ...state, ...changes });
  runSel.addEventListener("change", () => pick({ base: runSel.value, base_host: "", base_module: "" }));
  hostSel.addEventListener("change", () => pick({ base_host: hostSel.value }));
  if (modSel) modSel.addEventListener("change", () => pick({ base_module: modSel.value }));
  box.append(el("label", {}, "run ", runSel), el("label", {}, "host ", hostSel));
  if (modSel) box.append(el("label", {}, "module ", modSel)); // append() would write "null"
  const hosts = run.hosts || [];
  if (hosts.length > 1) {
    box.append(el("button", { id: "cmp-straggler", type: "button", title: "The slowest host against the median host",
      onclick: () => stragglerPair(run).then((p) => p && pick({ base: "", host: p.straggler, base_host: p.median, base_module: "" })) },
    "Straggler vs median host"));
  }
  if (comparing(state)) {
    box.append(el("button", { id: "cmp-clear", type: "button", onclick: () => pick({ base: "", base_host: "", base_module: "" }) },
      "Stop comparing"));
  }
  fillChoices(state, run, runSel, hostSel, modSel);
  return box;
}

// The choices come from the catalog (/api/runs) and the base run's details (/api/run: its
// hosts and modules), the requests the shell makes itself: nothing a run cannot answer.
async function fillChoices(state, run, runSel, hostSel, modSel) {
  try {
    const { runs } = await cachedJson("/api/runs");
    const own = runs.filter((r) => r.kind === run.kind), others = runs.filter((r) => r.kind !== run.kind);
    const option = (r) => el("option", { value: r.name, selected: r.name === state.base }, r.name === run.name ? `${r.name} (this run)` : r.name);
    runSel.append(el("optgroup", { label: `${run.kind} runs` }, own.map(option)));
    if (others.length) runSel.append(el("optgroup", { label: "other kinds" }, others.map(option)));
    const base = await cachedJson(`/api/run?${new URLSearchParams({ run: state.base || run.name })}`);
    fill(hostSel, el("option", { value: "" }, "— same —"),
      (base.hosts || []).map((h) => el("option", { value: h, selected: h === state.base_host }, h)));
    if (modSel) {
      fill(modSel, el("option", { value: "" }, "— same name —"),
        (base.modules || []).map((m) => el("option", { value: m, selected: m === state.base_module }, m)));
    }
  } catch { /* the picker is best effort: the page itself says what is wrong with a run */ }
}

// The slowest host and the median host of a run (their median step times, /api/trace_hosts).
export async function stragglerPair(run) {
  const body = await getJson(`/api/trace_hosts?${new URLSearchParams({ run: run.name })}`);
  const medianOf = (xs) => { const s = [...xs].sort((a, b) => a - b); return s.length ? s[(s.length - 1) >> 1] : null; };
  const hosts = (body.hosts || []).map((h) => ({ host: h.host, step: medianOf((h.steps || []).map((s) => s.durPs)) }))
    .filter((h) => h.step !== null).sort((a, b) => a.step - b.step || a.host.localeCompare(b.host));
  if (hosts.length < 2) return null;
  const straggler = (body.rollup && body.rollup.slowestHost) || hosts[hosts.length - 1].host;
  const rest = hosts.filter((h) => h.host !== straggler);
  return { straggler, median: rest[(rest.length - 1) >> 1].host };
}

// A "Compare with…" URL of the state (for a page's links).
export function compareUrl(state, changes) { return stateUrl({ ...state, ...changes }); }
