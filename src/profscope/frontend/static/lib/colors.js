// The one palette. Series colours are Tableau 10 plus its light companions; UI colours
// match app.css's variables. Every category map below picks from these names, so a
// category looks the same in every chart of every page. The colours live in palette.json
// because the report (profscope report, frontend/render.py) draws with the same ones; a
// JSON module needs the server to answer application/json (server/pages.py).
import palette from "./palette.json" with { type: "json" };

export const P = palette.P;

// Twelve colours in a fixed order, for things without a category (stack frames, sites).
export const SERIES = [P.blue, P.orange, P.red, P.teal, P.green, P.yellow, P.purple, P.pink, P.brown, P.lightGreen, P.darkTeal, P.rose];

// Memory profile timelines.
export const MEMORY = {
  stack: P.red, heap: P.orange, free: P.green, frag: P.blue,
  allocated: P.accent, reserved: P.brown, peak: P.bad, selected: P.fg, row: P.violet,
  allocations: P.orange, deallocations: P.blue,
};

// torch.profiler's memory-timeline categories, in its stacking order.
export const TORCH_CATEGORY = {
  PARAMETER: P.blue, OPTIMIZER_STATE: P.purple, INPUT: P.teal, TEMPORARY: P.orange,
  ACTIVATION: P.red, GRADIENT: P.green, AUTOGRAD_DETAIL: P.yellow, UNKNOWN: P.grey,
};
export const TORCH_OTHER = [P.pink, P.brown, P.lightGreen, P.darkTeal, P.rose, P.lightBlue];

// XLA allocation types (the memory viewer), in XProf's precedence order.
export const XLA_CATEGORY = {
  Parameter: P.blue, Output: P.green, "Thread-local": P.purple,
  Constant: P.brown, Temporary: P.orange, small: P.stone,
};
export const XLA_OTHER = [P.teal, P.yellow, P.pink, P.red, P.lightGreen, P.darkTeal];

// OOM risk: contributor categories (names in P), risk tiers and their gauge bands.
export const OOM_CATEGORY = Object.fromEntries(Object.entries(palette.OOM_CATEGORY).map(([k, name]) => [k, P[name]]));
export const RISK = palette.RISK;
export const RISK_ZONE = palette.RISK_ZONE;

// A PyTorch snapshot's block states.
export const BLOCK = { active_allocated: P.accent, active_pending_free: P.amber, active_awaiting_free: P.amber, inactive: P.silver };

// Trace slices: a stable set of light colours (golden-angle hues) so one fill() per colour
// draws every slice of that colour, with dark labels readable on each.
export const SLICE_COLORS = Array.from({ length: 36 }, (_, i) =>
  `hsl(${Math.round((i * 137.508) % 360)}, ${i % 2 ? 52 : 62}%, ${i % 3 === 0 ? 72 : i % 3 === 1 ? 66 : 78}%)`);

// A category's colour: its own, else one from `others` picked by a hash of its name.
export function colorOf(map, others, name) {
  if (map[name]) return map[name];
  let h = 0;
  for (const ch of String(name || "")) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
  return others[h % others.length];
}

export function rgba(hex, a) {
  const c = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
  return `rgba(${c.join(",")},${a})`;
}

// The colour mixed with white: step 0, 1, 2 -> 0%, 22%, 40% lighter.
export function shade(hex, step) {
  const f = [0, 0.22, 0.4][step] || 0;
  const c = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
  return `rgb(${c.map((v) => Math.round(v + (255 - v) * f)).join(",")})`;
}
