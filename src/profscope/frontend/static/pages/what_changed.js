// "What changed" (issue 36, docs/compare.md "OOM risk and Summary"): the section the OOM
// risk and Summary pages show when a base is given: the diff JSON of tools/compare_verdicts.py
// (verdict then → now, the total and its split, the top contributors to the change),
// displayed as it comes.
import { el } from "../lib/dom.js";
import { cachedJson, errorBox } from "../lib/api.js";
import { compareHead, compareParams, deltaStyle, deltaTable, fmtDelta } from "../lib/compare.js";
import { fmtBytes } from "../lib/format.js";

// The section, drawn into `slot` once the diff has come: `dataUrl` is the page's own data
// URL (its parameters), the compare fields added here.
export async function whatChanged(slot, dataUrl, state) {
  const url = new URL(dataUrl, location.origin);
  compareParams(url.searchParams, state);
  slot.replaceChildren(el("p", { class: "muted" }, "Comparing…"));
  let diff;
  try { diff = await cachedJson(`${url.pathname}?${url.searchParams}`); } catch (err) {
    slot.replaceChildren(errorBox(err, "Cannot compare"));
    return;
  }
  const parts = [el("h2", {}, "What changed"), compareHead(diff)];
  if (diff.comparable !== false) {
    const rows = diff.rows || [];
    if (rows.length) {
      parts.push(el("h3", {}, diff.tool === "summary" ? "Median step by category" : "Peak by contributor category"),
        deltaTable(diff, rows, { id: "cmp-rows", label: "Category" }));
    }
    if (diff.items && diff.items.length) {
      parts.push(el("h3", {}, "Buffers that changed most"),
        el("p", { class: "muted" }, "Each side's top contributors, matched by name and shape, then by name: they name what moved, the categories above add up."),
        deltaTable(diff, diff.items, { id: "cmp-items", label: "Buffer", unit: "bytes",
          extra: [{ key: "shape", label: "Shape", value: (r) => r.shape || "" }] }));
    }
    if (diff.findings) parts.push(findingChanges(diff.findings));
    if (diff.memory) parts.push(memoryLine(diff.memory));
    for (const note of diff.notes || []) parts.push(el("p", { class: "muted" }, note));
  }
  slot.replaceChildren(...parts);
}

const FINDING_WORDS = { both: "kept", base_only: "gone", current_only: "new" };

function findingChanges(findings) {
  if (!findings.length) return el("p", { class: "muted", id: "cmp-findings" }, "No finding on either side.");
  return el("div", { id: "cmp-findings" }, el("h3", {}, "Findings"),
    el("ul", { class: "cmp-findings" }, findings.map((f) => el("li", { "data-in": f.in },
      el("b", {}, FINDING_WORDS[f.in] || f.in), " ",
      `${f.priority_base || "—"} → ${f.priority_current || "—"} `, f.title || f.id, f.host ? el("span", { class: "muted" }, ` (${f.host})`) : null))));
}

function memoryLine(m) {
  const b = m.base || {}, c = m.current || {};
  return el("p", { id: "cmp-memory" }, el("b", {}, "Memory "),
    `${b.risk || "—"} → ${c.risk || "—"}, peak ${b.peak_bytes === null || b.peak_bytes === undefined ? "—" : fmtBytes(b.peak_bytes)} → ${c.peak_bytes === null || c.peak_bytes === undefined ? "—" : fmtBytes(c.peak_bytes)}`,
    m.peak_delta !== null && m.peak_delta !== undefined ? el("span", { class: "cmp-delta", style: deltaStyle(m.peak_delta) }, ` (${fmtDelta(m.peak_delta, "bytes")})`) : null);
}

