// The one palette. Series colours are Tableau 10 plus its light companions; UI colours
// match app.css's variables. Every category map below picks from these names, so a
// category looks the same in every chart of every page.

export const P = {
  // Tableau 10
  blue: "#4e79a7", orange: "#f28e2b", red: "#e15759", teal: "#76b7b2", green: "#59a14f",
  yellow: "#edc948", purple: "#b07aa1", pink: "#ff9da7", brown: "#9c755f", grey: "#bab0ac",
  // companions
  lightGreen: "#8cd17d", darkTeal: "#499894", rose: "#d37295", lightBlue: "#a0cbe8", paleTeal: "#86bcb6",
  stone: "#c9c3bf", silver: "#d5d9e0", neutral: "#8c8c8c", amber: "#e0a43a", violet: "#7b3fb5",
  // UI (app.css: --fg, --muted, --line, --accent, --bad)
  fg: "#1d2330", muted: "#6b7385", line: "#dde1e8", accent: "#2f6fdf", bad: "#b3261e", spike: "#9aa1ad", band: "#5b6b8c",
};

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

// OOM risk: contributor categories and risk tiers.
export const OOM_CATEGORY = {
  parameters: P.blue, optimizer_state: P.purple, gradients: P.red, activations: P.orange,
  inputs: P.teal, outputs: P.green, temporaries: P.yellow, constants: P.brown,
  small: P.stone, allocator_reserve: P.silver, allocated_before: P.paleTeal, unknown: P.neutral,
};
export const RISK = { LOW: "#2e7d32", MEDIUM: "#b26a00", HIGH: "#c62828", OOM: "#7b1fa2", UNKNOWN: "#546e7a" };

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
