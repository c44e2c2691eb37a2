#!/usr/bin/env python3
"""Record XProf 2.24.2's answers to its listing endpoints, as golden data.

Builds the log directory of ``src/profscope/testing/xprof_layout.py`` in a temporary
folder, starts the real XProf server on it inside a private network namespace
(XProf listens on all interfaces and has no option to change that), asks it every
listing endpoint for every run (and the error cases of ``data``), and writes
``tests/golden/xprof_listing.json``:

    {
      "_meta": {...how it was recorded: xprof version, xplane used, files XProf
                wrote into the log directory...},
      "/data/plugin/profile/runs": {"status": 200,
                                    "content_type": "application/json",
                                    "content_encoding": "gzip",
                                    "body": "<exact decoded body text>",
                                    "json": <parsed body, JSON answers only>},
      ...
    }

Every key but ``_meta`` is the request target (path + query, exactly as sent,
percent-encoding included) in the order the requests were made, which matters:
XProf writes caches into the session folders (see ``docs/xprof_compat.md``).
The temporary log directory's absolute path is replaced by ``{LOGDIR}``
everywhere (keys and bodies). A request that XProf answers with no response at
all (an uncaught exception in its handler; cheroot then drops the connection)
is recorded as ``{"status": null, "error": "..."}``. HTML bodies are recorded
by length and sha256 only.

Usage (as root, which ``unshare -n`` needs):

    python3 scripts/record_xprof_golden.py [--xplane PATH] [--out PATH]

``--xplane`` is the profile written as every host's xplane. Default: the MLP
demo profile (``src/profscope/demo/logdir/*mlp*/plugins/profile/*/demo-host.xplane.pb``)
if it exists, else a fresh JAX CPU profile of a small jitted MLP made with
``--jax-python`` (default ``$JAX_PYTHON``). XProf itself is run
with ``--xprof-python`` (default ``$XPROF_PYTHON``, a venv with
``pip install xprof==2.24.2``; never a project dependency).
"""

from __future__ import annotations

import argparse
import base64
import glob
import gzip
import hashlib
import http.client
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

REPO = pathlib.Path(__file__).resolve().parent.parent
PREFIX = "/data/plugin/profile"
DEFAULT_OUT = REPO / "tests" / "golden" / "xprof_listing.json"
# a venv with xprof==2.24.2 (never a profscope dependency): --xprof-python or $XPROF_PYTHON
DEFAULT_XPROF_PYTHON = os.environ.get("XPROF_PYTHON", "")
DEFAULT_JAX_PYTHON = os.environ.get("JAX_PYTHON", "")  # a venv with jax[cpu]==0.10.2: --jax-python or $JAX_PYTHON
DEMO_GLOB = "src/profscope/demo/logdir/*/plugins/profile/*/demo-host.xplane.pb"
LOGDIR_TOKEN = "{LOGDIR}"

# Tags asked of /hosts for every run: all of XProf's tool names that the hosts
# listing treats differently (ALL_HOSTS only / ALL_HOSTS supported / plain), the
# legacy and HLO ones, an unknown one, and none at all.
HOST_TAGS = (
    None,
    "trace_viewer",
    "trace_viewer@",
    "overview_page",
    "input_pipeline_analyzer",
    "framework_op_stats",
    "kernel_stats",
    "memory_profile",
    "pod_viewer",
    "op_profile",
    "hlo_stats",
    "roofline_model",
    "memory_viewer",
    "graph_viewer",
    "megascale_stats",
    "smart_suggestion",
    "bogus_tool",
)

# A JAX program whose profile has a few real compiled modules (random init,
# loss, train step), like the profiles users bring.
JAX_PROGRAM = r"""
import sys
import jax
import jax.numpy as jnp

def init(key, sizes):
    keys = jax.random.split(key, len(sizes) - 1)
    return [(jax.random.normal(k, (a, b)) * 0.1, jnp.zeros(b))
            for k, a, b in zip(keys, sizes[:-1], sizes[1:])]

def mlp(params, x):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return x @ w + b

@jax.jit
def loss(params, x, y):
    return jnp.mean((mlp(params, x) - y) ** 2)

@jax.jit
def train_step(params, x, y):
    grads = jax.grad(loss)(params, x, y)
    return [(w - 0.01 * gw, b - 0.01 * gb)
            for (w, b), (gw, gb) in zip(params, grads)]

params = init(jax.random.PRNGKey(0), [64, 128, 128, 10])
x = jnp.ones((32, 64))
y = jnp.ones((32, 10))
params = train_step(params, x, y)
loss(params, x, y).block_until_ready()
with jax.profiler.trace(sys.argv[1]):
    for _ in range(3):
        params = train_step(params, x, y)
    loss(params, x, y).block_until_ready()
"""


# --------------------------------------------------------------------------
# Requests
# --------------------------------------------------------------------------


def _target(path: str, params: list[tuple[str, str]] | None = None) -> str:
    """Request target: PREFIX + path + query, percent-encoded like a browser."""
    target = PREFIX + path
    if params:
        target += "?" + urllib.parse.urlencode(params, quote_via=urllib.parse.quote, safe="/@,")
    return target


def plan_requests(logdir: str, runs: list[str]) -> list[str]:
    """All request targets, in order, given the runs XProf listed."""
    t: list[str] = []
    add = t.append

    # Per-run listings. run_tools first (it triggers XProf's HLO extraction and
    # writes .cached_tools.json), then hosts for every tag, then module_list.
    # For one run module_list comes first, to show the answer is the same.
    extra_runs = [
        "bogus",  # unknown session under the root run
        "train/bogus",  # unknown session under a real run folder
        "nope/bogus",  # run folder that does not exist -> uncaught RuntimeError
        "weird/2026_01_08_00_00_00",  # 'profile' folder not under 'plugins'
        "with space/session 1/",  # trailing slash
    ]
    # (An extra, unused parameter keeps the request targets unique; XProf
    # ignores parameters it does not read.)
    if runs:
        add(_target("/module_list", [("run", runs[-1]), ("first", "1")]))
    for run in runs + extra_runs:
        add(_target("/run_tools", [("run", run)]))
        for tag in HOST_TAGS:
            params = [("run", run)] + ([("tag", tag)] if tag is not None else [])
            add(_target("/hosts", params))
        add(_target("/module_list", [("run", run)]))
    # Asked again: the tools cache (.cached_tools.json) answers now.
    for run in runs[:2]:
        add(_target("/run_tools", [("run", run), ("again", "1")]))

    # Form of the run parameter: '+' for space, unencoded space is not sent.
    add(PREFIX + "/run_tools?run=with+space/session+1")
    add(PREFIX + "/hosts?run=with+space/session+1&tag=trace_viewer@")

    # Missing parameters.
    add(_target("/run_tools"))
    add(_target("/hosts"))
    add(_target("/hosts", [("tag", "overview_page")]))
    add(_target("/module_list"))

    # session_path / run_path: bypass the logdir.
    s02 = f"{logdir}/plugins/profile/2026_01_02_00_00_00"
    s05 = f"{logdir}/other/plugins/profile/2026_01_05_00_00_00"
    s06 = f"{logdir}/other/plugins/profile/2026_01_06_00_00_00"
    train_pp = f"{logdir}/train/plugins/profile"
    root_pp = f"{logdir}/plugins/profile"
    add(_target("/runs", [("session_path", s02)]))
    add(_target("/runs", [("session_path", s02 + "/")]))
    add(_target("/runs", [("session_path", s05)]))
    add(_target("/runs", [("session_path", s06)]))
    add(_target("/runs", [("session_path", f"{logdir}/does/not/exist")]))
    add(_target("/runs", [("run_path", root_pp)]))
    add(_target("/runs", [("run_path", train_pp)]))
    add(_target("/runs", [("run_path", f"{logdir}/other/plugins/profile")]))
    add(_target("/runs", [("run_path", f"{logdir}/does/not/exist")]))
    add(_target("/runs", [("run_path", logdir)]))
    add(_target("/runs", [("session_path", s02), ("run_path", train_pp)]))
    add(_target("/run_tools", [("run", "2026_01_02_00_00_00"), ("session_path", s02)]))
    add(_target("/run_tools", [("run", "other_name"), ("session_path", s02)]))
    add(_target("/hosts", [("run", "2026_01_02_00_00_00"), ("tag", "overview_page"), ("session_path", s02)]))
    add(_target("/hosts", [("run", "2026_01_02_00_00_00"), ("tag", "trace_viewer@"), ("session_path", s02)]))
    add(_target("/module_list", [("run", "2026_01_02_00_00_00"), ("session_path", s02)]))
    add(_target("/run_tools", [("run", "2026_01_03_00_00_00"), ("run_path", train_pp)]))
    add(_target("/run_tools", [("run", "train/2026_01_03_00_00_00"), ("run_path", train_pp)]))
    add(_target("/hosts", [("run", "2026_01_03_00_00_00"), ("tag", "framework_op_stats"), ("run_path", train_pp)]))
    add(_target("/module_list", [("run", "2026_01_03_00_00_00"), ("run_path", train_pp)]))
    add(_target("/hosts", [("run", "2026_01_05_00_00_00"), ("tag", "overview_page"), ("run_path", f"{logdir}/other/plugins/profile")]))

    # data: the error answers (and the cheap non-error "No Data" ones).
    add(_target("/data"))
    add(_target("/data", [("run", "bogus"), ("tag", "trace_viewer")]))
    add(_target("/data", [("run", "bogus"), ("tag", "overview_page"), ("host", "hostA")]))
    add(_target("/data", [("run", "nope/bogus"), ("tag", "trace_viewer@")]))
    add(_target("/data", [("run", "2026_01_02_00_00_00")]))
    add(_target("/data", [("run", "2026_01_02_00_00_00"), ("tag", "bogus_tool")]))
    add(_target("/data", [("run", "2026_01_02_00_00_00"), ("tag", "bogus_tool"), ("host", "hostA")]))
    add(_target("/data", [("run", "2026_01_02_00_00_00"), ("tag", "xplane"), ("host", "hostA")]))
    add(_target("/data", [("run", "2026_01_02_00_00_00"), ("tag", "hlo_proto"), ("host", "hostA")]))
    add(_target("/data", [("run", "2026_01_02_00_00_00"), ("tag", "memory_viewer"), ("host", "nohost")]))
    add(_target("/data", [("run", "2026_01_02_00_00_00"), ("tag", "overview_page"), ("host", "nohost")]))
    add(_target("/data", [("run", "2026_01_02_00_00_00"), ("tag", "trace_viewer@"), ("hosts", "hostA,nohost")]))
    add(_target("/data", [("run", "2026_01_02_00_00_00"), ("tag", "hostC"), ("host", "hostC")]))
    add(_target("/data", [("run", "train/eval/2026_01_04_00_00_00"), ("tag", "trace_viewer@")]))
    add(_target("/data", [("run", "other/2026_01_05_00_00_00"), ("tag", "overview_page")]))
    add(_target("/data", [("run", "other/2026_01_06_00_00_00"), ("tag", "memory_viewer"), ("host", "hostA")]))
    add(_target("/data", [("run", "other_name"), ("tag", "trace_viewer@"), ("session_path", s02)]))
    add(_target("/data_csv", [("run", "bogus"), ("tag", "overview_page")]))
    add(_target("/data_csv", [("run", "2026_01_02_00_00_00"), ("tag", "bogus_tool")]))

    # Routing around the prefix.
    add(PREFIX + "/runs/")
    add(PREFIX + "/runs?unused=1")
    add(PREFIX + "/version/")
    add(PREFIX + "/no_such_route")
    add(PREFIX + "/no_such_file.json")
    add("/runs")
    add("/version")
    add(PREFIX + "/generate_cache")
    return t


def _fetch(port: int, target: str, timeout: float = 120.0) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", target, headers={"Accept-Encoding": "gzip"})
        resp = conn.getresponse()
        raw = resp.read()
    except (http.client.HTTPException, ConnectionError, OSError) as e:
        return {"status": None, "error": f"{type(e).__name__}: {e}"}
    finally:
        conn.close()
    encoding = resp.getheader("Content-Encoding")
    body = gzip.decompress(raw) if encoding == "gzip" else raw
    return {
        "status": resp.status,
        "content_type": resp.getheader("Content-Type"),
        "content_encoding": encoding,
        "body_bytes": body,
    }


def read_only_requests(runs: list[str]) -> list[str]:
    """What is asked of XProf when it cannot write into the log directory."""
    t = []
    for run in ("2026_01_02_00_00_00", "train/2026_01_03_00_00_00", "nohlo/2026_01_10_00_00_00"):
        t.append(_target("/run_tools", [("run", run)]))
        t.append(_target("/hosts", [("run", run), ("tag", "overview_page")]))
        t.append(_target("/module_list", [("run", run)]))
    return t


def _inside(args: argparse.Namespace) -> int:
    """Runs inside the private namespaces: server up, ask, server down."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    if args.read_only:
        # A private mount namespace (unshare -m): a read-only view of the logdir,
        # like a read-only bucket. Root ignores file modes, so chmod would not do.
        subprocess.run(["mount", "--bind", args.logdir, args.logdir], check=True)
        subprocess.run(["mount", "-o", "remount,ro,bind", args.logdir], check=True)
    out = pathlib.Path(args.inside_out)
    log = open(out.with_suffix(".server.log"), "wb")
    server = subprocess.Popen(
        [args.xprof_python, "-m", "xprof.server", "--logdir", args.logdir,
         "--port", str(args.port), "--grpc_port", str(args.port + 1)],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            if server.poll() is not None:
                raise SystemExit(f"xprof server exited with {server.returncode}")
            r = _fetch(args.port, PREFIX + "/version", timeout=5)
            if r["status"] == 200:
                break
            if time.monotonic() > deadline:
                raise SystemExit("xprof server did not come up in 120 s")
            time.sleep(0.5)
        results: list[tuple[str, dict]] = []
        r = _fetch(args.port, PREFIX + "/runs")
        results.append((PREFIX + "/runs", r))
        runs = json.loads(r["body_bytes"])
        if args.read_only:
            targets = read_only_requests(runs)
        else:
            targets = [PREFIX + "/version", PREFIX + "/config"] + plan_requests(args.logdir, runs)
            # Asked last: the run list does not change after XProf's own writes.
            targets.append(PREFIX + "/runs?again=1")
        for target in targets:
            results.append((target, _fetch(args.port, target)))
        with open(out, "w") as f:
            json.dump(
                [
                    [t, {k: (base64.b64encode(v).decode() if k == "body_bytes" else v)
                         for k, v in r.items()}]
                    for t, r in results
                ],
                f,
            )
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
    return 0


# --------------------------------------------------------------------------
# Outside: build, run, write
# --------------------------------------------------------------------------


def _resolve_xplane(args: argparse.Namespace, tmp: pathlib.Path) -> tuple[pathlib.Path, str]:
    if args.xplane:
        return pathlib.Path(args.xplane).resolve(), "given with --xplane"
    demos = sorted(p for p in glob.glob(str(REPO / DEMO_GLOB)) if "mlp" in p.lower())
    if demos:
        return pathlib.Path(demos[0]).resolve(), "profscope demo (MLP)"
    prof = tmp / "jax_profile"
    prog = tmp / "make_jax_profile.py"
    prog.write_text(JAX_PROGRAM)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    subprocess.run([args.jax_python, str(prog), str(prof)], check=True, env=env)
    found = sorted(prof.glob("plugins/profile/*/*.xplane.pb"))
    if len(found) != 1:
        raise SystemExit(f"expected one xplane from the JAX program, found {found}")
    version = subprocess.run(
        [args.jax_python, "-c", "import jax, jaxlib; print(jax.__version__, jaxlib.__version__)"],
        check=True, capture_output=True, text=True, env=env,
    ).stdout.split()
    return found[0], (
        f"fresh JAX CPU profile (jax {version[0]}, jaxlib {version[1]}) of the small "
        "jitted MLP in scripts/record_xprof_golden.py:JAX_PROGRAM"
    )


def _snapshot(root: pathlib.Path) -> dict[str, int]:
    return {
        str(p.relative_to(root)): p.stat().st_size
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _modules_in_xplane(xplane_bytes: bytes) -> list[str]:
    """Names of the "/host:metadata" plane's event metadata: the compiled modules.

    XSpace.planes = 1; XPlane.name = 2, XPlane.event_metadata = 4 (map entry:
    key 1, value 2); XEventMetadata.name = 2.
    """
    from profscope.testing.xprof_layout import _fields, _plane_name

    names = []
    for num, wt, plane, _ in _fields(xplane_bytes):
        if num != 1 or wt != 2 or _plane_name(plane) != "/host:metadata":
            continue
        for pnum, pwt, entry, _ in _fields(plane):
            if pnum != 4 or pwt != 2:
                continue
            for enum, ewt, meta, _ in _fields(entry):
                if enum == 2 and ewt == 2:
                    names += [v.decode() for n, w, v, _ in _fields(meta) if n == 2 and w == 2]
    return sorted(names)


def _xprof_version(xprof_python: str) -> str:
    return subprocess.run(
        [xprof_python, "-c", "from xprof import version; print(version.__version__)"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()


def _run_xprof(args, logdir: pathlib.Path, raw_out: pathlib.Path, read_only: bool) -> list:
    inside = [
        sys.executable, str(pathlib.Path(__file__).resolve()),
        "--inside-out", str(raw_out), "--logdir", str(logdir),
        "--xprof-python", args.xprof_python, "--port", str(args.port),
    ]
    if read_only:
        inside.append("--read-only")
    unshare = ["unshare", "-n"] + (["-m", "--propagation", "private"] if read_only else [])
    subprocess.run(unshare + inside, check=True)
    return json.loads(raw_out.read_text())


def _entries(raw: list, sub) -> dict:
    entries: dict = {}
    for target, r in raw:
        entry: dict = {"status": r["status"]}
        if r["status"] is None:
            entry["error"] = r["error"]
        else:
            entry["content_type"] = r["content_type"]
            entry["content_encoding"] = r["content_encoding"]
            body = base64.b64decode(r["body_bytes"])
            if (r["content_type"] or "").startswith("text/html"):
                entry["body_length"] = len(body)
                entry["body_sha256"] = hashlib.sha256(body).hexdigest()
            else:
                text = sub(body.decode("utf-8"))
                entry["body"] = text
                if r["content_type"] == "application/json":
                    entry["json"] = json.loads(text)
        key = sub(target)
        if key in entries:
            raise SystemExit(f"duplicate request {key}")
        entries[key] = entry
    return entries


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--xplane", help="xplane.pb written as every host's profile")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--xprof-python", default=DEFAULT_XPROF_PYTHON)
    ap.add_argument("--jax-python", default=DEFAULT_JAX_PYTHON)
    ap.add_argument("--port", type=int, default=18791)
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    # Internal: the part that runs inside the namespaces.
    ap.add_argument("--inside-out", help=argparse.SUPPRESS)
    ap.add_argument("--logdir", help=argparse.SUPPRESS)
    ap.add_argument("--read-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if not args.xprof_python:
        ap.error("give --xprof-python or set XPROF_PYTHON (a venv with xprof==2.24.2)")
    if args.inside_out:
        return _inside(args)

    for tool in ("unshare", "ip", "mount"):
        if shutil.which(tool) is None:
            raise SystemExit(f"'{tool}' is needed (apt-get install -y util-linux iproute2 mount)")
    version = _xprof_version(args.xprof_python)
    if version != "2.24.2":
        print(f"warning: recording from xprof {version}, not 2.24.2", file=sys.stderr)

    from profscope.testing.xprof_layout import BASE_MTIME, build_xprof_layout

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="xprof_golden_"))
    try:
        xplane, xplane_source = _resolve_xplane(args, tmp)
        xplane_bytes = xplane.read_bytes()
        # Two identical builds: one XProf may write into, one it may not.
        logdir = tmp / "logdir"
        ro_logdir = tmp / "ro" / "logdir"
        build_xprof_layout(logdir, xplane_bytes)
        build_xprof_layout(ro_logdir, xplane_bytes)
        before = _snapshot(logdir)
        raw = _run_xprof(args, logdir, tmp / "responses.json", read_only=False)
        after = _snapshot(logdir)
        raw_ro = _run_xprof(args, ro_logdir, tmp / "responses_ro.json", read_only=True)

        def sub(s: str) -> str:
            return s.replace(str(ro_logdir), LOGDIR_TOKEN).replace(str(logdir), LOGDIR_TOKEN)

        golden: dict = {
            "_meta": {
                "recorded_with": f"xprof {version} (python -m xprof.server --logdir {LOGDIR_TOKEN})",
                "script": "scripts/record_xprof_golden.py",
                "layout": "src/profscope/testing/xprof_layout.py:build_xprof_layout",
                "layout_base_mtime": BASE_MTIME,
                "xplane_source": xplane_source,
                "xplane_path": (
                    "(temporary)" if xplane.is_relative_to(tmp)
                    else str(xplane.relative_to(REPO)) if xplane.is_relative_to(REPO)
                    else str(xplane)
                ),
                "xplane_sha256": hashlib.sha256(xplane_bytes).hexdigest(),
                "xplane_size": len(xplane_bytes),
                "xplane_metadata_modules": _modules_in_xplane(xplane_bytes),
                "note": (
                    "Keys other than _meta are request targets in request order. "
                    f"{LOGDIR_TOKEN} stands for the log directory's absolute path. "
                    "body is the decoded (gunzipped) body text; json its parse for "
                    "application/json; status null means XProf sent no response "
                    "(an uncaught exception: the connection is closed)."
                ),
                "files_written_by_xprof": {
                    k: v for k, v in after.items() if k not in before
                },
                "files_removed_by_xprof": sorted(k for k in before if k not in after),
                "read_only_logdir": {
                    "note": (
                        "The same layout, served from a read-only bind mount: "
                        "XProf cannot write its HLO / tools caches there. Not "
                        "behaviour to copy; recorded to document it."
                    ),
                    "responses": _entries(raw_ro, sub),
                },
            }
        }
        golden.update(_entries(raw, sub))
        out = pathlib.Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {out} ({len(golden) - 1} responses) from {xplane_source}")
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
