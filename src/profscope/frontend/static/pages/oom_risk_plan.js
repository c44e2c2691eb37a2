// The OOM risk page's "What would make it fit" (tools/oom_plan.py's payload under `plan`):
// the priced changes, each with the peak it leaves and that peak's tier, and the batch
// (or sequence) size fitted from the run's compilations of the same program. URL keys:
// batch (the size to predict the peak at) and shards (devices the sharding change
// spreads the state over), both sent to the tool as they are.
import { el } from "../lib/dom.js";
import { go, readState } from "../lib/state.js";
import { fmtBytes, fmtCount as n, fmtShare as pct } from "../lib/format.js";
import { RISK as RISK_COLORS } from "../lib/colors.js";

export const PLAN_KEYS = { batch: { resetOn: ["run", "module_name"] }, shards: {}, fit_with: { resetOn: ["run"] }, jax_gpu: {}, jax_mem_fraction: {} };

// The query parameters of the plan, added to the tool's data URL.
export function planParams(q, state) {
  for (const k of ["batch", "shards", "fit_with", "jax_gpu", "jax_mem_fraction"]) if ((state[k] || "").trim()) q.set(k, state[k].trim());
}

// Beside the capacity field: the run was JAX on a GPU, so the capacity is the share of the
// device JAX preallocates (XLA_PYTHON_CLIENT_MEM_FRACTION, 0.75 unless the field says).
export function jaxControl(state) {
  const on = Boolean(state.jax_gpu || state.jax_mem_fraction);
  const box = el("input", { type: "checkbox", id: "oom-jax-gpu", ...(on ? { checked: "" } : {}) });
  const frac = el("input", { type: "text", id: "oom-jax-fraction", size: 5, value: state.jax_mem_fraction || "", placeholder: "0.75",
    "aria-label": "XLA_PYTHON_CLIENT_MEM_FRACTION" });
  const apply = () => go({ ...readState(), jax_gpu: box.checked ? "1" : "", jax_mem_fraction: box.checked ? frac.value.trim() : "" });
  box.addEventListener("change", apply);
  frac.addEventListener("keydown", (e) => { if (e.key === "Enter") { box.checked = true; apply(); } });
  return el("span", { class: "oom-jax" }, box, el("label", { for: "oom-jax-gpu" }, " JAX on GPU"), ", preallocating ", frac,
    el("span", { class: "muted small" }, " of the device (XLA_PYTHON_CLIENT_MEM_FRACTION)"));
}

const tier = (risk) => el("span", { class: "oom-risk small", style: `background:${RISK_COLORS[risk] || RISK_COLORS.UNKNOWN}` }, risk);

// linkTo(link, text): the page's link into the evidence's tool (oom_risk.js).
export function planSection(d, linkTo) {
  const plan = d.plan;
  if (!plan) return null;
  return el("div", { class: "oom-plan", id: "oom-plan" },
    el("h2", {}, "What would make it fit"),
    el("p", { class: "oom-hint" }, `Priced from the buffers live at the peak of ${plan.module}; each change's peak is rated at the same capacity and thresholds (docs/oom_risk.md, "What would make it fit").`),
    savingsTable(plan.savings, linkTo),
    batchBlock(plan.batch, d));
}

function savingsTable(rows, linkTo) {
  if (!rows.length) return el("p", { class: "oom-none", id: "oom-savings" }, "No change priced: the module's buffers hold no undonated argument, activation, state or float32 buffer to act on.");
  return el("table", { class: "oom-table", id: "oom-savings" },
    el("thead", {}, el("tr", {}, ...["change", "saves", "peak after", "tier after", "largest buffers", "how"]
      .map((h, i) => el("th", { class: i === 1 || i === 2 ? "num" : "" }, h)))),
    el("tbody", {}, rows.map((c) => el("tr", { "data-change": c.id },
      el("td", {}, c.title),
      el("td", { class: "num", title: `${n(c.savedBytes)} bytes` }, fmtBytes(c.savedBytes),
        c.savedAtLeastBytes !== undefined ? el("div", { class: "muted small" }, `at least ${fmtBytes(c.savedAtLeastBytes)}`) : null),
      el("td", { class: "num", title: `${n(c.peakAfterBytes)} bytes` }, fmtBytes(c.peakAfterBytes),
        c.utilizationAfter !== null ? el("div", { class: "muted small" }, pct(c.utilizationAfter)) : null),
      el("td", {}, tier(c.riskAfter)),
      el("td", { class: "small" }, c.buffers.slice(0, 3).flatMap((b, i) => [i ? el("br") : null,
        b.link ? linkTo(b.link, b.name) : el("code", {}, b.name), " ", el("span", { class: "muted" }, fmtBytes(b.bytes))])),
      el("td", { class: "muted small" }, c.detail)))));
}

function batchBlock(b, d) {
  if (!b) return null;
  const dim = b.dimension && b.dimension.parameter
    ? el("span", {}, "dimension ", el("code", {}, String(b.dimension.dimension)), " of ", el("code", {}, b.dimension.parameter)) : "the batch size";
  const pts = b.points.map((p) => p.size === null ? `${p.moduleName} (${fmtBytes(p.peakBytes)})` : `${n(p.size)} → ${fmtBytes(p.peakBytes)}`).join(", ");
  // A slope is shown only where the fit stands: no second size, or several sizes at once,
  // or a peak that falls with the size has no "bytes per unit".
  const fitted = b.bytesPerUnit !== undefined && b.bytesPerUnit > 0 && !(b.dimension || {}).unexplained;
  const lines = [
    el("p", {}, el("b", {}, "Batch size that fits. "), b.points.length > 1 ? ["Fitted on ", dim, ` from ${b.points.length} compilations of the program: ${pts}`] : `One compilation of the program: ${pts}`,
      fitted ? `; ${fmtBytes(b.bytesPerUnit)} more per unit beyond the largest.` : "."),
    // Unchecked (two compilations) reads as a warning too: only more sizes check the line.
    el("p", { class: b.trust.ok && b.trust.checked ? "oom-plan-trust" : "oom-note", id: "oom-batch-trust" },
      b.trust.ok ? (b.trust.checked ? "" : "Unchecked: ") : "Not trustworthy: ", b.trust.reason)];
  if (b.largest) {
    const item = (label, x) => el("li", {}, `${label}: `, x && x.size ? el("b", {}, n(x.size)) : "none",
      x && x.size ? ` (peak ${fmtBytes(x.peakBytes)}${x.extrapolated ? ", extrapolated beyond the compiled sizes" : ""})` : "");
    lines.push(el("ul", { id: "oom-batch-largest" },
      item(`largest that fits ${fmtBytes(b.capacityBytes)}`, b.largest.fits),
      item(`largest below HIGH (< ${Math.round(100 * d.thresholds.high)} %)`, b.largest.belowHigh),
      item(`largest rated LOW (< ${Math.round(100 * d.thresholds.medium)} %)`, b.largest.belowMedium)));
  } else if (fitted && d.capacityBytes === null) {
    lines.push(el("p", { class: "muted" }, "Give the device's memory above to get the largest batch that fits."));
  }
  if (fitted) lines.push(batchInput(b));
  lines.push(fitWithInput());
  return el("div", { class: "oom-batch", id: "oom-batch" }, ...lines);
}

// Other runs (profiles or XLA dumps of the same program at other sizes) to fit with.
function fitWithInput() {
  const input = el("input", { id: "oom-fit-with", type: "text", size: 40, value: readState().fit_with || "",
    placeholder: "run names, comma-separated", "aria-label": "runs to fit with" });
  const apply = () => go({ ...readState(), fit_with: input.value.trim() });
  input.addEventListener("keydown", (e) => { if (e.key === "Enter") apply(); });
  return el("div", { class: "oom-capacity" }, el("label", { for: "oom-fit-with" }, "Also fit with runs"), input,
    el("button", { type: "button", id: "oom-fit-with-apply", onclick: apply }, "Fit"),
    el("span", { class: "muted small" }, "the same program profiled or dumped at other sizes"));
}

function batchInput(b) {
  const input = el("input", { id: "oom-batch-size", type: "text", size: 8, value: readState().batch || "", "aria-label": "batch size" });
  const apply = () => go({ ...readState(), batch: input.value.trim() });
  input.addEventListener("keydown", (e) => { if (e.key === "Enter") apply(); });
  const at = b.at;
  return el("div", { class: "oom-capacity" }, el("label", { for: "oom-batch-size" }, "Peak at size"), input,
    el("button", { type: "button", id: "oom-batch-apply", onclick: apply }, "Predict"),
    at ? el("span", { id: "oom-batch-at" }, `${n(at.size)}: `, el("b", {}, fmtBytes(at.peakBytes)), ` (${n(at.peakBytes)} bytes) `,
      tier(at.risk), at.utilization !== null ? ` ${pct(at.utilization)}` : "",
      el("span", { class: "muted small" }, at.interpolated ? " between compiled sizes" : " extrapolated beyond the compiled sizes")) : null);
}
