// A trace window's binary answer (/api/trace/window?format=columns; docs/trace_viewer.md
// "The window's binary answer"): a little-endian uint32 H, H bytes of JSON (the window as
// the JSON answer has it, each column of `slices` and `flows` replaced by {dtype, offset,
// length}), then the columns' bytes from 4 + H, each at a multiple of 8. Decoded, the
// columns are typed arrays over the answer's own buffer (no copy), indexed as the JSON
// answer's arrays are: the page reads either shape (a preview's answers stay JSON).
import { ApiError, withProgress } from "./api.js";

const ARRAYS = { int8: Int8Array, uint8: Uint8Array, int16: Int16Array, uint16: Uint16Array,
  int32: Int32Array, uint32: Uint32Array, float32: Float32Array, float64: Float64Array };

export function decodeColumns(buf) {
  const h = new DataView(buf).getUint32(0, true);
  const data = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 4, h)));
  const base = 4 + h;
  for (const group of ["slices", "flows"]) {
    const cols = data[group];
    if (!cols) continue;
    for (const [k, c] of Object.entries(cols)) {
      if (c && typeof c === "object" && c.dtype) cols[k] = new ARRAYS[c.dtype](buf, base + c.offset, c.length);
    }
  }
  return data;
}

// getJson's twin for a binary answer: a refusal is the server's JSON error, as there.
export async function getColumns(url) {
  const res = await withProgress(fetch(url));
  if (!res.ok) {
    const text = await res.text();
    let body;
    try { body = JSON.parse(text); } catch { body = { error: text || res.statusText }; }
    throw new ApiError(res.status, body);
  }
  return decodeColumns(await res.arrayBuffer());
}
