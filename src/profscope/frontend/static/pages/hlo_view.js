// The HLO view of the memory viewer (view=hlo): a module's whole HLO text, every
// computation, in XLA's HloModule::ToString shape (tools/hlo_text.py), searchable, with
// one instruction highlighted and scrolled to. Data: GET /api/hlo.
// URL keys: view=hlo, instr (the instruction shown; a click on a line picks another),
// hq (the search: matches are marked, Enter or the arrows walk them). All three reset
// when the run, the tool, the module or the host is picked (memory_viewer.js declares them).
import { el } from "../lib/dom.js";
import { go, readState, setUrl } from "../lib/state.js";
import { cachedJson, errorBox } from "../lib/api.js";
import { instructionPanel, navLink } from "./hlo_panel.js";

const NAME = /^\s*(?:ROOT )?%(\S+) = /;

export async function renderHloView(view, state, run) {
  const back = { ...state, view: "", instr: "", hq: "", buffer: "", hlo_op: state.instr || "" };
  const root = el("div", { class: "mv hv" },
    el("div", { class: "mv-head" }, el("h1", {}, "HLO"),
      el("div", { class: "mv-subtitle" }, el("code", { class: "mv-module" }, state.module_name),
        el("span", { class: "muted" }, ` · ${run.name}`))),
    el("p", {}, navLink(back, state.instr ? `Back to the memory viewer (the buffers of ${state.instr})` : "Back to the memory viewer",
      { id: "hv-back" })),
    el("p", { class: "muted" }, `Loading the HLO text of ${state.module_name}…`));
  view.replaceChildren(root);
  const q = new URLSearchParams({ run: state.run, module_name: state.module_name });
  if (state.host) q.set("host", state.host);
  if (state.instr) q.set("instr", state.instr);
  let d;
  try {
    d = await cachedJson(`/api/hlo?${q}`, 4);
  } catch (err) {
    root.lastChild.replaceWith(errorBox(err, `No HLO text for ${state.module_name}`));
    return;
  }
  if (readState().view !== "hlo" || readState().module_name !== state.module_name) return;
  root.lastChild.remove();
  const text = el("pre", { class: "hv-text", id: "hv-text" },
    d.lines.map((line, i) => el("div", { class: "hv-line", "data-line": String(i) }, line || " ")));
  const search = searchBox(text, state);
  const side = el("aside", { class: "mv-aside hv-aside" }, el("div", { class: "mv-card selected", id: "hv-card" },
    d.instruction ? [el("div", { class: "mv-card-head" }, el("span", { class: "mv-card-kind" }, "instruction")),
      el("div", { class: "mv-card-name" }, d.instruction.name),
      el("p", {}, navLink({ ...back, hlo_op: d.instruction.name }, "Its buffers in the memory viewer", { id: "hv-buffers-link" })),
      instructionPanel(state, d.instruction.name, { idPrefix: "hv" })]
      : el("p", { class: "muted" }, d.missing ? `${state.module_name} has no instruction ${d.missing}.` : "Click an instruction's line to see its neighbourhood, trace slices and source.")));
  root.append(el("p", { class: "mv-hint" }, `${d.lines.length.toLocaleString("en-US")} lines, ${d.computations.length} computations. Click a line to pick its instruction.`),
    search.node, el("div", { class: "mv-layout" }, el("div", { class: "hv-main" }, text), side));
  text.addEventListener("click", (e) => {
    const line = e.target.closest(".hv-line");
    const m = line && NAME.exec(line.textContent);
    if (m && m[1] !== state.instr) go({ ...readState(), instr: m[1] });
  });
  if (d.instruction) {
    const line = text.children[d.instruction.line];
    line.classList.add("hv-selected");
    line.id = "hv-selected";
    line.scrollIntoView({ block: "center" });
  }
  search.apply(!d.instruction);
}

function searchBox(text, state) {
  const input = el("input", { type: "search", id: "hv-search", placeholder: "search the text (Enter: next)", value: state.hq || "" });
  const count = el("span", { class: "muted", id: "hv-count" });
  let hits = [];
  let at = -1;
  const move = (step) => {
    if (!hits.length) return;
    if (at >= 0) hits[at].classList.remove("hv-current");
    at = (at + step + hits.length) % hits.length;
    hits[at].classList.add("hv-current");
    hits[at].scrollIntoView({ block: "center" });
    count.textContent = `${at + 1} of ${hits.length}`;
  };
  const apply = (jump) => {
    const needle = input.value.trim().toLowerCase();
    for (const h of hits) h.classList.remove("hv-hit", "hv-current");
    hits = needle ? [...text.children].filter((line) => line.textContent.toLowerCase().includes(needle)) : [];
    for (const h of hits) h.classList.add("hv-hit");
    at = -1;
    count.textContent = needle ? `${hits.length.toLocaleString("en-US")} lines match` : "";
    if (jump) move(1);
  };
  input.addEventListener("input", () => { setUrl({ ...readState(), hq: input.value }); apply(true); });
  input.addEventListener("keydown", (e) => { if (e.key === "Enter") { e.preventDefault(); move(e.shiftKey ? -1 : 1); } });
  const node = el("div", { class: "hv-search" }, input,
    el("button", { type: "button", onclick: () => move(-1), title: "previous match" }, "↑"),
    el("button", { type: "button", onclick: () => move(1), title: "next match" }, "↓"), count);
  return { node, apply };
}
