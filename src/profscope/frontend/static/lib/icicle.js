// The icicle of bytes by stack, shared by the PyTorch snapshot page (torch_snapshot.js)
// and the JAX device-memory profile page (memory_profile_pprof.js): d is the plain data
// the tools build (ids, labels, parents, values with each node's total, hover), the
// outermost frame at the top; a click on a box zooms (Plotly's own).
import { fmtBytes } from "./format.js";
import { react } from "./plotly.js";

export function drawIcicle(div, d, { height = 460 } = {}) {
  return react(div, [{ type: "icicle", ids: d.ids, labels: d.labels, parents: d.parents, values: d.values, hovertext: d.hover,
    text: d.values.map((v) => fmtBytes(v)), branchvalues: "total", maxdepth: 8, tiling: { orientation: "v" }, textinfo: "label+text",
    texttemplate: "%{label}<br>%{text}", hovertemplate: "%{hovertext}<br>%{text} (%{value:,} bytes)<extra></extra>" }],
  { margin: { l: 4, r: 4, t: 4, b: 4 }, height });
}
