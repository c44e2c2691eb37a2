// One HLO instruction, from a buffer (the memory viewer's card) or from the HLO view: its
// line of HLO text, its operands and users, its slices and its last use's in the trace,
// and its source lines. Data: GET /api/hlo/instruction (app/hlo_links.py), which draws a
// trace slice or a source file only when it exists in this run: what is not found comes
// as null and is shown as plain text, never as a link (docs/links.md).
import { el } from "../lib/dom.js";
import { go, readState, stateUrl } from "../lib/state.js";
import { cachedJson, errorBox, getJson } from "../lib/api.js";
import { fmtDur } from "../lib/format.js";

// The query string of the HLO view of one instruction (the contract other pages link by).
export function hloState(state, instr, extra = {}) {
  return { run: state.run, tool: "memory_viewer", host: state.host || "", module_name: state.module_name,
    view: "hlo", instr, hops: state.hops || "", ...extra };
}

// The trace viewer opened at a slice (its window and the slice selected): the link the
// server built (start_ms, end_ms, ev in the trace's own clock).
export function traceState(state, link) {
  return { run: state.run, tool: link.tool, host: link.host, start_ms: String(link.start_ms),
    end_ms: String(link.end_ms), ev: String(link.ev) };
}

export function navLink(target, text, attrs = {}) {
  return el("a", { href: stateUrl(target), onclick: (e) => { e.preventDefault(); go(target); }, ...attrs }, text);
}

export function loadInstruction(state, instr, hops = 1) {
  const q = new URLSearchParams({ run: state.run, module_name: state.module_name, instr, hops: String(hops) });
  if (state.host) q.set("host", state.host);
  return cachedJson(`/api/hlo/instruction?${q}`, 32);
}

// The buffer's instruction name: a buffer's shown name carries its shape index ("fusion.3{1}").
export function instructionOf(bufferName) {
  return (bufferName || "").replace(/\{[\d,]*\}$/, "");
}

// The panel's sections: `compact` (a hover card) shows the HLO line and the links only.
export function instructionSections(state, d, { compact = false, idPrefix = "mv" } = {}) {
  const ins = d.instruction;
  const out = [
    el("div", { class: "hp-section", id: `${idPrefix}-hlo` },
      el("h4", {}, "HLO"),
      el("pre", { class: "hp-line" }, ins.text),
      navLink(hloState(state, ins.name), `Open ${ins.name} in the module's HLO text`, { id: `${idPrefix}-hlo-link`, class: "hp-link" }),
      (d.calls || []).map((c) => el("div", { class: "hp-calls" }, "calls ",
        navLink(hloState(state, c.root), `%${c.computation}`, { class: "hp-link hp-call", title: `its root, ${c.root}` })))),
    traceSection(state, d, idPrefix),
    sourceSection(state, d, idPrefix, compact),
  ];
  if (!compact) out.splice(1, 0, neighbourhood(state, d, idPrefix));
  return out;
}

// How many operand/user edges the neighbourhood walks: the URL's `hops` (1 to 4).
export function hopsOf(state) {
  const n = Number(state.hops);
  return Number.isInteger(n) && n >= 1 && n <= 4 ? n : 1;
}

function hopsPicker(state, idPrefix) {
  const pick = el("select", { id: `${idPrefix}-hops`, "aria-label": "hops",
    onchange: (e) => go({ ...readState(), hops: e.target.value === "1" ? "" : e.target.value }) },
  [1, 2, 3, 4].map((n) => el("option", { value: String(n), selected: n === hopsOf(state) }, `${n} hop${n === 1 ? "" : "s"}`)));
  return el("label", { class: "hp-hops" }, pick);
}

function neighbourhood(state, d, idPrefix) {
  const nodes = d.neighborhood.nodes.filter((n) => n.direction !== "self");
  const group = (dir, title) => {
    const rows = nodes.filter((n) => n.direction === dir);
    if (!rows.length) return el("p", { class: "muted" }, `no ${title.toLowerCase()}`);
    return el("div", {}, el("div", { class: "hp-sub" }, title),
      el("ul", { class: "hp-nodes" }, rows.map((n) => el("li", { title: n.text },
        navLink(hloState(state, n.name), n.name, { class: "hp-node" }),
        " ", el("code", {}, n.shape), " ", el("span", { class: "muted" }, n.opcode),
        n.distance > 1 ? el("span", { class: "muted" }, ` · ${n.distance} hops`) : null))));
  };
  return el("div", { class: "hp-section", id: `${idPrefix}-neighbourhood` },
    el("h4", {}, "Neighbourhood ", hopsPicker(state, idPrefix)),
    group("operand", "Operands"), group("user", "Users"),
    d.neighborhood.truncated ? el("p", { class: "muted" }, "more not shown") : null);
}

// Ops that run no kernel of their own: they never have a slice (their buffers are a
// parameter's, a constant's, or another instruction's seen through an alias).
const NO_KERNEL = new Set(["parameter", "constant", "tuple", "get-tuple-element", "bitcast"]);

function slicesRow(state, label, op, found, id, opcode) {
  if (!op) return el("div", { class: "hp-trace-row" }, `${label}: `, el("span", { class: "muted" }, "none (nothing reads this buffer)"));
  if (!found || !found.count) return el("div", { class: "hp-trace-row" }, `${label} `, el("code", {}, op), ": ",
    el("span", { class: "muted" }, NO_KERNEL.has(opcode) ? `no slice of it in this trace (a ${opcode}: no kernel of its own)` : "no slice of it in this trace"));
  const links = found.slices.map((s, i) => navLink(traceState(state, s.link), i ? `#${i + 1}` : `${fmtDur(s.dur_ms)} at ${s.start_ms.toFixed(3)} ms`,
    { class: "hp-link", id: i ? null : id, title: `${op} on ${s.track}` }));
  const runs = `${found.count.toLocaleString("en-US")}${found.countIsLowerBound ? "+" : ""} run${found.count === 1 && !found.countIsLowerBound ? "" : "s"}`;
  return el("div", { class: "hp-trace-row" }, `${label} `, el("code", {}, op), ` (${runs}): `,
    links.flatMap((a, i) => (i ? [" · ", a] : [a])));
}

function traceSection(state, d, idPrefix) {
  const t = d.trace;
  return el("div", { class: "hp-section", id: `${idPrefix}-trace` },
    el("h4", {}, "In the trace"),
    !t ? el("p", { class: "muted" }, "this run has no trace (an XLA dump): nothing ran here")
      : [slicesRow(state, "defined by", d.instruction.name, t.defining, `${idPrefix}-trace-link`, d.instruction.opcode),
        slicesRow(state, "last used by", d.lastUse, t.lastUse, `${idPrefix}-last-use-link`)]);
}

function sourceSection(state, d, idPrefix, compact) {
  const named = d.sourceNamed;
  const where = named ? `${named.file}${named.line ? `:${named.line}` : ""}` : null;
  const box = el("div", { class: "hp-section", id: `${idPrefix}-source` }, el("h4", {}, "Source"));
  if (!named) return box.append(el("p", { class: "muted" }, "the module names no source line for it")), box;
  if (!d.source) {
    box.append(el("code", { class: "hp-src" }, where),
      el("p", { class: "muted" }, "not under the log directory or a --source-root: give profscope serve --source-root DIR to see it"));
    return box;
  }
  const lines = el("div", { class: "hp-lines" });
  const show = async () => {
    const q = new URLSearchParams({ run: state.run, file: d.source.file, context: "4" });
    if (d.source.line) q.set("line", String(d.source.line));
    try {
      lines.replaceChildren(sourceLines(await getJson(`/api/source?${q}`)));
    } catch (err) {
      lines.replaceChildren(errorBox(err, `No lines of ${d.source.path}`));
    }
  };
  box.append(el("code", { class: "hp-src", title: d.source.path }, where), lines);
  if (!compact) show();
  return box;
}

function sourceLines(s) {
  return el("pre", { class: "hp-code", id: "hp-code" }, s.lines.map((text, i) => {
    const n = s.first_line + i;
    return el("div", { class: n === s.line ? "hp-code-line hit" : "hp-code-line" },
      el("span", { class: "hp-ln" }, String(n).padStart(4)), " ", text);
  }));
}

// The whole panel for a pinned buffer or the HLO view's instruction, loading.
export function instructionPanel(state, instr, opts = {}) {
  const box = el("div", { class: "hp", id: `${opts.idPrefix || "mv"}-panel` }, el("p", { class: "muted" }, `Loading ${instr}…`));
  loadInstruction(state, instr, hopsOf(state)).then(
    (d) => box.replaceChildren(...instructionSections(state, d, opts)),
    (err) => box.replaceChildren(errorBox(err, `No HLO for ${instr}`)));
  return box;
}
