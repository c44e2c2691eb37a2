// Plotly, shared: one config, the layout defaults, and the pieces several charts use.
// Plotly itself is a classic script (/static/vendor/plotly.min.js, from the installed
// package) loaded before the modules: it is window.Plotly here.
import { P } from "./colors.js";
import { byteTicks } from "./format.js";

export const CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };

// Plotly's own defaults, written out: every chart starts from the same theme.
export const LAYOUT = {
  font: { family: '"Open Sans", verdana, arial, sans-serif', size: 12, color: "#444" },
  paper_bgcolor: "#fff", plot_bgcolor: "#fff",
};

// A time axis with a dotted spike line across all subplots.
export const SPIKE_AXIS = { zeroline: false, showspikes: true, spikemode: "across", spikesnap: "cursor", spikethickness: 1, spikecolor: P.spike, spikedash: "dot" };
// A white hover card with dark text, for long multi-line hovers.
export const HOVER_CARD = { bgcolor: "#fff", bordercolor: P.spike, font: { color: P.fg, size: 12 }, align: "left" };
// A horizontal legend above the plot, on the left.
export const LEGEND_TOP = { orientation: "h", x: 0, xanchor: "left", y: 1.0, yanchor: "bottom" };

export const plotly = () => window.Plotly;

export function layout(overrides = {}) { return { ...LAYOUT, ...overrides }; }

export function newPlot(div, traces, lay = {}, config = {}) {
  return window.Plotly.newPlot(div, traces, layout(lay), { ...CONFIG, ...config });
}

export function react(div, traces, lay = {}, config = {}) {
  return window.Plotly.react(div, traces, layout(lay), { ...CONFIG, ...config });
}

// Free charts whose element is being replaced (a gone chart would still answer a hover).
export function purge(divs) {
  for (const div of divs) if (div && div.data && window.Plotly) window.Plotly.purge(div);
}

// Plotly renders hover and annotation text as a tiny HTML subset: names from files must not be markup.
export function escapePlotly(s) {
  return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

// A y (or x) axis of bytes labelled in binary units (lib/format.js byteTicks): the data
// are bytes / `scale` (a chart plotting MiB passes 2^20). Plotly's own ticks say "7.00G".
export function bytesAxis(maxBytes, scale = 1, extra = {}) {
  const t = byteTicks(maxBytes);
  return { tickmode: "array", tickvals: t.tickvals.map((v) => v / scale), ticktext: t.ticktext, ...extra };
}
