// The "Capture profile" dialog: records a profile from running jobs' profiler servers
// (server/capture_api.py) and opens the captured run. It is not a page (no tool, no URL
// keys): the dialog's state lives here, the run it opens goes into the URL, so what a
// capture produced is a shareable link. A one-shot capture is followed by polling its job
// (the server moves its stage with the clock); continuous mode saves a run per snapshot.
import { $, el, fill } from "../lib/dom.js";
import { ApiError } from "../lib/api.js";
import { fmtBytes } from "../lib/format.js";
import { ringFields, ringPanel } from "./capture_ring.js";

const POLL_MS = 250;
// "Cut off now" is offered while a stopped capture still waits longer than this for its
// answer (the server cuts off 3 s after a stop made while collecting: app/capture.py).
const CUT_OFF_OFFER_S = 5;
// XProf's capture dialog's tracer levels (capture_profile_dialog: hostTracerLevel etc.).
const HOST_LEVELS = [["0", "0 · off"], ["1", "1 · user"], ["2", "2 · default"], ["3", "3 · verbose"]];
const ON_OFF = [["0", "0 · off"], ["1", "1 · on"]];

let hooks = null; // { openRun(run), runsChanged() } from the shell
let allowed = "loopback only";
let dlg = null; // the dialog's parts, built on first open
let job = null; // the one-shot job on screen
let session = null; // the continuous session on screen
let watch = null; // the automatic capture's watch on screen (app/capture_watch.py)
let pollTimer = 0;

// Capturing answers every refusal in the server's one error shape; fetch's own failure
// (server gone) is shown the same way.
async function send(method, url, body) {
  let res;
  try {
    res = await fetch(url, { method, headers: body ? { "content-type": "application/json" } : {}, body: body ? JSON.stringify(body) : undefined });
  } catch (err) {
    throw new ApiError(0, { error: `no answer from the server (${err.message})` });
  }
  const text = await res.text();
  let data;
  try { data = JSON.parse(text); } catch { data = { error: text || res.statusText }; }
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

function select(id, options, value) {
  return el("select", { id }, options.map(([v, label]) => el("option", { value: v, selected: v === value }, label)));
}

function field(label, input, hint) {
  return el("label", { class: "cap-field" }, el("span", {}, label), input, hint ? el("span", { class: "cap-hint muted" }, hint) : null);
}

function build() {
  const d = {};
  // One address a line is a targets file pasted in (the server reads # comments, ranges
  // and dns:/// names: app/capture_targets.py).
  d.targets = el("textarea", { id: "cap-targets", rows: "2", placeholder: "localhost:9999", autocomplete: "off", spellcheck: "false", required: true,
    // Enter starts the capture, as in the one-line field this was; Shift+Enter adds a line.
    onkeydown: (e) => { if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); d.form.requestSubmit(); } } });
  d.duration = el("input", { id: "cap-duration", type: "text", value: "2000", size: "8" });
  d.delay = el("input", { id: "cap-delay", type: "text", value: "0", size: "8" });
  d.host = select("cap-host-level", HOST_LEVELS, "2");
  d.device = select("cap-device-level", ON_OFF, "1");
  d.python = select("cap-python-level", ON_OFF, "0");
  // A continuous session records until stopped: its duration field has no say. Capturing
  // automatically, the duration is what each fired capture records.
  const mode = () => {
    d.duration.disabled = d.continuous.checked || d.ringMode.checked;
    d.autoFields.hidden = !d.auto.checked;
    d.ringFields.box.hidden = !d.ringMode.checked;
    d.start.textContent = d.auto.checked ? "Start watching" : d.ringMode.checked ? "Start recording" : "Start capture";
  };
  d.once = el("input", { type: "radio", name: "cap-mode", id: "cap-mode-once", value: "once", checked: true, onchange: mode });
  d.continuous = el("input", { type: "radio", name: "cap-mode", id: "cap-mode-continuous", value: "continuous", onchange: mode });
  d.auto = el("input", { type: "radio", name: "cap-mode", id: "cap-mode-auto", value: "auto", onchange: mode });
  d.ringMode = el("input", { type: "radio", name: "cap-mode", id: "cap-mode-ring", value: "ring", onchange: mode });
  d.ringFields = ringFields(field);
  // "Capture automatically": the condition in the CLI's --when grammar (parsed by the server,
  // whose error names the bad token), and the probes' interval and length.
  d.when = el("input", { id: "cap-when", type: "text", placeholder: "step_time>2x,for=3 or memory>0.9", autocomplete: "off", spellcheck: "false" });
  d.probeEvery = el("input", { id: "cap-probe-every", type: "text", value: "10s", size: "6" });
  d.probeDuration = el("input", { id: "cap-probe-duration", type: "text", value: "1s", size: "6" });
  // Empty: a fire records a new capture (Duration). A window ("5s"): profscope keeps the
  // last seconds in a ring, the probes read its pieces, and a fire saves them: the seconds
  // before the trigger (app/capture_ring.py, the CLI's --last).
  d.watchLast = el("input", { id: "cap-watch-last", type: "text", value: "", placeholder: "e.g. 5s", size: "6" });
  d.autoFields = el("div", { class: "cap-auto", id: "cap-auto", hidden: true },
    field("When", d.when, "step_time>2x,for=3 · step_time>250ms · memory>0.9 · memory>12GiB · step_time_trend · memory_growth; join with or"),
    el("div", { class: "cap-grid" },
      field("Probe every", d.probeEvery, "a short recording this often"),
      field("Probe length", d.probeDuration, "each probe records"),
      field("Keep the last", d.watchLast, "empty: a new capture when it fires")));
  d.allowed = el("span", { id: "cap-allowed" }, allowed);
  d.error = el("div", { class: "error cap-error", id: "cap-error", role: "alert", hidden: true });
  d.start = el("button", { type: "submit", id: "cap-start", class: "cap-primary" }, "Start capture");
  d.fields = el("fieldset", { class: "cap-settings" },
    field("Profiler addresses", d.targets, "HOST:PORT, comma separated or one a line (Shift+Enter) · worker-{0..7}:9999 · localhost:{9000..9007} · dns:///NAME:PORT: each address of a name"),
    el("div", { class: "cap-grid" },
      field("Duration", d.duration, "ms, or 2s"),
      field("Delay", d.delay, "before recording"),
      field("Host tracer", d.host),
      field("Device tracer", d.device),
      field("Python tracer", d.python)),
    el("div", { class: "cap-mode", role: "radiogroup", "aria-label": "capture mode" },
      el("label", {}, d.once, " One profile"),
      el("label", { title: "The job records continuously; each snapshot saves what it recorded since the previous one as a run" }, d.continuous, " Continuous (snapshots)"),
      el("label", { title: "Short probes watch the job; when the condition holds, a capture of every address is taken and saved as a run" }, d.auto, " Capture automatically"),
      el("label", { title: "profscope records every address in short pieces back to back and keeps the last seconds; Save makes them a run" }, d.ringMode, " Last N seconds")),
    d.autoFields, d.ringFields.box);
  d.form = el("form", { id: "cap-form", onsubmit: (e) => { e.preventDefault(); start(); } },
    d.fields,
    el("div", { class: "cap-actions" }, d.start));

  // One-shot progress.
  d.stage = el("div", { class: "cap-stage", id: "cap-stage", "aria-live": "polite" });
  d.bar = el("div", { class: "cap-bar", id: "cap-bar" });
  d.stop = el("button", { type: "button", id: "cap-stop", hidden: true, onclick: stopJob, title: "End the capture now: what the job answers within a few seconds is saved" }, "Stop now");
  d.hosts = el("tbody", {});
  d.summary = el("div", { class: "cap-summary", id: "cap-summary" });
  d.progress = el("section", { class: "cap-progress", id: "cap-progress", hidden: true },
    el("div", { class: "cap-stage-row" }, d.stage, d.stop), d.bar,
    el("table", { class: "cap-hosts", id: "cap-hosts" },
      el("thead", {}, el("tr", {}, el("th", {}, "host"), el("th", {}, "state"), el("th", { class: "num" }, "bytes"), el("th", {}, "error"))),
      d.hosts),
    d.summary);

  // Continuous mode.
  d.contState = el("div", { class: "cap-stage", id: "cap-cont-state", "aria-live": "polite" });
  d.contHosts = el("tbody", {});
  d.snapshot = el("button", { type: "button", id: "cap-snapshot", class: "cap-primary", onclick: takeSnapshot }, "Take snapshot");
  d.contStop = el("button", { type: "button", id: "cap-cont-stop", onclick: stopContinuous }, "Stop");
  d.snapshots = el("ol", { class: "cap-snapshots", id: "cap-snapshots" });
  d.cont = el("section", { class: "cap-progress", id: "cap-continuous", hidden: true },
    el("div", { class: "cap-stage-row" }, d.contState, d.snapshot, d.contStop),
    el("table", { class: "cap-hosts", id: "cap-cont-hosts" },
      el("thead", {}, el("tr", {}, el("th", {}, "host"), el("th", {}, "state"), el("th", {}, "error"))), d.contHosts),
    d.snapshots);

  // Automatic capture: the watch's state, its fires (each with the run it made) and history.
  d.watchState = el("div", { class: "cap-stage", id: "cap-watch-state", "aria-live": "polite" });
  d.watchStop = el("button", { type: "button", id: "cap-watch-stop", onclick: stopWatch, title: "End the watch (a fired capture under way keeps what it recorded)" }, "Stop watching");
  d.fires = el("ol", { class: "cap-snapshots", id: "cap-fires" });
  d.watchProbe = el("div", { class: "cap-hint muted", id: "cap-watch-probe" });
  d.watchLog = el("ol", { class: "cap-watch-log muted", id: "cap-watch-history", reversed: true });
  d.watch = el("section", { class: "cap-progress", id: "cap-watch", hidden: true },
    el("div", { class: "cap-stage-row" }, d.watchState, d.watchStop), d.watchProbe, d.fires, d.watchLog);

  d.root = el("dialog", { id: "capture-dialog", class: "cap-dialog", "aria-labelledby": "cap-title" },
    el("div", { class: "cap-head" },
      el("h2", { id: "cap-title" }, "Capture a profile"),
      el("button", { type: "button", id: "cap-close", class: "cap-x", title: "Close (the capture goes on)", "aria-label": "close", onclick: () => d.root.close() }, "×")),
    el("p", { class: "cap-help muted", id: "cap-help" }, "In the job: ", el("code", {}, "jax.profiler.start_server(9999)"),
      " · allowed addresses: ", d.allowed),
    d.form, d.error, d.progress, d.cont, d.watch);
  d.ring = ringPanel({ send, runLink, showError, busy, runsChanged: () => hooks.runsChanged() });
  d.root.append(d.ring.section);
  document.body.append(d.root);
  return d;
}

function settings() {
  const d = dlg;
  const duration = d.duration.value.trim();
  const body = {
    targets: d.targets.value.trim(),
    delayMs: /^\d+$/.test(d.delay.value.trim()) ? Number(d.delay.value.trim()) : d.delay.value.trim(),
    hostTracerLevel: Number(d.host.value), deviceTracerLevel: Number(d.device.value), pythonTracerLevel: Number(d.python.value),
  };
  // Milliseconds as a number (XProf's unit); "2s" or "1500ms" as the server parses them.
  if (/^\d+$/.test(duration)) body.durationMs = Number(duration); else body.duration = duration;
  return body;
}

function showError(message) {
  dlg.error.hidden = !message;
  dlg.error.textContent = message || "";
}

function busy(on) {
  dlg.fields.disabled = on;
  dlg.start.disabled = on;
}

async function start() {
  showError("");
  const body = settings();
  busy(true);
  dlg.ring.hide();
  try {
    if (dlg.ringMode.checked) {
      delete body.durationMs; delete body.duration;
      body.window = dlg.ringFields.keep.value.trim();
      body.piece = dlg.ringFields.piece.value.trim();
      job = null; session = null; watch = null;
      dlg.progress.hidden = true; dlg.cont.hidden = true; dlg.watch.hidden = true;
      await dlg.ring.start(body);
    } else if (dlg.auto.checked) {
      body.when = dlg.when.value.trim();
      body.probeEvery = dlg.probeEvery.value.trim();
      body.probeDuration = dlg.probeDuration.value.trim();
      if (dlg.watchLast.value.trim()) body.last = dlg.watchLast.value.trim();
      watch = await send("POST", "/api/capture/watch", body);
      job = null; session = null;
      dlg.progress.hidden = true; dlg.cont.hidden = true;
      drawWatch();
      pollWatch();
    } else if (dlg.continuous.checked) {
      delete body.durationMs; delete body.duration;
      session = await send("POST", "/api/capture/continuous", body);
      job = null; watch = null;
      dlg.progress.hidden = true; dlg.watch.hidden = true;
      drawContinuous();
    } else {
      job = await send("POST", "/api/capture", body);
      session = null; watch = null;
      dlg.cont.hidden = true; dlg.watch.hidden = true;
      drawJob();
      // A capture whose every target refused at once may have ended before its answer
      // came back (a loaded machine): poll() asks nothing more of a done job.
      if (job.done) finished(); else poll();
    }
  } catch (err) {
    busy(false);
    showError(err.message);
  }
}

function poll() {
  clearTimeout(pollTimer);
  if (!job || job.done) return;
  const id = job.id;
  pollTimer = setTimeout(async () => {
    try {
      const next = await send("GET", `/api/capture/job/${encodeURIComponent(id)}`);
      if (!job || job.id !== id) return; // another capture took the dialog meanwhile
      job = next;
      drawJob();
      if (job.done) finished(); else poll();
    } catch (err) {
      showError(err.message);
      busy(false);
    }
  }, POLL_MS);
}

function stageText(j) {
  const left = j.remainingS ?? 0;
  // Stopped: what the job answers before the server cuts its call off is kept.
  if (j.stopped && !j.done) return `stopping — waiting ${Math.ceil(j.cutOffInS ?? 0)} s more for the job's answer…`;
  switch (j.stage) {
    case "probing": return `probing ${j.targets.length === 1 ? j.targets[0] : `${j.targets.length} profiler servers`}…`;
    case "waiting": return `waiting ${Math.ceil(j.startsInS ?? 0)} s before recording`;
    case "recording": return `recording — ${Math.ceil(left)} s left`;
    case "collecting": return "collecting…";
    case "saved": return `saved as ${j.run}` + (j.stopped ? " (stopped early)" : "");
    case "failed": return "failed";
    case "stopped": return "stopped — nothing was kept";
    default: return j.stage;
  }
}

function hostRow(h, withBytes) {
  return el("tr", { "data-address": h.address, "data-state": h.state, class: `cap-host-${h.state}` },
    el("td", { class: "cap-addr" }, h.address),
    el("td", { class: "cap-state" }, h.state),
    withBytes ? el("td", { class: "num" }, h.bytes ? fmtBytes(h.bytes) : "") : null,
    el("td", { class: "cap-host-error" }, h.error || ""));
}

function drawJob() {
  const d = dlg, j = job;
  d.progress.hidden = false;
  d.progress.dataset.stage = j.stage;
  d.stage.textContent = stageText(j);
  const dur = j.durationMs / 1000;
  let p = 0;
  if (j.stage === "recording" && dur > 0) p = 1 - Math.min(dur, j.remainingS ?? 0) / dur;
  else if (["collecting", "saved", "failed", "stopped"].includes(j.stage)) p = 1;
  d.bar.style.setProperty("--p", `${Math.round(100 * p)}%`);
  d.bar.classList.toggle("cap-bar-failed", j.stage === "failed" || j.stage === "stopped");
  // Stop works in every stage until the job is done: a profiler that never answers while
  // "collecting" is cut off too (issue 32). A stopped long recording is given time to be
  // sent; "Cut off now" ends that wait (the server then waits a few seconds only).
  const waiting = j.stopped && (j.cutOffInS ?? 0) > CUT_OFF_OFFER_S;
  d.stop.hidden = j.done || (j.stopped && !waiting) || !["probing", "waiting", "recording", "collecting"].includes(j.stage);
  d.stop.textContent = waiting ? "Cut off now" : "Stop now";
  fill(d.hosts, j.hosts.map((h) => hostRow(h, true)));
  fill(d.summary);
}

function runLink(run) {
  return el("a", { href: `/?run=${encodeURIComponent(run)}&tool=trace_viewer%40`, class: "cap-run", "data-run": run,
    onclick: (e) => {
      e.preventDefault();
      dlg.root.close();
      // A run already on screen (a capture opens its run behind the dialog) is left as it is.
      if (new URLSearchParams(location.search).get("run") !== run) hooks.openRun(run);
    } }, run);
}

function finished() {
  busy(false);
  const j = job;
  if (j.stage !== "saved") {
    // Every host failed: the reason, and the form again for another try.
    showError(j.error || j.summary || "the capture failed");
    return;
  }
  hooks.runsChanged();
  const failed = j.hosts.filter((h) => h.state === "failed");
  if (!failed.length) { // all there: show the run itself
    if (dlg.root.open) dlg.root.close();
    hooks.openRun(j.run);
    return;
  }
  // Some hosts failed: the run opens behind the dialog, which stays to say which and why.
  hooks.openRun(j.run);
  fill(dlg.summary, `${j.hosts.length - failed.length} of ${j.hosts.length} hosts saved into `, runLink(j.run), ".");
}

// A button's action: the button is off while it runs, a refusal is shown.
async function press(button, action) {
  button.disabled = true;
  try {
    await action();
  } catch (err) {
    showError(err.message);
  } finally {
    button.disabled = false;
  }
}

async function stopJob() {
  if (!job) return;
  await press(dlg.stop, async () => {
    job = await send("POST", `/api/capture/job/${encodeURIComponent(job.id)}/stop`);
    drawJob();
  });
}

function drawContinuous() {
  const d = dlg, s = session;
  d.cont.hidden = false;
  d.cont.dataset.state = s.state;
  const live = s.hosts.filter((h) => h.state === "recording").map((h) => h.address);
  d.contState.textContent = s.state === "running" ? `recording continuously on ${live.join(", ")}`
    : s.state === "stopped" ? `stopped · ${s.snapshots.length} snapshot${s.snapshots.length === 1 ? "" : "s"}` : s.state;
  d.snapshot.hidden = d.contStop.hidden = s.state !== "running";
  fill(d.contHosts, s.hosts.map((h) => hostRow(h, false)));
  fill(d.snapshots, s.snapshots.map((j) => el("li", { "data-stage": j.stage },
    j.stage === "saved" ? runLink(j.run) : el("span", { class: "cap-host-error" }, j.summary || j.error || j.stage),
    j.stage === "saved" ? el("span", { class: "muted" }, ` · ${j.hosts.filter((h) => h.state === "saved").map((h) => fmtBytes(h.bytes)).join(", ")}`) : null)));
  if (s.state === "failed") { showError(s.error); busy(false); }
  else busy(s.state === "running");
}

async function takeSnapshot() {
  if (!session) return;
  showError("");
  await press(dlg.snapshot, async () => {
    const snap = await send("POST", `/api/capture/continuous/${encodeURIComponent(session.id)}/snapshot`);
    session = await send("GET", `/api/capture/continuous/${encodeURIComponent(session.id)}`);
    if (snap.stage === "saved") hooks.runsChanged();
    else showError(snap.error || snap.summary);
    drawContinuous();
  });
}

async function stopContinuous() {
  if (!session) return;
  await press(dlg.contStop, async () => {
    session = await send("POST", `/api/capture/continuous/${encodeURIComponent(session.id)}/stop`);
    drawContinuous();
  });
}

const WATCH_POLL_MS = 1000;
let watchTimer = 0;
const LIVE_WATCH = ["watching", "capturing"];

function pollWatch() {
  clearTimeout(watchTimer);
  if (!watch || !LIVE_WATCH.includes(watch.state)) return;
  const id = watch.id;
  watchTimer = setTimeout(async () => {
    try {
      const next = await send("GET", `/api/capture/watch/${encodeURIComponent(id)}`);
      if (!watch || watch.id !== id) return;
      const saved = (w) => w.fires.filter((f) => f.stage === "saved").length;
      if (saved(next) > saved(watch)) hooks.runsChanged();
      watch = next;
      drawWatch();
      pollWatch();
    } catch (err) {
      showError(err.message);
    }
  }, WATCH_POLL_MS);
}

function watchStateText(w) {
  const n = `${w.probes} probe${w.probes === 1 ? "" : "s"}`;
  switch (w.state) {
    case "watching": return `watching ${w.targets.join(", ")} for ${w.describe} · ${n}` + (w.ring ? " · keeping the last seconds" : "")
      + (w.armed ? "" : " · fired, waiting for it to clear");
    case "capturing": return `fired — capturing ${w.targets.join(", ")}…`;
    case "done": return `done · ${w.fires.length} capture${w.fires.length === 1 ? "" : "s"}`;
    case "stopped": return `stopped · ${n}, ${w.fires.length} fire${w.fires.length === 1 ? "" : "s"}`;
    case "failed": return "failed";
    default: return w.state;
  }
}

function drawWatch() {
  const d = dlg, w = watch;
  d.watch.hidden = false;
  d.watch.dataset.state = w.state;
  d.watchState.textContent = watchStateText(w);
  d.watchStop.hidden = !LIVE_WATCH.includes(w.state);
  fill(d.watchProbe, w.lastProbe ? `last probe: ${w.lastProbe.lines.join("; ")}` : "first probe under way…");
  fill(d.fires, w.fires.map((f) => el("li", { "data-stage": f.stage || "capturing", class: "cap-fire" },
    el("strong", {}, "Fired: "), f.reason, " → ",
    f.stage === "saved" && f.run ? runLink(f.run) : el("span", { class: f.stage === "failed" || f.stage === "stopped" ? "cap-host-error" : "muted" }, f.error || f.stage || "capturing…"))));
  const recent = w.history.slice(-8).reverse();
  fill(d.watchLog, recent.map((h) => el("li", { "data-kind": h.kind }, `${new Date(h.at * 1000).toLocaleTimeString()} ${h.kind}: ${h.text}`)));
  if (w.state === "failed") showError(w.error);
  busy(LIVE_WATCH.includes(w.state));
}

async function stopWatch() {
  if (!watch) return;
  await press(dlg.watchStop, async () => {
    watch = await send("POST", `/api/capture/watch/${encodeURIComponent(watch.id)}/stop`);
    drawWatch();
  });
}

function open() {
  if (!dlg) dlg = build();
  dlg.allowed.textContent = allowed;
  if (!dlg.root.open) dlg.root.showModal();
  if (!dlg.fields.disabled) dlg.targets.focus();
}

// The button shows only where the server captures (GET /api/capture says enabled).
export function initCapture(shellHooks) {
  const button = $("#capture-open");
  if (!button) return;
  hooks = shellHooks;
  button.addEventListener("click", open);
  send("GET", "/api/capture").then((state) => {
    if (!state.enabled) return;
    allowed = state.allowed || allowed;
    button.hidden = false;
  }).catch(() => { /* no capturing: the button stays hidden */ });
}
