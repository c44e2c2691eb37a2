// The view state is the query string: a copied URL reopens the same view, back/forward
// walk through views. This module knows no key: the shell and each page module declare
// theirs with defineKeys(), with a default and the keys whose change resets them.

const KEYS = new Map(); // name -> { default, resetOn: Set of key names }
let onChange = () => {};

// defineKeys({ buffer: { default: "", resetOn: ["run", "module_name"] }, flows: {} })
// A key declared twice (two pages share `q`) keeps its first default and merges resetOn.
export function defineKeys(spec) {
  for (const [name, opts = {}] of Object.entries(spec)) {
    const known = KEYS.get(name);
    if (known) { for (const k of opts.resetOn || []) known.resetOn.add(k); continue; }
    KEYS.set(name, { default: opts.default ?? "", resetOn: new Set(opts.resetOn || []) });
  }
}

export function readState() {
  const q = new URLSearchParams(location.search);
  const state = {};
  for (const [name, key] of KEYS) state[name] = q.get(name) || key.default;
  return state;
}

// The URL of a state: declared keys in declaration order, defaults left out.
export function stateUrl(state) {
  const q = new URLSearchParams();
  for (const [name, key] of KEYS) if (state[name] && state[name] !== key.default) q.set(name, state[name]);
  const s = q.toString();
  return s ? `?${s}` : location.pathname;
}

// The state after `changed` was picked: every key that resets on it back to its default.
export function resetFor(state, changed) {
  const out = { ...state };
  for (const [name, key] of KEYS) if (key.resetOn.has(changed)) out[name] = key.default;
  return out;
}

// Navigate: push (or replace) the state's URL, then let the shell render it.
export function go(state, { replace = false } = {}) {
  const url = stateUrl(state);
  if (url !== location.search) history[replace ? "replaceState" : "pushState"](null, "", url);
  return onChange(readState());
}

// Change the URL without rendering (a filter being typed, a window being panned).
export function setUrl(state, { push = false } = {}) {
  const url = stateUrl(state);
  if (url !== location.search) history[push ? "pushState" : "replaceState"](null, "", url);
}

export function onNavigate(fn) { onChange = fn; }
