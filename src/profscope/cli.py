"""The ``profscope`` command. Its default command serves: ``profscope LOGDIR``."""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
from pathlib import Path

from profscope import __version__
from profscope.errors import BadRequest, ProfscopeError

DEFAULT_PORT = 8791
COMMANDS = ("serve", "runs", "query", "report", "capture", "steps", "ops", "analyze", "diff", "mcp")

DESCRIPTION = """\
profscope: a self-hosted profile viewer for ML workloads (XProf-compatible).

Point it at a log directory -- a local folder or a gs://, s3:// or az:// bucket -- holding JAX/TF
profiles (plugins/profile/<session>/<host>.xplane.pb), XLA dumps (*.hlo.pb,
*-buffer-assignment.txt), PyTorch memory snapshots (*.pickle) or Chrome traces
(*.trace.json[.gz], or any *.json[.gz] that starts like one), and open the printed URL
in a browser.

examples:
  profscope ~/logs                      serve a folder at http://127.0.0.1:8791/
  profscope serve gs://bucket/logs      serve a bucket (uses your gcloud credentials)
  profscope serve s3://bucket/logs      S3 (pip install 'profscope[s3]'; AWS_* or ~/.aws)
  profscope serve az://container/logs   Azure Blob (pip install 'profscope[azure]'; docs/logdirs.md)
  profscope serve --demo --open         serve the bundled demo and open a browser
  profscope runs ~/logs                 list the runs found, without serving
  profscope query ~/logs --run RUN --tool memory_viewer -p module_name='jit_step(3)'
                                        a tool's JSON, as the data API answers it
  profscope capture localhost:9999 --duration 2s
                                        record a running job (jax.profiler.start_server(9999))
  profscope report ~/logs/run --device-memory 80GiB -o report.html
                                        OOM risk as one offline HTML file (or --format json|markdown)
  profscope steps ~/logs --run RUN     step-time breakdown per step and device (ops: the ops ranked)
  profscope mcp ~/logs                  an MCP server over stdio: runs, summary, steps & ops, memory at
                                        peak and the OOM verdict as tools for a coding agent
  profscope analyze ~/logs --run RUN --fail-on P1
                                        what is wrong and what to do: status, findings P0-P2 (md, json or html)
"""


def demo_logdir() -> Path:
    from importlib import resources

    return Path(str(resources.files("profscope") / "demo" / "logdir"))


CAPTURE_MAX_HELP = ("the largest answer one profiler server may send a capture (one host's XSpace): 512MiB, 2GB; "
                    "a bigger one is refused, nothing of it kept (default 1GiB, at most just under 2 GiB)")
CACHE_SIZE_HELP = ("most the cache may hold: 20GiB, 500MB, 10%% (of its disk); least recently used results are "
                   "deleted beyond it (default $PROFSCOPE_CACHE_SIZE, else 10%% of its disk, 1 to 50 GiB)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="profscope", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"profscope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_serve(sub)
    _add_runs(sub)
    _add_query(sub)
    _add_report(sub)
    _add_steps_ops(sub)
    _add_analyze(sub)
    _add_diff(sub)
    _add_capture(sub)
    _add_mcp(sub)
    return parser


def _add_serve(sub) -> None:
    serve = sub.add_parser("serve", help="serve a log directory in the browser (the default command)")
    serve.add_argument("logdir", nargs="?", help="local folder, gs://, s3://bucket/prefix, az://container/prefix (abfs://) or memory://path")
    serve.add_argument("--demo", action="store_true", help="serve the demo log directory bundled with profscope")
    serve.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: this machine only)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    serve.add_argument("--cache-dir", help="where converted results are kept (default ~/.cache/profscope)")
    serve.add_argument("--cache-size", metavar="SIZE", help=CACHE_SIZE_HELP)
    serve.add_argument("--open", action="store_true", help="open the page in a web browser")
    serve.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                       help="also answer requests for this Host name (a reverse proxy's name; *.example.com "
                            "for every name under it; repeatable). Other names are refused (DNS rebinding)")
    serve.add_argument("--token", default=os.environ.get("PROFSCOPE_TOKEN") or None, metavar="VALUE",
                       help="the token a browser must bring (default: a random one when bound beyond loopback, "
                            "none on loopback; $PROFSCOPE_TOKEN keeps it out of the process list)")
    serve.add_argument("--no-token", action="store_true",
                       help="ask no token even when bound beyond loopback (anyone who can reach the port reads the profiles)")
    serve.add_argument("--capture-dir", metavar="DIR",
                       help="where profiles captured from running jobs are written, listed as captures/ "
                            "(default: captures/ in the cache folder; never the log directory)")
    serve.add_argument("--capture-allow", action="append", default=[], metavar="PATTERN",
                       help="also let the page capture from profiler addresses matching this pattern, repeatable: "
                            "an address pattern (10.0.*, 10.0.0.0/16, fd00::*) matches addresses, and a name only "
                            "when every address it resolves to does; a name pattern (*.internal, host:9999) matches "
                            "names only (docs/capture.md); by default only loopback ones")
    serve.add_argument("--no-capture", action="store_true", help="turn the Capture profile dialog and API off")
    serve.add_argument("--no-prefetch", action="store_true",
                       help="do not make in the background, once a timeline answers, what its next requests read: "
                            "a profile's steps (Steps & ops then reads them when first opened; docs/steps_and_ops.md) "
                            "and a big trace's deeper XProf zoom levels (docs/trace_viewer.md)")
    serve.add_argument("--source-root", action="append", default=[], metavar="DIR",
                       help="a folder the program's source files are read from (read-only, repeatable; also "
                            "$PROFSCOPE_SOURCE_ROOTS, separated by the path separator): the memory viewer shows the "
                            "lines an HLO instruction names when the file is under it or under the log directory "
                            "(docs/links.md)")
    serve.add_argument("--capture-max-bytes", metavar="SIZE", help=CAPTURE_MAX_HELP)
    # Not --workers, which issue 18 proposed: that already sets the forked pool's concurrency.
    serve.add_argument("--dask", nargs="?", const="env", metavar="ADDRESS",
                       help="build trace indexes (and the all-hosts views' per-host work) on an existing Dask cluster: its scheduler's address "
                            "(no ADDRESS: $DASK_SCHEDULER_ADDRESS); docs/scale_out.md")
    serve.add_argument("--dask-workers", type=int, metavar="N",
                       help="build trace indexes (and the all-hosts views' per-host work) on a local Dask cluster "
                            "of N worker processes (docs/scale_out.md)")
    serve.add_argument("--shared-cache", metavar="URL", default=os.environ.get("PROFSCOPE_SHARED_CACHE") or None,
                       help="a gs://bucket/prefix (or a shared folder) that several profscope servers and their "
                            "Dask workers share: each conversion is made once and copied to every server's "
                            "--cache-dir (env PROFSCOPE_SHARED_CACHE; docs/scale_out.md)")
    _worker_options(serve)


def _add_runs(sub) -> None:
    runs = sub.add_parser("runs", help="list the runs of a log directory and exit")
    _logdir_args(runs)
    runs.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _worker_options(runs)


def _add_query(sub) -> None:
    query = sub.add_parser(
        "query", help="print a tool's data for a run (the JSON of /data/plugin/profile/data) and exit",
        description="Every tool's answer, without a server: the same JSON as GET /data/plugin/profile/data?run=RUN"
                    "&tag=TOOL&NAME=VALUE..., its parameters (-p NAME=VALUE) checked the same way. Without "
                    "--tool: the run's tools and the parameters each takes. Exit status 0, or 2 on bad input.")
    _logdir_args(query, run=True)
    query.add_argument("--tool", metavar="TAG", help="the tool (XProf's tag: memory_viewer, trace_viewer@, ...)")
    query.add_argument("-p", "--param", dest="params", action="append", default=[], metavar="NAME=VALUE",
                       help="one of the tool's parameters, by XProf's name (repeatable)")
    query.add_argument("-o", "--output", metavar="FILE", help="write here instead of standard output")
    _worker_options(query)


def _add_report(sub) -> None:
    report = sub.add_parser(
        "report", help="write the OOM-risk report of a run (HTML, JSON or Markdown) and exit",
        description="OOM risk: peak vs capacity, contributors, findings (docs/oom_risk.md). Exit status: "
                    "0, or 1 when a run's risk is at or above --fail-on, 2 on bad input or when no run could be read. "
                    "A file that is refused (an unsafe pickle, a corrupt profile) is listed in the report; the other runs are still assessed.")
    report.add_argument("logdir", nargs="?", metavar="LOGDIR_OR_FILE",
                        help="log directory, or one file of a run (*.xplane.pb, *.hlo.pb, *.pickle)")
    report.add_argument("--demo", action="store_true", help="use the bundled demo log directory")
    report.add_argument("--run", help="the run to report (default: every run the OOM risk can assess)")
    report.add_argument("--host", help="host, or device of a snapshot (cuda:N)")
    report.add_argument("--module", help="HLO module to assess (default: the worst step module, i.e. the highest compiled peak "
                        "among modules named as a training or inference step; every module over capacity is named either way; "
                        "docs/oom_risk.md, The rated module)")
    report.add_argument("--device-memory", metavar="SIZE_OR_NAME", help="capacity: 80GiB, 40GB, 17179869184, or a device name (H100, A100-40GB, TPU v5e)")
    report.add_argument("--capacity-bytes", metavar="N", help="capacity in bytes (wins over --device-memory)")
    report.add_argument("--batch", metavar="N", help="predict the peak at this batch (or sequence) size, from the run's "
                        "compilations of the same program at other sizes (docs/oom_risk.md, What would make it fit)")
    report.add_argument("--shards", metavar="N", help="devices the planner's sharding change spreads parameters and "
                        "optimizer state over (default 8)")
    report.add_argument("--fit-with", metavar="RUN[,RUN]", help="other runs (profiles or XLA dumps of the same program "
                        "at other sizes) whose compilations the batch fit may use")
    report.add_argument("--jax-gpu", action="store_true", help="the run was JAX on a GPU: the capacity is the share JAX "
                        "preallocates (XLA_PYTHON_CLIENT_MEM_FRACTION, default 0.75) of the device's memory, --device-memory included")
    report.add_argument("--jax-mem-fraction", metavar="F", type=float, help="the run's XLA_PYTHON_CLIENT_MEM_FRACTION "
                        "(0 < F <= 1; implies --jax-gpu)")
    report.add_argument("--format", choices=("html", "json", "markdown"), default="html", help="output format (default html)")
    report.add_argument("-o", "--output", metavar="FILE", help="write here instead of standard output")
    report.add_argument("--server", metavar="URL", help="URL of a running `profscope serve` of the same log directory "
                        "(http://127.0.0.1:8791/): the report's evidence links open there")
    report.add_argument("--fail-on", type=str.upper, choices=("LOW", "MEDIUM", "HIGH", "OOM"),
                        help="exit 1 when a run's risk is at or above this tier")
    report.add_argument("--cache-dir", help="where converted results are kept (default ~/.cache/profscope)")
    report.add_argument("--cache-size", metavar="SIZE", help=CACHE_SIZE_HELP)
    _worker_options(report)


def _logdir_args(p: argparse.ArgumentParser, run: bool = False) -> None:
    """The arguments of every command that reads a log directory (and one run of it)."""
    p.add_argument("logdir", nargs="?", help="local folder, gs://, s3://bucket/prefix, az://container/prefix (abfs://) or memory://path")
    p.add_argument("--demo", action="store_true", help="use the bundled demo log directory")
    if run:
        p.add_argument("--run", required=True, help="the run (as `profscope runs` names it)")
    p.add_argument("--cache-dir", help="where converted results are kept (default ~/.cache/profscope)")
    p.add_argument("--cache-size", metavar="SIZE", help=CACHE_SIZE_HELP)


def _add_steps_ops(sub) -> None:
    """``steps`` and ``ops``: two views of one answer (GET /api/steps_ops), one set of arguments."""
    commands = {
        "steps": ("print a profile's step-time breakdown and its ops ranked, and exit",
                  "Per step and device: step time, device time by category, device idle and what bounds the step "
                  "(PyTorch ProfilerStep#N, XProf's steps of an xplane); then the kernels (PyTorch) or ops, most "
                  "time first.", "kernels or ops (and, in Markdown, the slowest steps)"),
        "ops": ("print a profile's device ops ranked by time, and exit",
                "One row per HLO op, device kernel and framework op, most device time first: occurrences, total, "
                "self and average time, share, category, module, FLOPs and bytes where the profile has them.",
                "ops"),
    }
    for name, (help_, description, listed) in commands.items():
        p = sub.add_parser(name, help=help_, description=f"{description} The JSON of GET /api/steps_ops "
                                                          "(docs/steps_and_ops.md). Exit status 0, or 2 on bad input.")
        _logdir_args(p, run=True)
        p.add_argument("--host", help="the host (xplane) or trace file (PyTorch) of the run to read (default: the first)")
        p.add_argument("--top", type=int, default=20, metavar="N", help=f"{listed} to list (default 20; 0: all)")
        p.add_argument("--format", choices=("markdown", "json"), default="markdown", help="output format (default markdown)")
        p.add_argument("-o", "--output", metavar="FILE", help="write here instead of standard output")
        _worker_options(p)


def _add_analyze(sub) -> None:
    p = sub.add_parser(
        "analyze", help="say what is wrong with a run and what to do (status, findings P0-P2) and exit",
        description="The Summary of one run (GET /data/plugin/profile/data?tag=summary, docs/analysis.md): OPTIMAL, "
                    "NEEDS_ATTENTION or NOT_ASSESSED (nothing could be read: exit 2), the key metrics and the "
                    "findings P0 to P2, each with what is happening, its evidence, impact and fix. A part that cannot be read is listed as refused, never fatal. "
                    "Exit status 0; 1 when a finding at or above --fail-on exists; 2 on bad input.")
    p.add_argument("logdir", nargs="?", metavar="LOGDIR_OR_RUN",
                   help="a log directory, or one run in it: a trace, a snapshot, an .xplane.pb or a plugins/profile/<session> folder")
    p.add_argument("--demo", action="store_true", help="use the bundled demo log directory")
    p.add_argument("--run", help="the run (as `profscope runs` names it); needed when LOGDIR holds several")
    p.add_argument("--host", help="a host (or a snapshot's device), or ALL_HOSTS for one summary of every host "
                                  "(the default of a multi-host profile)")
    p.add_argument("--format", choices=("md", "markdown", "json", "html"), default="md",
                   help="md (default), json (the data API's JSON, byte for byte) or html (one offline file, with "
                        "profscope report's memory section)")
    p.add_argument("--device-memory", metavar="SIZE_OR_NAME", help="the memory rules' capacity: 80GiB, 40GB, or a device "
                   "name (H100, A100-40GB, TPU v5e), for runs that do not name their own (snapshots)")
    p.add_argument("--capacity-bytes", metavar="N", help="capacity in bytes (wins over --device-memory)")
    p.add_argument("--fail-on", type=str.upper, choices=SUMMARY_PRIORITIES[:2],
                   help="exit 1 when a finding at or above this priority exists (P0, or P0 and P1)")
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of standard output")
    p.add_argument("--server", metavar="URL", help="URL of a running `profscope serve` of the same log directory "
                   "(http://127.0.0.1:8791/): the evidence links open there")
    _cache_options(p)


def _cache_options(p: argparse.ArgumentParser) -> None:
    """The cache and conversion workers of a command that converts and exits."""
    p.add_argument("--cache-dir", help="where converted results are kept (default ~/.cache/profscope)")
    p.add_argument("--cache-size", metavar="SIZE", help=CACHE_SIZE_HELP)
    _worker_options(p)


COMPARED_TOOLS = ("summary", "steps_ops", "memory_viewer", "memory_profile", "oom_risk")  # docs/compare.md


def _add_diff(sub) -> None:
    p = sub.add_parser(
        "diff", help="what changed from run A to run B (step time, memory) and exit",
        description="The compare of one tool (GET /data/plugin/profile/data?tag=TOOL&run=B&base=A, docs/compare.md): "
                    "the total then -> now and what it is made of, largest change first. A and B are runs of "
                    "--logdir (as `profscope runs` names them), or paths: traces, snapshots, .xplane.pb files or "
                    "plugins/profile/<session> folders (their common folder is then the log directory). Exit status 0; "
                    "1 when the total grew by more than --fail-on-growth; 2 on bad input or inputs that cannot be compared.")
    p.add_argument("base", metavar="A", help="the base: a run name or a path")
    p.add_argument("current", metavar="B", help="the run compared with it: a run name or a path")
    p.add_argument("--logdir", help="the log directory A and B are runs of (default: the folder holding both paths)")
    p.add_argument("--demo", action="store_true", help="use the bundled demo log directory")
    p.add_argument("--tool", choices=COMPARED_TOOLS, default="summary",
                   help="what to compare (default summary: the median step by category, status and findings; "
                        "oom_risk, memory_profile or memory_viewer for memory, steps_ops for the ops)")
    p.add_argument("--host", help="B's host (default: the tool's)")
    p.add_argument("--base-host", help="A's host (default: B's host when A has it, else the tool's)")
    p.add_argument("--module", help="B's module (memory_viewer, oom_risk)")
    p.add_argument("--base-module", help="A's module (default: B's by name)")
    p.add_argument("--format", choices=("md", "markdown", "json", "html"), default="md",
                   help="md (default), json (the data API's diff JSON) or html (one offline file)")
    p.add_argument("--fail-on-growth", metavar="PCT", type=_growth_threshold,
                   help="exit 1 when the total grew by more than this share of A's: 5%%, 0.05")
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of standard output")
    _cache_options(p)


def _growth_threshold(text: str) -> float:
    """``5%`` or ``0.05``: a share of the base, not negative."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a share such as 5% or 0.05, not {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"a share of 0 or more, not {text!r}")
    return value


def _add_capture(sub) -> None:
    capture = sub.add_parser(
        "capture", help="record a profile from running jobs' profiler servers and exit",
        description="Record HOST:PORT[,HOST:PORT...] (jax.profiler.start_server(PORT) in the job) for --duration, "
                    "all hosts at once, and write plugins/profile/<session>/<host>_<port>.xplane.pb into --dir. "
                    "Exit status 0: every host saved; 1: some hosts failed; 2: nothing saved or bad input. "
                    "docs/capture.md says more.")
    capture.add_argument("targets", metavar="HOST:PORT[,HOST:PORT...]", nargs="?", default="",
                         help="the profiler servers to record; ranges such as worker-{0..7}:9999 or "
                              "localhost:{9000..9007}, and dns:///NAME:PORT for every address a name resolves to")
    capture.add_argument("--targets-file", metavar="FILE", action="append", default=[],
                         help="read more targets from FILE: one HOST:PORT (or range, or dns:///NAME:PORT) a line, "
                              "# for comments (repeatable)")
    capture.add_argument("--duration", default="2s", help="how long to record: 2s, 1500ms, 1m, at most 1h (default 2s)")
    capture.add_argument("--delay", default="0", help="wait this long before recording (default 0)")
    capture.add_argument("--dir", metavar="DIR", help="folder to write into (default: captures/ in the cache folder, "
                         "which `profscope serve` lists)")
    capture.add_argument("--cache-dir", help="the cache folder whose captures/ is the default --dir")
    capture.add_argument("--host-tracer-level", type=int, default=2, choices=range(4),
                         help="0 off, 1 user annotations only, 2 (default) + runtime, 3 verbose")
    capture.add_argument("--device-tracer-level", type=int, default=1, choices=range(2), help="0 off, 1 on (default)")
    capture.add_argument("--python-tracer-level", type=int, default=0, choices=range(2),
                         help="1: record every Python call (expensive); default 0")
    capture.add_argument("--num-retry", type=int, default=0, help="retries per host when it is busy or unreachable")
    capture.add_argument("--snapshots", type=int, metavar="N",
                         help="continuous mode: profile continuously and save N snapshots, one every --every")
    capture.add_argument("--every", default="10s", help="time between continuous snapshots (default 10s)")
    capture.add_argument("--last", metavar="WINDOW",
                         help="keep the last WINDOW (e.g. 5s) of the targets in profscope, recorded in back-to-back "
                              "pieces: Enter or SIGUSR1 saves them as a run, Ctrl+C saves them once more and exits "
                              "(with --when: each fire saves them)")
    capture.add_argument("--last-bytes", metavar="SIZE",
                         help="with --last: keep at most SIZE of recordings, all hosts together (default 2GiB; "
                              "the oldest dropped first)")
    capture.add_argument("--piece", default="1s",
                         help="with --last: the length of each recording (default 1s; the job loses ~30-100 ms "
                              "between two, docs/capture.md)")
    capture.add_argument("--when", metavar="CONDITION",
                         help="automatic capture: probe the targets every --probe-every and capture them (for "
                              "--duration) when CONDITION holds, until Ctrl+C: step_time>2x[,for=3] (k x the running "
                              "median), step_time>250ms, memory>0.9 (of capacity), memory>12GiB, step_time_trend, "
                              "memory_growth; join clauses with 'or' (docs/capture.md, Automatic capture)")
    capture.add_argument("--probe-every", default="10s", help="with --when: time between probes (default 10s)")
    capture.add_argument("--probe-duration", default="1s", help="with --when: each probe's recording (default 1s)")
    capture.add_argument("--max-fires", type=int, default=0, metavar="N",
                         help="with --when: stop after N captures (default 0: until Ctrl+C)")
    capture.add_argument("--capture-max-bytes", metavar="SIZE", help=CAPTURE_MAX_HELP)


def _add_mcp(sub) -> None:
    p = sub.add_parser(
        "mcp", help="answer a coding agent's questions about a log directory over MCP (stdio)",
        description="An MCP server on stdin/stdout (the `mcp` SDK: pip install 'profscope[mcp]'), whose tools "
                    "are list_runs, run_summary, steps_and_ops, memory_at_peak, oom_verdict, get_hlo_text, "
                    "get_hlo_neighborhood and get_source (docs/analysis.md, MCP). Logs go to stderr. Exit status 0 "
                    "when the client closes, 2 on bad input or without the extra.")
    _logdir_args(p)
    _worker_options(p)
    p.add_argument("--source-root", action="append", default=[], metavar="DIR",
                   help="a folder get_source reads the program's source files from (read-only, repeatable; "
                        "besides the log directory; docs/links.md)")


def _worker_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--worker-memory", metavar="SIZE",
                   help="memory one conversion may use, in its own process (default: half the machine's memory, "
                        "at least 2GiB; env PROFSCOPE_WORKER_MEMORY)")
    p.add_argument("--workers", type=int, metavar="N",
                   help="conversions run at once (default: half the cores, at least 2; 0 converts in the server "
                        "process itself, without limits)")


def _normalise_argv(argv: list[str]) -> list[str]:
    """``profscope LOGDIR ...`` means ``profscope serve LOGDIR ...``."""
    if not argv or argv[0] in COMMANDS or argv[0] in ("-h", "--help", "--version"):
        return argv if argv else ["serve"]
    return ["serve", *argv]


def _logdir(args):
    """The log directory the arguments name, checked (it exists, it can be listed)."""
    from profscope.storage import LogDir

    if args.demo and args.logdir:
        raise ProfscopeError("give either a log directory or --demo, not both")
    url = str(demo_logdir()) if args.demo else args.logdir
    if not url:
        raise ProfscopeError("no log directory given: profscope LOGDIR, or profscope serve --demo")
    logdir = LogDir(url)
    logdir.check()
    return logdir


def _workspace(args, logdir=None):
    from profscope.cache.store import DiskCache, default_cache_dir
    from profscope.cache.worker import WorkerPool, parse_size
    from profscope.app.workspace import Workspace

    if logdir is None:
        logdir = _logdir(args)
    workers = WorkerPool(memory_limit=parse_size(args.worker_memory, "--worker-memory"),
                         concurrency=args.workers or None, enabled=None if args.workers != 0 else False)
    cache = DiskCache(args.cache_dir or default_cache_dir(), workers=workers, limit=args.cache_size,
                      shared=_shared_record(getattr(args, "shared_cache", None)))
    capture = {}
    if getattr(args, "command", None) == "serve":
        off = _capture_off(args)
        capture = {"capture_off": off} if off else {
            "capture_dir": _capture_root(args), "capture_allow": args.capture_allow,
            "capture_max_bytes": parse_size(args.capture_max_bytes, "--capture-max-bytes")}
    ws = Workspace(logdir, cache, **capture)
    ws.prefetch = getattr(args, "command", None) == "serve" and not args.no_prefetch
    env_roots = [r for r in os.environ.get("PROFSCOPE_SOURCE_ROOTS", "").split(os.pathsep) if r]
    ws.set_source_roots([*getattr(args, "source_root", []), *env_roots])
    return ws


def _capture_root(args) -> Path | None:
    """The capture folder of ``serve``, resolved (as CaptureDir resolves it); None when it
    does not capture. Named before the cache is opened: the quick start lists its runs."""
    from profscope.cache.paths import default_cache_dir

    if _capture_off(args):
        return None
    # DiskCache's own root: the folder given or the default, resolved
    cache_root = Path(args.cache_dir or default_cache_dir()).expanduser().resolve()
    return Path(args.capture_dir or default_capture_dir(cache_root)).expanduser().resolve()


def _capture_off(args) -> str | None:
    """Why ``serve`` does not capture, naming the flag that turns capturing on; None when it does."""
    from profscope.server.guard import is_loopback

    if args.no_capture:
        return "it was started with --no-capture; start it without --no-capture to capture from running jobs"
    if not getattr(args, "capture_unsafe", False):
        return None
    if not is_loopback(args.host):
        return (f"it listens on {args.host} and asks no token (--no-token), so anyone who reaches it could make it "
                "dial addresses of their choosing; start it without --no-token (it then makes a token) or with "
                "--token VALUE to capture from running jobs")
    return ("it answers requests for any Host name (--allow-host '*') and asks no token, so any web page could make "
            "it dial addresses of its choosing; start it with --token VALUE (or without --allow-host '*') to capture "
            "from running jobs")


def _shared_record(url: str | None):
    """The shared record --shared-cache names (cache/shared.py), else None."""
    if not url:
        return None
    from profscope.cache.shared import RECORD_VERSION, SharedRecord
    from profscope.storage.object_store import ObjectStore

    store = ObjectStore(url)
    try:
        # Fail at start, naming the URL, rather than on the first conversion.
        store.read(f"v{RECORD_VERSION}/.probe")
    except Exception as e:  # noqa: BLE001 - any backend error is the user's to see
        raise ProfscopeError(f"cannot read the shared cache {url}: {type(e).__name__}: {e}") from e
    return SharedRecord(store)


def _scale_out(args):
    """The Dask conversions --dask / --dask-workers ask for (app/scale_out.py), else None."""
    if args.dask is None and args.dask_workers is None:
        return None
    if args.dask is not None and args.dask_workers is not None:
        raise ProfscopeError("give either --dask ADDRESS or --dask-workers N, not both")
    if args.dask_workers is not None and args.dask_workers < 1:
        raise ProfscopeError("--dask-workers must be at least 1")
    address = os.environ.get("DASK_SCHEDULER_ADDRESS") if args.dask == "env" else args.dask
    if args.dask is not None and not address:
        raise ProfscopeError("--dask without an address needs $DASK_SCHEDULER_ADDRESS")
    from profscope.app.scale_out import DaskConversions

    try:
        return DaskConversions(address, n_workers=args.dask_workers)
    except ImportError as e:
        raise ProfscopeError(f"--dask needs Dask: pip install 'profscope[dask]' ({e})") from e
    except OSError as e:  # distributed raises OSError when no scheduler answers at the address
        raise ProfscopeError(f"cannot reach the Dask scheduler at {address}: {e}") from e


def default_capture_dir(cache_root) -> Path:
    # Beside the cache's entries, never among them: eviction reads only its two-letter shards.
    return Path(cache_root) / "captures"


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        hint = " (is another profscope running? try --port 0)" if port else ""
        raise ProfscopeError(f"cannot listen on {host}:{port}: {e.strerror}{hint}") from e
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _serve_token(args) -> str | None:
    """The token asked for: --token, else a random one when bound beyond loopback (a
    colleague's browser, or any page after a DNS rebinding, must not read the profiles),
    none on loopback, where the Host check is enough; --no-token turns it off."""
    from profscope.server.guard import is_loopback, new_token

    if args.no_token and args.token:
        raise ProfscopeError("give either --token or --no-token, not both")
    if args.no_token:
        return None
    if args.token is not None:
        # It goes into a URL and a cookie unquoted: characters that need no escaping in either.
        if len(args.token) < 8 or not re.fullmatch(r"[A-Za-z0-9._~-]+", args.token):
            raise ProfscopeError("--token must be at least 8 characters of A-Z, a-z, 0-9, '.', '_', '~', '-'")
        return args.token
    return None if is_loopback(args.host) else new_token()


def cmd_serve(args) -> int:
    # FastAPI and uvicorn are imported below, after the quick start answers the page and
    # the run lists on the bound socket (server/quick_start.py): they are most of the start.
    from profscope.server.guard import Security, is_loopback

    token = _serve_token(args)
    # Capturing makes the server dial addresses a request names: never without the
    # token where anyone else can send requests (beyond loopback, or every Host accepted).
    args.capture_unsafe = token is None and (not is_loopback(args.host) or "*" in args.allow_host)
    logdir = _logdir(args)
    sock = _bind(args.host, args.port)
    port = sock.getsockname()[1]
    security = Security.for_bind(args.host, port, allow_hosts=args.allow_host, token=token)
    quick = _quick_start(args, logdir, sock, security)
    quick.warm.wait(2.0)
    try:
        return _serve_on(args, _workspace(args, logdir), sock, security, quick, token)
    finally:
        quick.stop()


def _quick_start(args, logdir, sock, security):
    """The first answers on ``sock`` (server/quick_start.py), over the runs as the
    workspace will list them: its capture folder mounted (app/run_list.py)."""
    from profscope.app.run_list import served_logdir
    from profscope.server.quick_start import QuickStart
    from profscope.storage import LogDir

    captures = _capture_root(args)
    served, _ = served_logdir(logdir, None if captures is None else LogDir(str(captures)))
    return QuickStart(sock, served, security).start()


def _serve_on(args, ws, sock, security, quick, token) -> int:
    import uvicorn

    from profscope.cache.progress_printer import ProgressPrinter
    from profscope.server import Server, create_app
    from profscope.server.guard import H11_MAX_HEAD_BYTES, WILDCARD_BINDS, is_loopback

    ws.scale_out = _scale_out(args)  # after the bind: a busy port starts no cluster
    port = sock.getsockname()[1]
    query = f"?token={token}" if token else ""

    def url_of(host: str) -> str:
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/{query}"

    # A wildcard bind is no address to browse to (Chrome refuses 0.0.0.0): print the one
    # that works from this machine, then the one for others.
    url = url_of({"0.0.0.0": "127.0.0.1", "::": "::1"}.get(args.host, args.host))
    runs = ws.runs()
    print(f"profscope {__version__}: {len(runs)} run(s) in {ws.logdir.url}", flush=True)
    print(f"cache: {ws.cache.root} ({ws.cache.describe()})", flush=True)
    if ws.scale_out is not None:
        print(f"conversions: trace indexes and the all-hosts views' per-host work on the {ws.scale_out.describe()}; "
              f"the rest: {ws.cache.workers.describe()}",
              flush=True)
        # a line per host as the cluster finishes it (its workers' progress events)
        ws.scale_out.print_hosts()
    else:
        print(f"conversions: {ws.cache.workers.describe()}", flush=True)
        if os.environ.get("DASK_SCHEDULER_ADDRESS"):
            print("DASK_SCHEDULER_ADDRESS is set but not used: give --dask to build trace indexes on that cluster",
                  flush=True)
    if ws.capture is not None:
        print(f"captures: {ws.capture.folder.root} (from {ws.capture.policy.describe()} profiler addresses)", flush=True)
    elif args.capture_unsafe and not args.no_capture:
        print(f"capturing is off: {ws.capture_off}", flush=True)
    if not is_loopback(args.host):
        if token:
            print(f"listening on {args.host}: only a browser that brings the token (in the URL below) gets in", flush=True)
        else:
            print(f"warning: listening on {args.host} with no token (--no-token): anyone who can reach it "
                  "can read these profiles", flush=True)
    elif token is None and "*" in args.allow_host:
        print("warning: --allow-host '*' with no token: a DNS-rebinding page can read these profiles", flush=True)
    print(f"serving at {url}  (Ctrl+C to stop)", flush=True)
    if args.host in WILDCARD_BINDS:
        print(f"  from other machines: {url_of(socket.gethostname())}", flush=True)
    if args.open:
        import webbrowser

        webbrowser.open(url)
    printer = ProgressPrinter(ws.cache.progress).start()
    # h11 refuses a request head over 16 KiB with a plain-text 400; the guard's limits
    # (414 in the one JSON error shape) come first up to H11_MAX_HEAD_BYTES.
    config = uvicorn.Config(create_app(ws, security), log_level="warning", access_log=False,
                            h11_max_incomplete_event_size=H11_MAX_HEAD_BYTES, server_header=False,
                            # Ctrl+C / SIGTERM: requests still waiting (on a long conversion) are
                            # cut after 5 s rather than holding the server up (uvicorn waits forever).
                            timeout_graceful_shutdown=5)
    try:
        Server(config, ws, quick).run(sockets=[sock])
    finally:
        printer.stop()
        if ws.scale_out is not None:
            ws.scale_out.close()  # a local cluster's worker processes end with it
        if ws.capture is not None:
            ws.capture.close()  # a job left in continuous mode would record into its ring for ever
    return 0


def cmd_runs(args) -> int:
    from profscope.app.unsupported_files import unsupported_files

    ws = _workspace(args)
    runs = ws.runs()
    unsupported = unsupported_files(ws.logdir.listing(), runs)
    if args.json:
        rows = [
            {"name": r.name, "kind": r.kind.value, "hosts": r.hosts, "files": len(r.files), "bytes": sum(f.size for f in r.files)}
            for r in runs
        ]
        # Recognised files that are not read are rows too (kind "unsupported"), so that a
        # script reading this list as before sees them without a change of shape.
        # They come after every run, with a run row's keys, so "the first row" is still a run.
        sizes = {f.path: f.size for f in ws.logdir.listing().files.values()}
        rows += [{"name": u["file"], "kind": "unsupported", "hosts": [], "files": 1, "bytes": sizes.get(u["file"], 0),
                  "file_kind": u["kind"], "reason": u["reason"], "run": u["run"]} for u in unsupported]
        print(json.dumps(rows, indent=2))
        return 0
    if not runs:
        print(f"no runs in {ws.logdir.url}")
    else:
        width = max(len(r.name) for r in runs)
        for r in runs:
            size = sum(f.size for f in r.files)
            hosts = ",".join(r.hosts)
            print(f"{r.name:<{width}}  {r.kind.value:<14}  {len(r.files):>4} files  {size / 1e6:>9.2f} MB  {hosts}")
    if unsupported:
        print(f"\nrecognised but not read ({len(unsupported)}):")
        for u in unsupported:
            print(f"  {u['file']}  [{u['kind']}]  {u['reason']}")
    return 0


def cmd_query(args) -> int:
    """A tool's answer as the data route gives it, from the tool table (app/tool_table.py):
    its query type checks the parameters, its row says how it answers."""
    import gzip

    from fastapi.exceptions import RequestValidationError

    from profscope.app.tool_table import Answer
    from profscope.server.params import parse_query, validation_message

    params = {}
    for item in args.params:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise BadRequest(f"parameters are NAME=VALUE, not {item!r}")
        params[name] = value
    ws = _workspace(args)
    run = ws.run(args.run)
    if not args.tool:
        tools = [{"tool": t.name, "title": t.title, "params": {name: {"type": kind.__name__, **meta["bounds"]}
                                                              for name, (kind, meta) in t.query.params().items()}}
                 for t in ws.tools(run)]
        text = json.dumps({"run": run.name, "tools": tools}, indent=1)
    else:
        tool = ws.tool(args.tool, run)
        unknown = sorted(set(params) - set(tool.query.params()))
        if unknown:
            raise BadRequest(f"{tool.name} takes no parameter {', '.join(map(repr, unknown))}; "
                             f"it takes: {', '.join(tool.query.params())}")
        try:
            query = parse_query(tool.query, params)
        except RequestValidationError as e:
            raise BadRequest(validation_message(e)) from e
        if tool.answer is Answer.STREAM:
            text = b"".join(ws.tool_stream(run, tool, query)).decode()
        elif tool.asks_page(query):
            from profscope.frontend import render

            text = render.page(tool.page.template, **ws.tool_page(run, tool, query))
        else:
            text = gzip.decompress(ws.tool_data(run, tool, query)).decode()
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def _steps_ops(args) -> dict:
    """The answer of ``/api/steps_ops`` for ``--run``/``--host``, its lists cut to ``--top``."""
    from profscope.app.queries import TraceQuery

    if args.top < 0:
        raise BadRequest(f"--top must be 0 (all) or a positive number of rows, not {args.top}")
    ws = _workspace(args)
    out = ws.steps_ops(ws.run(args.run), TraceQuery(host=args.host))
    if args.top:
        out = {**out, **{k: out[k][:args.top] for k in ("kernels", "ops") if isinstance(out.get(k), list)}}
    return out


def _print(args, text: str) -> int:
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
    else:
        sys.stdout.write(text + "\n")
    return 0


def cmd_steps(args) -> int:
    """The answer of ``/api/steps_ops`` for one run, as JSON or as Markdown tables (the
    Markdown lists the ``--top`` slowest steps; the JSON every step)."""
    out = _steps_ops(args)
    return _print(args, json.dumps(out, indent=1) if args.format == "json" else _steps_markdown({**out, "top": args.top}))


def cmd_ops(args) -> int:
    """The ranked ops (``ops[]``) of ``/api/steps_ops`` for one run, as JSON or Markdown."""
    out = _steps_ops(args)
    if args.format == "json":
        keep = ("run", "host", "file", "source", "ops_scope", "ops")
        return _print(args, json.dumps({k: out[k] for k in keep if k in out}, indent=1))
    return _print(args, "\n".join([f"# Ops: {_title(out)}", "", *_ops_markdown(out)]))


def _title(out: dict) -> str:
    return f"{out['run']} ({out['file']})" if out.get("file") else f"{out['run']} (host {out.get('host')})"


def _us(value) -> str:
    return "" if value is None else f"{value:,.1f}"


def _cell(text) -> str:
    return "" if text is None else str(text).replace("|", "\\|")


def _steps_markdown(out: dict) -> str:
    """The steps, hosts and kernels or ops of :meth:`Workspace.steps_ops` as Markdown (µs);
    the step table's columns are the answer's ``categories``, whatever the source."""
    summary = out.get("summary", {})
    lines = [f"# Steps & ops: {_title(out)}", ""]
    if summary.get("median_us") is not None:
        how = f" ({summary['step_source']})" if summary.get("step_source") else ""
        lines += [f"{summary['steps']} steps{how}, median {summary['median_us']:,.1f} µs, p90 {summary['p90_us']:,.1f} µs, "
                  f"slowest step {summary['slowest_step']} ({summary['slowest_us']:,.1f} µs)", ""]
    if summary.get("missing"):
        lines += [f"Note: {summary['missing']}", ""]
    if out.get("hosts"):
        lines += ["| host | steps | median | p90 | slowest step | slowest |", "|---|---:|---:|---:|---|---:|"]
        for h in out["hosts"]:
            if h.get("status") == "error":  # an unreadable host's row: its file and why
                lines.append(f"| {_cell(h['host'])} | unreadable: {_cell(h.get('reason'))} | | | | |")
                continue
            mark = " (straggler)" if h["host"] == out.get("straggler_host") else ""
            lines.append(f"| {_cell(h['host'])}{mark} | {h.get('steps') or 0:,} | {_us(h.get('median_us'))} | "
                         f"{_us(h.get('p90_us'))} | {_cell(h.get('slowest_step'))} | {_us(h.get('slowest_us'))} |")
        lines.append("")
    cats = out.get("categories") or []
    steps = out.get("steps") or []
    top = out.get("top") or 0
    if top and len(steps) > top:
        # the slowest --top steps, in step order (a 44,000-step profile is no table to read)
        keep = set(sorted(range(len(steps)), key=lambda i: -steps[i]["step_time_us"])[:top])
        lines += [f"The {top} slowest of {len(steps):,} steps (--top 0 for all):", ""]
        out = {**out, "steps": [st for i, st in enumerate(steps) if i in keep]}
    if out.get("steps") and not any(step["devices"] for step in out["steps"]):
        # a CPU-only profile: the host's steps, no device time to break down
        lines += ["| step | start | step time |", "|---|---:|---:|"]
        lines += [f"| {_cell(step['step'])} | {_us(step.get('start_us'))} | {_us(step['step_time_us'])} |"
                  for step in out["steps"]]
        lines.append("")
    elif out.get("steps"):
        lines += ["| step | device | step time | " + " | ".join(c["label"] for c in cats) + " | idle | bound |",
                  "|---|---|---:|" + "---:|" * len(cats) + "---:|---|"]
        for step in out["steps"]:
            for dev in step["devices"]:
                times = " | ".join(_us(dev["time_us"].get(c["key"], 0.0)) for c in cats)
                lines.append(f"| {_cell(step['step'])} | {_cell(dev['device'])} | {_us(step['step_time_us'])} | {times} | "
                             f"{_us(dev.get('idle_us'))} | {_cell(dev.get('bound'))} |")
        lines.append("")
    if "kernels" not in out:
        return "\n".join(lines + _ops_markdown(out))
    lines += ["| kernel | category | occurrences | total | average | share |", "|---|---|---:|---:|---:|---:|"]
    for k in out["kernels"]:
        share = "" if k["share"] is None else f"{100 * k['share']:.2f} %"
        lines.append(f"| {_cell(k['name'])} | {k['category']} | {k['occurrences']:,} | {k['total_us']:,.1f} | "
                     f"{k['average_us']:,.3f} | {share} |")
    return "\n".join(lines)


def _ops_markdown(out: dict) -> list[str]:
    """``ops[]`` as a Markdown table (µs), most device time first, as the answer ranks it."""
    ops = out.get("ops") or []
    if not ops and out.get("hosts"):  # host=ALL_HOSTS: steps side by side, ops one host at a time
        names = [h["host"] for h in out["hosts"]]
        return [f"Ops are ranked per host: give --host, one of {', '.join(names[:8])}{' ...' if len(names) > 8 else ''}."]
    if not ops:
        return ["No device ops in this profile."]
    lines = ["| op | kind | category | module | occurrences | total | self | average | share | FLOPs | bytes | bound |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for op in ops:
        share = "" if op.get("share") is None else f"{100 * op['share']:.2f} %"
        count = lambda v: "" if v is None else f"{v:,}"  # noqa: E731
        bound = (op.get("roofline") or {}).get("bound")
        lines.append(f"| {_cell(op['name'])} | {op['kind']} | {_cell(op.get('category'))} | {_cell(op.get('module'))} | "
                     f"{op['occurrences']:,} | {_us(op['total_us'])} | {_us(op.get('self_us'))} | "
                     f"{'' if op.get('average_us') is None else format(op['average_us'], ',.3f')} | {share} | "
                     f"{count(op.get('flops'))} | {count(op.get('bytes_accessed'))} | {_cell(bound)} |")
    return lines


def _positive_int(text: str | None, name: str) -> int | None:
    if text is None or not text.strip():
        return None
    value = text.strip()
    if not (value.isascii() and value.isdigit()) or len(value) > 19 or not 0 < int(value) < 1 << 63:
        raise BadRequest(f"parameter {name!r} must be a positive integer (bytes), not {text!r}")
    return int(value)


def _mem_fraction(value: float | None) -> float | None:
    if value is not None and not 0 < value <= 1:
        raise BadRequest(f"--jax-mem-fraction must be above 0 and at most 1 (XLA_PYTHON_CLIENT_MEM_FRACTION), not {value}")
    return value


def cmd_report(args) -> int:
    import time

    from profscope.app import oom_reports
    from profscope.app.queries import OomRiskQuery
    from profscope.frontend import oom_report
    from profscope.tools import oom_risk

    start = time.perf_counter()
    # Bad parameters are reported before any file is read.
    capacity = _positive_int(args.capacity_bytes, "capacity_bytes")
    if args.server and not re.match(r"https?://[^/\s]+", args.server):
        raise BadRequest(f"--server must be an http(s) URL such as http://127.0.0.1:8791/, not {args.server!r}")
    oom_risk.requested_capacity(capacity, args.device_memory)
    query = OomRiskQuery(host=args.host, module_name=args.module, capacity_bytes=capacity,
                         device_memory=args.device_memory or None, batch=_positive_int(args.batch, "batch"),
                         shards=_positive_int(args.shards, "shards"), jax_gpu=args.jax_gpu or None,
                         jax_mem_fraction=_mem_fraction(args.jax_mem_fraction), fit_with=args.fit_with or None)
    file = None
    if args.logdir and not args.demo:
        target = Path(args.logdir)
        if not target.exists() and "://" not in args.logdir:
            raise ProfscopeError(f"{args.logdir} does not exist")
        if target.is_file():
            # A run's file: its log directory is the folder above plugins/profile/<session>
            # for a profile, else the file's own folder.
            parts = target.resolve().parts
            root = Path(*parts[: parts.index("plugins")]) if "plugins" in parts[:-2] else target.resolve().parent
            file = target.resolve().relative_to(root).as_posix()
            args.logdir = str(root)
    ws = _workspace(args)
    # One refused file (an unsafe pickle, a corrupt profile) must not hide the other runs:
    # it is listed in the report, and only a report with nothing in it is an error.
    # A run that reads but holds nothing to assess (a trace without [memory] events) is
    # listed as not assessed, apart from the refused files.
    refused: list[dict] = []
    not_assessed: list[dict] = []
    runs = oom_reports.pick_runs(ws, args.run, file, refused)
    reports = oom_reports.collect(ws, runs, query, refused, not_assessed)
    if not reports:
        counts = f"{len(refused)} run(s) refused" + (f", {len(not_assessed)} not assessed" if not_assessed else "")
        raise ProfscopeError(f"nothing could be {'assessed' if not_assessed else 'read'}: {counts}: "
                             + "; ".join(f"{x['file']}: {x['problem']}" for x in refused + not_assessed))
    source = args.logdir or "demo"
    doc = oom_reports.document(reports, refused, not_assessed)
    text = {"html": lambda: oom_report.render_html(doc, source, server=args.server),
            "json": lambda: oom_report.render_json(doc),
            "markdown": lambda: oom_report.render_markdown(doc, source, server=args.server)}[args.format]()
    worst = doc["risk"]
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        where = f"{args.output} ({len(text.encode()) / 1024:.0f} KiB)"
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        where = "standard output"
    for r in doc["reports"]:
        util = "" if r["utilization"] is None else f", {100 * r['utilization']:.1f} % of {r['capacityBytes']:,} bytes"
        print(f"{r['risk']:<7} {r['run']}{' ' + r['host'] if r.get('host') else ''}: peak {r['peakBytes']:,} bytes{util}, "
              f"{len(r['findings'])} finding(s)", file=sys.stderr)
    for x in refused:
        print(f"REFUSED {x['file']}: {x['problem']}", file=sys.stderr)
    for x in not_assessed:
        print(f"NOT ASSESSED {x['file']}: {x['problem']}", file=sys.stderr)
    skipped = ", ".join(([f"{len(refused)} refused"] if refused else []) + ([f"{len(not_assessed)} not assessed"] if not_assessed else []))
    skipped = f" ({skipped})" if skipped else ""
    print(f"profscope: OOM risk {worst}{skipped}; {args.format} report written to {where} in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    if args.fail_on and oom_risk.RANK[worst] >= oom_risk.RANK[args.fail_on]:
        return 1
    return 0


SUMMARY_PRIORITIES = ("P0", "P1", "P2")  # the Summary's priorities, most urgent first (docs/analysis.md)


def _analyze_target(args) -> str | None:
    """``args.logdir`` as the log directory to open, and the path in it of the run's file
    or session folder the user named (None: the log directory itself). A profile's log
    directory is the folder above ``plugins/profile/<session>``; another file's, its folder."""
    if not args.logdir or args.demo or "://" in args.logdir:
        return None
    target = Path(args.logdir)
    if not target.exists():
        raise ProfscopeError(f"{args.logdir} does not exist")
    parts = target.resolve().parts
    session = target.is_dir() and len(parts) > 2 and parts[-3:-1] == ("plugins", "profile")
    if not (target.is_file() or session):
        return None
    root = Path(*parts[: parts.index("plugins")]) if "plugins" in parts[:-2] else target.resolve().parent
    args.logdir = str(root)
    return target.resolve().relative_to(root).as_posix()


def _analyze_run(ws, args, inside: str | None):
    """The run ``analyze`` summarises: --run, the one holding the file or folder named, or
    the log directory's only run."""
    from profscope.app.unsupported_files import not_read_note

    if args.run:
        return ws.run(args.run)
    runs = ws.runs()
    if inside is not None:
        runs = [r for r in runs if any(f.path == inside or f.path.startswith(inside + "/") for f in r.files)]
        if not runs:
            raise BadRequest(f"{inside}: not part of any run profscope recognises"
                             + not_read_note(ws.logdir.listing(), ws.runs(), inside))
    if len(runs) == 1:
        return runs[0]
    if not runs:
        raise BadRequest(f"no run in {ws.logdir.url}: nothing profscope recognises as a profile"
                         + not_read_note(ws.logdir.listing(), ws.runs()))
    names = ", ".join(r.name for r in runs[:8]) + (f" and {len(runs) - 8} more" if len(runs) > 8 else "")
    raise BadRequest(f"{ws.logdir.url} holds {len(runs)} runs: give --run NAME, one of {names} (profscope runs lists them)")


def cmd_analyze(args) -> int:
    """``profscope analyze``: the Summary's JSON as the data API answers it (through the
    tool table), as Markdown, or as one offline HTML file with the OOM report's memory
    section (frontend/summary_report.py)."""
    import gzip
    import time

    from fastapi.exceptions import RequestValidationError

    from profscope.app import oom_reports
    from profscope.app.queries import OomRiskQuery
    from profscope.frontend import summary_report
    from profscope.server.params import parse_query, validation_message

    start = time.perf_counter()
    if args.server and not re.match(r"https?://[^/\s]+", args.server):
        raise BadRequest(f"--server must be an http(s) URL such as http://127.0.0.1:8791/, not {args.server!r}")
    inside = _analyze_target(args)
    ws = _workspace(args)
    run = _analyze_run(ws, args, inside)
    hosts = ws.hosts(run)
    if args.host and args.host != "ALL_HOSTS" and args.host not in hosts:
        raise BadRequest(f"run {run.name!r} has no host {args.host!r}; its hosts: {', '.join(hosts) or 'none'} (or ALL_HOSTS)")
    tool = ws.tool("summary", run)
    params = {"host": args.host, "capacity_bytes": args.capacity_bytes, "device_memory": args.device_memory}
    try:
        query = parse_query(tool.query, {k: v for k, v in params.items() if v})
    except RequestValidationError as e:
        raise BadRequest(validation_message(e)) from e
    text = gzip.decompress(ws.tool_data(run, tool, query)).decode()
    summary = json.loads(text)
    source = args.logdir or "demo"
    if args.format == "json":
        out = text
    elif args.format == "html":
        memory = None
        try:
            assessable = oom_reports.assessable(ws, run)
        except ProfscopeError:  # its files cannot be read: the summary's refused[] says so already
            assessable = False
        if assessable:
            # profscope report's assessment of the same run and host (a multi-host profile:
            # its worst host, every host listed), refusals kept in the section, never fatal
            refused, not_assessed = [], []
            host = args.host if args.host and args.host != "ALL_HOSTS" else None
            oom_query = OomRiskQuery(host=host, capacity_bytes=query.capacity_bytes, device_memory=query.device_memory)
            reports = oom_reports.collect(ws, [run], oom_query, refused, not_assessed)
            memory = oom_reports.document(reports, refused, not_assessed) if reports else None
        out = summary_report.render_html(summary, source, memory=memory, server=args.server)
    else:
        out = summary_report.render_markdown(summary, source, server=args.server)
    if args.output:
        Path(args.output).write_text(out if out.endswith("\n") else out + "\n", encoding="utf-8")
        where = f"{args.output} ({len(out.encode()) / 1024:.0f} KiB)"
    else:
        sys.stdout.write(out if out.endswith("\n") else out + "\n")
        where = "standard output"
    counts = summary_report.counts(summary)
    for x in summary.get("refused") or []:
        print(f"REFUSED {x['file']}: {x['reason']}", file=sys.stderr)
    if summary["status"] == "NOT_ASSESSED" or summary.get("refused") and not any((summary.get("inputs") or {}).values()):
        # nothing of the run read (every part refused, or nothing in it the rules read): the
        # summary is written (it lists why), but it says nothing of the run
        why = "could be read" if summary.get("refused") else "holds what the summary reads"
        print(f"profscope: error: nothing in run {run.name!r} {why}; {args.format} written to {where}", file=sys.stderr)
        return 2
    print(f"profscope: {run.name}: {summary['status']}, {counts['P0']} P0, {counts['P1']} P1, {counts['P2']} P2; "
          f"{args.format} written to {where} in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    if args.fail_on:
        worst = SUMMARY_PRIORITIES[: SUMMARY_PRIORITIES.index(args.fail_on) + 1]
        return 1 if any(counts[p] for p in worst) else 0
    return 0


def _diff_logdir(args) -> None:
    """Without --logdir (or --demo), A and B are paths: the log directory is the folder
    holding both (a profile's is the folder above ``plugins/profile/<session>``)."""
    if args.demo or args.logdir:
        if args.demo and args.logdir:
            raise ProfscopeError("give either --logdir or --demo, not both")
        return
    roots = []
    for target in (args.base, args.current):
        if "://" in target or not Path(target).exists():
            raise BadRequest(f"{target}: no such file or folder; give --logdir LOGDIR to name runs of a log directory")
        one = argparse.Namespace(logdir=target, demo=False)
        _analyze_target(one)
        roots.append(one.logdir)
    common = os.path.commonpath(roots)
    if Path(common).parent == Path(common):
        raise BadRequest(f"{args.base} and {args.current} share no folder but {common}; give --logdir")
    args.logdir = common


def _diff_run(ws, name: str):
    """A run named as `profscope runs` names it, or the run holding a path."""
    if any(r.name == name.rstrip("/") for r in ws.runs()):
        return ws.run(name)
    if ws.logdir.is_local and Path(name).exists():
        inside = Path(name).resolve().relative_to(Path(ws.logdir.root).resolve()).as_posix() \
            if Path(name).resolve().is_relative_to(Path(ws.logdir.root).resolve()) else None
        if inside is not None:
            return _analyze_run(ws, argparse.Namespace(run=None), inside)
    return ws.run(name)  # the 404 naming it


def cmd_diff(args) -> int:
    """``profscope diff A B``: the compare of one tool as the data API answers it
    (app/compare.py), as Markdown, JSON or one offline HTML file (frontend/compare_report.py)."""
    from fastapi.exceptions import RequestValidationError

    from profscope.frontend import compare_report
    from profscope.server.params import parse_query, validation_message

    _diff_logdir(args)
    ws = _workspace(args)
    base, current = _diff_run(ws, args.base), _diff_run(ws, args.current)
    tool = ws.tool(args.tool, current)
    params = {"base": base.name, "host": args.host, "base_host": args.base_host, "module_name": args.module,
              "base_module": args.base_module}
    known = tool.query.params()
    for name, value in params.items():
        if value and name not in known:
            raise BadRequest(f"--{name.replace('_name', '').replace('_', '-')} does not apply to {args.tool}")
    try:
        query = parse_query(tool.query, {k: v for k, v in params.items() if v})
    except RequestValidationError as e:
        raise BadRequest(validation_message(e)) from e
    diff = ws.compare(current, tool, query)
    if args.format == "json":
        out = json.dumps(diff, indent=1)
    elif args.format == "html":
        out = compare_report.render_html(diff)
    else:
        out = compare_report.render_markdown(diff)
    if args.output:
        Path(args.output).write_text(out if out.endswith("\n") else out + "\n", encoding="utf-8")
    else:
        sys.stdout.write(out if out.endswith("\n") else out + "\n")
    print(f"profscope: {compare_report.headline(diff)}", file=sys.stderr)
    if not diff.get("comparable", True):
        return 2
    if args.fail_on_growth is not None:
        grew = compare_report.growth(diff)
        if grew is None:
            print(f"profscope: error: {args.tool} has no total to compare ({diff.get('why')}); "
                  "--fail-on-growth cannot be checked", file=sys.stderr)
            return 2
        if grew > args.fail_on_growth:
            print(f"profscope: the total grew by {grew:.1%}, more than {args.fail_on_growth:.1%}", file=sys.stderr)
            return 1
    return 0


def _capture_targets(args) -> str:
    """The targets named on the command line and in every --targets-file, as one text for
    parse_targets (which expands ranges and reads # comments)."""
    from profscope.app.capture_targets import parse_targets, read_targets_file

    text = "\n".join([args.targets or "", *(read_targets_file(f) for f in args.targets_file)])
    return ",".join(parse_targets(text, "targets"))


def _capture_watch(args, capturer, settings, ring=None) -> int:
    """``profscope capture TARGETS --when CONDITION``: a watch (app/capture_watch.py) until
    Ctrl+C or --max-fires: each probe, fire and failure on standard error, each run a fire
    saved on standard output. Exit status 0: stopped or done with every fired capture
    saved (or none fired); 1: a fired capture failed; 2: the watch failed (every target
    stopped answering) or bad input."""
    import time

    from profscope.app.capture import parse_duration
    from profscope.app.capture_watch import Watches

    watches = capturer.watches = Watches(capturer, ring=ring)
    try:
        w = watches.start(args.targets, args.when, settings, probe_every_s=parse_duration(args.probe_every,
                                                                                          "--probe-every") / 1000,
                          probe_ms=parse_duration(args.probe_duration, "--probe-duration"), max_fires=args.max_fires,
                          what="--when")
        shown = 0
        try:
            while True:
                ended = w.state in ("done", "failed", "stopped")
                for h in w.history[shown:]:
                    print(f"watch: {h['kind']}: {h['text']}", file=sys.stderr, flush=True)
                    if h["kind"] == "saved":
                        print(capturer.folder.sessions / h["run"].split("/", 1)[1], flush=True)
                shown = len(w.history)
                if ended:
                    break
                time.sleep(0.2)
        except KeyboardInterrupt:
            print("\nwatch: stopping", file=sys.stderr, flush=True)
            watches.stop(w.id)
            for h in w.history[shown:]:
                if h["kind"] == "saved":
                    print(capturer.folder.sessions / h["run"].split("/", 1)[1], flush=True)
    finally:
        capturer.close()
    if w.state == "failed":
        print(f"profscope: error: the watch failed: {w.error}", file=sys.stderr)
        return 2
    if not w.fires:
        print(f"watch: {w.probes} probe(s), the condition never held", file=sys.stderr)
    return 1 if any(f["stage"] != "saved" for f in w.fires) else 0


def _capture_ring(args, capturer, settings) -> int:
    """``profscope capture TARGETS --last 5s``: a ring (app/capture_ring.py) until Ctrl+C.
    A line on standard input (Enter) or SIGUSR1 saves the last WINDOW as a run, and Ctrl+C
    saves it once more and exits (a second Ctrl+C exits at once); each run's folder goes to
    standard output. With --when, the watch's fires save it (its probes read the ring's
    pieces). Exit status 0: every snapshot saved; 1: one failed; 2: nothing saved."""
    import signal
    import threading

    from profscope.app.capture import parse_duration
    from profscope.app.capture_ring import start_ring
    from profscope.cache.worker import parse_size

    if args.snapshots:
        raise ProfscopeError("--last keeps the last seconds in profscope and --snapshots asks the job's own continuous "
                             "mode: give one of them")
    ring = start_ring(capturer, args.targets, parse_duration(args.last, "--last") / 1000,
                      parse_duration(args.piece, "--piece") / 1000, settings,
                      parse_size(args.last_bytes, "--last-bytes"))
    if ring.state != "running":
        capturer.close()
        raise ProfscopeError(f"the ring did not start: {ring.error}")
    for h in ring.status()["hosts"]:
        if h["state"] == "failed":
            print(f"{h['address']}: FAILED: {h['error']}", file=sys.stderr)
    if getattr(args, "when", None):
        return _capture_watch(args, capturer, settings, ring=ring)
    asked = threading.Event()
    jobs = []

    def save(why: str) -> None:
        job = ring.snapshot({"reason": None, "asked_by": why})
        jobs.append(job)
        print(f"ring: {why}: {job.summary()}", file=sys.stderr, flush=True)
        if job.saved:
            print(capturer.folder.sessions / job.session, flush=True)

    def read_stdin() -> None:
        for _ in sys.stdin:  # each line (Enter) asks for one; at EOF only the signals do
            asked.set()

    previous = signal.signal(signal.SIGUSR1, lambda *_: asked.set()) if hasattr(signal, "SIGUSR1") else None
    threading.Thread(target=read_stdin, name="ring-stdin", daemon=True).start()
    print(f"ring: keeping the last {ring.window_s:g} s of {', '.join(ring.targets)} in {ring.piece_s:g} s pieces; "
          "Enter (or SIGUSR1) saves them, Ctrl+C saves them and exits", file=sys.stderr, flush=True)
    try:
        while ring.state == "running":
            if asked.wait(0.5):
                asked.clear()
                save("asked")
        if ring.state == "failed":
            print(f"profscope: error: the ring failed: {ring.error}", file=sys.stderr)
    except KeyboardInterrupt:
        print("\nring: saving the last seconds and stopping (Ctrl+C again leaves at once)", file=sys.stderr, flush=True)
        if ring.state == "running":
            save("stopped")
    finally:
        if previous is not None:
            signal.signal(signal.SIGUSR1, previous)
        capturer.close()
    if not any(j.saved for j in jobs):
        print("profscope: error: nothing was saved", file=sys.stderr)
        return 2
    return 1 if any(not j.saved for j in jobs) else 0


def cmd_capture(args) -> int:
    import time

    from profscope.app.capture import CaptureDir, Capturer, CaptureSettings, TargetPolicy, parse_duration
    from profscope.cache.store import default_cache_dir
    from profscope.cache.worker import parse_size

    settings = CaptureSettings(duration_ms=parse_duration(args.duration, "--duration"),
                               delay_ms=parse_duration(args.delay, "--delay"),
                               host_tracer_level=args.host_tracer_level, device_tracer_level=args.device_tracer_level,
                               python_tracer_level=args.python_tracer_level)
    args.targets = _capture_targets(args)
    folder = CaptureDir(args.dir or default_capture_dir(args.cache_dir or default_cache_dir()))
    # The command line dials what its user names: the allow-list guards the server only.
    limit = parse_size(args.capture_max_bytes, "--capture-max-bytes")
    capturer = Capturer(folder, TargetPolicy(["*"]), **({"max_answer_bytes": limit} if limit is not None else {}))
    if args.last:
        return _capture_ring(args, capturer, settings)
    live = sys.stderr.isatty()
    if args.when:
        return _capture_watch(args, capturer, settings)

    def follow(job) -> None:
        last = None
        while not job.done.wait(0.2 if live else 1.0):
            state = job.to_json()
            line = state["stage"] + (f" {state['remainingS']:.0f}s left" if state["remainingS"] else "")
            if line != last and (live or state["stage"] != (last or "").split(" ")[0]):
                print(("\r" if live else "") + f"capture: {line}".ljust(40), end="" if live else "\n",
                      file=sys.stderr, flush=True)
                last = line
        if live:
            print(file=sys.stderr)

    jobs = []
    try:
        if args.snapshots:
            every = parse_duration(args.every, "--every") / 1000
            session = capturer.start_continuous(args.targets, settings)
            if session.state != "running":
                raise ProfscopeError(f"continuous capture failed: {session.error}")
            for n in range(args.snapshots):
                time.sleep(every)
                jobs.append(capturer.snapshot(session.id))
                print(f"snapshot {n + 1}/{args.snapshots}: {jobs[-1].summary()}", file=sys.stderr, flush=True)
            capturer.stop_continuous(session.id)
        else:
            job = capturer.start(args.targets, settings, num_retry=args.num_retry)
            print(f"capture: recording {', '.join(job.targets)} for {settings.duration_ms / 1000:g}s", file=sys.stderr, flush=True)
            try:
                follow(job)
            except KeyboardInterrupt:
                print("\ncapture: stopping early, keeping what was recorded", file=sys.stderr, flush=True)
                capturer.stop(job.id)
                job.done.wait()
            jobs.append(job)
    finally:
        capturer.close()
    for job in jobs:
        for h in job.hosts.values():
            where = folder.root / h.file.split("/", 1)[1] if h.file else None
            print(f"{h.address}: " + (f"saved {h.bytes:,} bytes to {where}" if h.state == "saved"
                                      else f"{h.state.upper()}: {h.error}"),
                  file=sys.stderr)
        if job.saved:
            print(folder.sessions / job.session)  # stdout: the run folder, for scripts
    if not any(j.saved for j in jobs):
        print("profscope: error: nothing was captured: " + "; ".join(j.summary() for j in jobs), file=sys.stderr)
        return 2
    return 1 if any(j.failed for j in jobs) else 0


def cmd_mcp(args) -> int:
    """``profscope mcp LOGDIR``: server/mcp_server.py over the log directory's workspace."""
    try:
        from profscope.server import mcp_server
    except ImportError as e:
        if (e.name or "").split(".")[0] != "mcp":
            raise
        print("profscope: error: profscope mcp needs the MCP SDK: pip install 'profscope[mcp]'", file=sys.stderr)
        return 2
    mcp_server.serve(_workspace(args))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = _normalise_argv(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(argv)
    try:
        commands = {"serve": cmd_serve, "runs": cmd_runs, "query": cmd_query, "report": cmd_report, "capture": cmd_capture,
                    "steps": cmd_steps, "ops": cmd_ops, "analyze": cmd_analyze, "diff": cmd_diff, "mcp": cmd_mcp}
        return commands[args.command](args)
    except ProfscopeError as e:
        print(f"profscope: error: {e.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
