// Formatting: bytes in binary units (KiB, MiB, GiB: what XProf shows), times, numbers.

const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];
export const MIB = 1024 * 1024;

export function fmtBytes(n) {
  if (n === null || n === undefined) return "";
  let i = 0;
  while (Math.abs(n) >= 1024 && i < BYTE_UNITS.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(n < 10 ? 2 : 1) : n} ${BYTE_UNITS[i]}`;
}

// A size given in MiB (XProf's memory viewer fields), formatted as bytes.
export function fmtMib(v) { return v === undefined || v === null ? "—" : fmtBytes(Math.round(v * MIB)); }

// The unit for an axis whose largest value is maxBytes: { label, div }.
export function byteUnit(maxBytes) {
  let u = 0;
  for (let i = 0; i < BYTE_UNITS.length; i++) if (maxBytes >= 1024 ** i) u = i;
  return { label: BYTE_UNITS[u], div: 1024 ** u };
}

// A number from a JSON field that may be missing, a string (protobuf's int64) or junk: 0.
export function num(v) {
  if (v === undefined || v === null || v === "") return 0;
  const n = Number(v);
  return Number.isFinite(n) ? n : 0;
}

export function exact(bytes) { return bytes === undefined || bytes === null ? "" : `${Math.round(num(bytes)).toLocaleString()} bytes`; }
export function signed(n) { return n > 0 ? `+${n.toLocaleString()}` : n.toLocaleString(); }
export function signedBytes(n) { n = num(n); return n > 0 ? `+${fmtBytes(n)}` : n < 0 ? `−${fmtBytes(-n)}` : "0 B"; }
export function fmtCount(v) { return v === null || v === undefined ? "—" : Number(v).toLocaleString("en-US"); }
export function fmt3(v) { return v === null || v === undefined ? "—" : Number(v).toFixed(3); }

// A percentage (0–100): two decimals under 10, one above.
export function pct(v) {
  if (v === null || v === undefined || !Number.isFinite(v)) return "—";
  if (v > 0 && v < 0.01) return "<0.01%";
  return `${v < 10 ? v.toFixed(2) : v.toFixed(1)}%`;
}

// A share (0–1) as "12.3 %", small shares to three decimals.
export function fmtShare(x) { return x === null || x === undefined ? "—" : `${(100 * x).toFixed(x < 0.001 && x > 0 ? 3 : 1)} %`; }

export function fmtHex(a) {
  if (a === null || a === undefined) return "—";
  try { return `0x${BigInt(a).toString(16)}`; } catch { return String(a); }
}

// -- times (ms) ---------------------------------------------------------------------------

// A time in ms, as the memory pages print it: 3 decimals under 100 ms, s from 10 s.
export function fmtMs(ms) {
  if (ms === undefined || ms === null || !Number.isFinite(Number(ms))) return "—";
  ms = Number(ms);
  if (Math.abs(ms) >= 10000) return `${(ms / 1000).toFixed(2)} s`;
  if (Math.abs(ms) >= 100) return `${ms.toFixed(1)} ms`;
  return `${ms.toFixed(3)} ms`;
}

// A time in ms to the microsecond, in s from 1 s (a snapshot's event times).
export function fmtMsFixed(ms) { return ms >= 1000 ? `${(ms / 1000).toFixed(3)} s` : `${ms.toFixed(3)} ms`; }

// The trace viewer's units: xplane times are ps.
export const TIME_UNITS = [["s", 1e3], ["ms", 1], ["µs", 1e-3], ["ns", 1e-6], ["ps", 1e-9]];
export function timeUnit(ms) {
  for (const u of TIME_UNITS) if (Math.abs(ms) >= u[1] * 0.9999) return u;
  return TIME_UNITS[TIME_UNITS.length - 1];
}

// A tick label: as many decimals as the tick step needs.
export function fmtTick(ms, unit, step) {
  const v = ms / unit[1], st = step / unit[1];
  const digits = Math.max(0, Math.min(6, -Math.floor(Math.log10(st) + 1e-9)));
  return `${v.toFixed(digits)} ${unit[0]}`;
}

// A duration in the unit that reads best (3 significant digits).
export function fmtDur(ms) {
  if (!Number.isFinite(ms)) return "";
  if (ms === 0) return "0";
  const u = timeUnit(ms);
  const v = ms / u[1];
  return `${Number(v.toPrecision(3)).toLocaleString("en-US", { maximumFractionDigits: 3 })} ${u[0]}`;
}

// A point in time, in the unit of its magnitude, to the precision `resolution` (ms).
export function fmtTime(ms, resolution) {
  const u = timeUnit(Math.max(Math.abs(ms), resolution * 1000));
  const digits = Math.max(0, Math.min(6, Math.ceil(-Math.log10(resolution / u[1]) - 1e-9)));
  return `${(ms / u[1]).toFixed(digits)} ${u[0]}`;
}

// -- byte axes ----------------------------------------------------------------------------

// Tick positions and labels (in binary units, as every card and tooltip) for an axis of
// bytes from 0 to maxBytes: about `count` ticks at 1, 2, 2.5 or 5 × 10^k of the axis's
// unit, up to the first one past maxBytes.
// Plotly's own tick labels are SI ("7.00G"), which reads as decimal gigabytes.
export function byteTicks(maxBytes, count = 5) {
  const max = Math.max(0, num(maxBytes));
  const unit = byteUnit(max || 1);
  const span = max / unit.div || 1;
  const raw = span / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw));
  let step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || 10 * mag;
  if (unit.div === 1) step = Math.max(1, Math.round(step));  // no fractions of a byte
  const digits = Math.max(0, -Math.floor(Math.log10(step) + 1e-9) + (step / mag === 2.5 ? 1 : 0));
  const vals = [], text = [];
  // one tick past the largest value: Plotly pads the range and shows what falls in it
  for (let v = 0; v < span + step * (1 - 1e-9); v += step) {
    vals.push(v * unit.div);
    text.push(v === 0 ? "0" : `${Number(v.toFixed(digits)).toLocaleString("en-US")} ${unit.label}`);
  }
  return { tickvals: vals, ticktext: text };
}

// -- host names -------------------------------------------------------------------------

// What sets several host names apart: the separator-delimited parts they share at the start
// and at the end, and each one's middle. ["34.83.195.179_6003", "34.83.195.180_6003"] ->
// { prefix: "34.83.195.", suffix: "_6003", mids: ["179", "180"] }. Every middle keeps at
// least one part, so distinct names keep distinct middles.
export function hostParts(names) {
  const parts = names.map((n) => String(n).split(/([._:\-/])/).filter((p) => p !== ""));
  const shortest = Math.min(...parts.map((p) => p.length));
  let pre = 0;
  while (pre < shortest - 1 && parts.every((p) => p[pre] === parts[0][pre])) pre++;
  let suf = 0;
  while (pre + suf < shortest - 1 && parts.every((p) => p[p.length - 1 - suf] === parts[0][parts[0].length - 1 - suf])) suf++;
  return {
    prefix: parts[0].slice(0, pre).join(""),
    suffix: suf ? parts[0].slice(-suf).join("") : "",
    mids: parts.map((p) => p.slice(pre, p.length - suf).join("")),
  };
}

// Several hosts in one short text: "34.83.195.{179,180}_6003" (the first `most` middles,
// then how many more).
export function fmtHosts(names, most = 4) {
  if (names.length < 2) return names.join("");
  const { prefix, suffix, mids } = hostParts(names);
  const shown = mids.length > most ? [...mids.slice(0, most), `… ${mids.length - most} more`] : mids;
  return `${prefix}{${shown.join(",")}}${suffix}`;
}
