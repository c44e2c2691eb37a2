// The Capture dialog's "Last N seconds" mode (app/capture_ring.py, docs/capture.md "The last
// N seconds"): the server records every address in short pieces back to back and keeps the
// last N seconds; "Save" turns them into a run. The panel shows what the ring holds per host
// and the gap measured between two pieces (the job is not recorded while it sends one).
// The dialog (pages/capture.js) hands in what it shares: its request helper, run links,
// error line and form lock; this module imports nothing of it.
import { el, fill } from "../lib/dom.js";
import { fmtBytes } from "../lib/format.js";

const POLL_MS = 1000;

// The form's fields for this mode: the window kept and the length of each piece.
export function ringFields(field) {
  const keep = el("input", { id: "cap-ring-window", type: "text", value: "5s", size: "6" });
  const piece = el("input", { id: "cap-ring-piece", type: "text", value: "1s", size: "6" });
  const box = el("div", { class: "cap-grid", id: "cap-ring-fields", hidden: true },
    field("Keep the last", keep, "e.g. 5s, at most 10m"),
    field("Piece", piece, "each recording; ~3 % is lost between two"));
  return { keep, piece, box };
}

function fmtMs(v) {
  return v == null ? "–" : `${v < 10 ? v.toFixed(1) : Math.round(v)} ms`;
}

function stateText(r) {
  if (r.state === "running") {
    const held = Math.min(...r.hosts.filter((h) => h.state === "recording").map((h) => h.heldS));
    return `keeping the last ${r.windowS} s of ${r.targets.length === 1 ? r.targets[0] : `${r.targets.length} hosts`}`
      + ` · ${Number.isFinite(held) ? held.toFixed(1) : 0} s held`;
  }
  if (r.state === "stopped") return `stopped · ${r.snapshots.length} saved`;
  return r.state === "failed" ? `failed: ${r.error}` : r.state;
}

function hostRow(h) {
  return el("tr", { "data-address": h.address, "data-state": h.state, class: `cap-host-${h.state}` },
    el("td", { class: "cap-addr" }, h.address),
    el("td", { class: "cap-state" }, h.state),
    el("td", { class: "num" }, String(h.pieces)),
    el("td", { class: "num" }, `${h.heldS.toFixed(1)} s`),
    el("td", { class: "num", title: `max ${fmtMs(h.gapMs.max)} over ${h.gapMs.count} gaps` }, fmtMs(h.gapMs.mean)),
    el("td", { class: "num" }, h.bytes ? fmtBytes(h.bytes) : ""),
    el("td", { class: "cap-host-error" }, h.error || ""));
}

// The ring's panel: start(body) posts it, then it follows the ring until stopped.
// ctx: { send, runLink, showError, busy, runsChanged }.
export function ringPanel(ctx) {
  let ring = null;
  let timer = 0;
  const state = el("div", { class: "cap-stage", id: "cap-ring-state", "aria-live": "polite" });
  const save = el("button", { type: "button", id: "cap-ring-save", class: "cap-primary", onclick: saveNow,
    title: "Save the seconds the ring holds as a run, ending now; the ring records on" }, "Save last seconds");
  const stop = el("button", { type: "button", id: "cap-ring-stop", onclick: stopRing }, "Stop");
  const hosts = el("tbody", {});
  const saved = el("ol", { class: "cap-snapshots", id: "cap-ring-snapshots" });
  const section = el("section", { class: "cap-progress", id: "cap-ring", hidden: true },
    el("div", { class: "cap-stage-row" }, state, save, stop),
    el("table", { class: "cap-hosts", id: "cap-ring-hosts" },
      el("thead", {}, el("tr", {}, el("th", {}, "host"), el("th", {}, "state"), el("th", { class: "num" }, "pieces"),
        el("th", { class: "num" }, "held"), el("th", { class: "num", title: "mean time not recorded between two pieces" }, "gap"),
        el("th", { class: "num" }, "bytes"), el("th", {}, "error"))),
      hosts),
    saved);

  function draw() {
    section.hidden = false;
    section.dataset.state = ring.state;
    state.textContent = stateText(ring);
    save.textContent = `Save last ${ring.windowS} s`;
    save.hidden = stop.hidden = ring.state !== "running";
    fill(hosts, ring.hosts.map(hostRow));
    fill(saved, ring.snapshots.map((j) => el("li", { "data-stage": j.stage },
      j.stage === "saved" ? ctx.runLink(j.run) : el("span", { class: "cap-host-error" }, j.summary || j.error || j.stage),
      j.stage === "saved" ? el("span", { class: "muted" }, ` · ${j.hosts.map((h) => fmtBytes(h.bytes)).join(", ")}`) : null)));
    if (ring.state === "failed") ctx.showError(ring.error);
    ctx.busy(ring.state === "running");
  }

  function poll() {
    clearTimeout(timer);
    if (!ring || ring.state !== "running") return;
    const id = ring.id;
    timer = setTimeout(async () => {
      try {
        const next = await ctx.send("GET", `/api/capture/ring/${encodeURIComponent(id)}`);
        if (!ring || ring.id !== id) return;
        ring = next;
        draw();
        poll();
      } catch (err) {
        ctx.showError(err.message);
      }
    }, POLL_MS);
  }

  async function saveNow() {
    save.disabled = true;
    ctx.showError("");
    try {
      const job = await ctx.send("POST", `/api/capture/ring/${encodeURIComponent(ring.id)}/snapshot`);
      ring = await ctx.send("GET", `/api/capture/ring/${encodeURIComponent(ring.id)}`);
      if (job.stage === "saved") ctx.runsChanged(); else ctx.showError(job.error || job.summary);
      draw();
    } catch (err) {
      ctx.showError(err.message);
    } finally {
      save.disabled = false;
    }
  }

  async function stopRing() {
    stop.disabled = true;
    try {
      ring = await ctx.send("POST", `/api/capture/ring/${encodeURIComponent(ring.id)}/stop`);
      draw();
    } catch (err) {
      ctx.showError(err.message);
    } finally {
      stop.disabled = false;
    }
  }

  return {
    section,
    async start(body) {
      ring = await ctx.send("POST", "/api/capture/ring", body);
      draw();
      poll();
    },
    hide() {
      clearTimeout(timer);
      ring = null;
      section.hidden = true;
    },
  };
}
