"""The fuzz campaign of issue 13: seeded mutants of every input format, straight into the
readers and through a real ``profscope serve``; prints the table (Markdown) and the
distinct failure signatures.

    python scripts/fuzz_campaign.py --seed 1 --mutants 200 --json out.json
    # an older checkout (the BEFORE table): its src first on PYTHONPATH
    git worktree add ../before <commit>
    python scripts/fuzz_campaign.py --seed 1 --mutants 200 --src ../before/src

The mutants come from this checkout's profscope.testing.fuzz (same seed, same bytes),
whichever profscope is measured.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from profscope.testing.fuzz import driver, mutators, reproducers, seeds


def build_mutants(fmt: str, seed: int, n: int, pool) -> list[mutators.Mutant]:
    """The reproducers of fmt first, then n seeded mutants."""
    return [m for m in reproducers.reproducers() if m.fmt == fmt] + list(mutators.mutants(fmt, pool, seed, n))


def _group(sig: str, detail: str) -> tuple[str, str | None]:
    """(group, endpoint): a server failure's endpoints are folded into one group per
    format and error (the same bug answers on every endpoint of a run); a reader
    failure is its own group (step, exception, where it was raised)."""
    parts = sig.split(" ", 3)
    if parts[0] != "server" or len(parts) < 4 or parts[2].startswith("rss"):
        return sig, None
    _, fmt, endpoint, rest = parts
    if rest.startswith("500"):
        msg = detail.split(" :: ", 1)[1] if " :: " in detail else ""
        rest = "500 " + (driver.error_kind(msg) or rest[4:])
    elif rest.startswith("no response"):
        rest = "no response (connection dropped, e.g. after a 500)"
    return f"server {fmt} {rest}", endpoint


def findings(sigs: dict, seed: int, target) -> str:
    """Markdown: the distinct failures (readers: step, exception, where; server: format,
    status and error, with the endpoints that gave it), each with its count, an example
    input (a hand-written reproducer when one shows it) and the command that writes it."""
    groups: dict[str, dict] = {}
    for sig, fs in sigs.items():
        for f in fs:
            g, endpoint = _group(sig, f["detail"])
            e = groups.setdefault(g, {"n": 0, "endpoints": set(), "examples": []})
            e["n"] += 1
            if endpoint:
                e["endpoints"].add(endpoint)
            e["examples"].append(f)
    out = [f"# Fuzz findings (seed {seed}, target {target})", "",
           f"{len(groups)} distinct failures. Each: count; an example input (a hand-written reproducer "
           "from profscope/testing/fuzz/reproducers.py where one shows it); the error; "
           "`python scripts/fuzz_campaign.py --seed S --write-mutant FORMAT NAME --work DIR` writes the input as a run folder.", ""]
    for mode in ("readers", "server"):
        out += [f"## {mode}", ""]
        for g, e in sorted(groups.items(), key=lambda kv: (kv[0].split()[1], -kv[1]["n"])):
            if not g.startswith(mode):
                continue
            fmt = g.split()[1]
            ex = min(e["examples"], key=lambda f: (not (f["mutant"].startswith("repro:") and "#" not in f["mutant"]),
                                                   f["index"]))
            out.append(f"- `{g}` — {e['n']}×" + (f" on {', '.join(sorted(e['endpoints']))}" if e["endpoints"] else ""))
            out.append(f"  - input: `{ex['mutant']}` ({' '.join(ex['ops'][:4])[:200]})")
            if ex["detail"]:
                out.append(f"  - error: {ex['detail'][:300]}")
            out.append(f"  - reproduce: `python scripts/fuzz_campaign.py --seed {seed} --write-mutant {fmt} '{ex['mutant']}' --work DIR`")
        out.append("")
    return "\n".join(out) + "\n"


def compare(before: dict, after: dict) -> str:
    """Input by input, step by step: answers that changed class between two campaigns of
    the same seed (ok -> refused is the one to look at: a budget that may be too tight)."""
    def cls(v: str) -> str:
        if v == "ok" or (v[:1] == "2" and v[:3].isdigit()):
            return "ok"
        if v[:1] == "4" and v[:3].isdigit():
            return "4xx"
        return "fail"

    out = ["| format/mode | inputs compared | ok -> 4xx | fail -> 4xx | fail -> ok | 4xx -> ok | ok/4xx -> fail |",
           "|---|---|---|---|---|---|---|"]
    examples: list[str] = []
    for key, rows in (after.get("outcomes") or {}).items():
        old = {r["name"]: r["steps"] for r in (before.get("outcomes") or {}).get(key, [])}
        counts = dict.fromkeys(["ok>4xx", "fail>4xx", "fail>ok", "4xx>ok", ">fail"], 0)
        n = 0
        for r in rows:
            if r["name"] not in old:
                continue
            n += 1
            for step, v in r["steps"].items():
                if step not in old[r["name"]]:
                    continue
                a, b = cls(old[r["name"]][step]), cls(v)
                if a == b:
                    continue
                k = f"{a}>{b}" if b != "fail" else ">fail"
                if k in counts:
                    counts[k] += 1
                if k == "ok>4xx" and sum(1 for e in examples if e.startswith(f"- {key}")) < 8:
                    examples.append(f"- {key} `{r['name']}` {step}: {v[:160]}")
        out.append(f"| {key} | {n} | {counts['ok>4xx']} | {counts['fail>4xx']} | {counts['fail>ok']} "
                   f"| {counts['4xx>ok']} | {counts['>fail']} |")
    return "\n".join(out + ["", "Read before, refused now (examples):", ""] + examples)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mutants", type=int, default=100, help="mutants per format into the readers")
    ap.add_argument("--server-mutants", type=int, default=None, help="mutants per format through the server (default: --mutants)")
    ap.add_argument("--formats", nargs="+", default=list(mutators.FORMATS) + ["params"],
                    choices=list(mutators.FORMATS) + ["params"],
                    help="'params': hostile query parameters on good demo runs (server only; 5 per server mutant)")
    ap.add_argument("--modes", nargs="+", default=["readers", "server"], choices=["readers", "server"])
    ap.add_argument("--json", type=Path, help="write every count and failure here")
    ap.add_argument("--md", type=Path, help="write the table and signatures here too")
    ap.add_argument("--save-failures", type=Path, help="write the smallest input of each failure signature here")
    tgt = ap.add_mutually_exclusive_group()
    tgt.add_argument("--profscope-python", help="interpreter with the profscope to measure (default: this one)")
    tgt.add_argument("--src", help="a checkout's src folder, put first on PYTHONPATH (this interpreter)")
    ap.add_argument("--fixtures", type=Path, help="the public fixtures folder (default: $PROFSCOPE_SHARED_FIXTURES or ../shared/fixtures)")
    ap.add_argument("--work", type=Path, help="scratch folder (default: a temporary one)")
    ap.add_argument("--findings", type=Path, help="write the distinct failure signatures, each with how to reproduce it")
    ap.add_argument("--from-json", type=Path, help="with --findings: render them from an earlier campaign's --json")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE_JSON", "AFTER_JSON"),
                    help="compare two campaigns of one seed input by input (what read before and is refused now)")
    ap.add_argument("--write-mutant", nargs=2, metavar=("FORMAT", "NAME"),
                    help="write one input (a reproducer 'repro:NAME' or a mutant 'SEED#K' of this --seed) "
                         "as a run folder under --work, and exit")
    a = ap.parse_args(argv)
    if a.write_mutant:
        fmt, name = a.write_mutant
        pool = seeds.collect(a.fixtures)
        if "#" in name:
            k = int(name.rsplit("#", 1)[1])
            m = next(iter(mutators.mutants(fmt, pool, a.seed, k + 1, start=k)))
        else:
            m = next(m for m in reproducers.reproducers() if m.fmt == fmt and m.name == name)
        out = driver.write_run(a.work or Path("."), m)
        print(f"{m.name}: {' '.join(m.ops)} -> {', '.join(str(out / f) for f in m.files)}")
        return 0

    if a.compare:
        print(compare(*(json.loads(p.read_text()) for p in a.compare)))
        return 0
    if a.from_json:
        data = json.loads(a.from_json.read_text())
        a.findings.write_text(findings(data["signatures"], data["seed"], data.get("target")))
        return 0
    target = driver.Target(python=a.profscope_python or sys.executable, src=str(Path(a.src).resolve()) if a.src else None)
    pool = seeds.collect(a.fixtures)
    work = a.work or Path(tempfile.mkdtemp(prefix="fuzz_campaign"))
    results: list[driver.FormatResult] = []
    all_mutants: dict[tuple[str, str], list[mutators.Mutant]] = {}
    t0 = time.monotonic()
    for fmt in a.formats:
        if fmt == "params":
            if "server" in a.modes:
                n = 5 * (a.mutants if a.server_mutants is None else a.server_mutants)
                print(f"[{time.monotonic() - t0:6.0f}s] params: {n} requests, server", file=sys.stderr, flush=True)
                good = driver.good_runs_logdir(seeds.DEMO, work / "good-runs")
                results.append(driver.run_params(good, target, work / "params", a.seed, n))
                print(driver.table(results[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
            continue
        n_server = a.mutants if a.server_mutants is None else a.server_mutants
        ms = build_mutants(fmt, a.seed, max(a.mutants, n_server), pool)
        n_rep = sum(1 for m in reproducers.reproducers() if m.fmt == fmt)
        for mode in a.modes:
            chosen = ms[: n_rep + (a.mutants if mode == "readers" else n_server)]
            all_mutants[fmt, mode] = chosen
            print(f"[{time.monotonic() - t0:6.0f}s] {fmt}: {len(chosen)} inputs, {mode}", file=sys.stderr, flush=True)
            run = driver.run_readers if mode == "readers" else driver.run_server
            results.append(run(fmt, chosen, target, work / f"{fmt}-{mode}"))
            print(driver.table(results[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    sigs = driver.signatures(results)
    md = [f"Fuzz campaign: seed {a.seed}, {a.mutants} mutants per format into the readers, "
          f"{a.mutants if a.server_mutants is None else a.server_mutants} through the server (plus the "
          f"{len(reproducers.reproducers())} reproducers); target {a.src or a.profscope_python or 'this interpreter'}; "
          f"{time.monotonic() - t0:.0f} s.", "", driver.table(results), "", "## Failure signatures", ""]
    for sig, fs in sigs.items():
        small = min(fs, key=lambda f: (not (f["mutant"].startswith("repro:") and "#" not in f["mutant"]), f["index"]))
        md.append(f"- `{sig}` — {len(fs)}× (e.g. {small['mutant']} {' '.join(small['ops'][:3])}: {small['detail'][:160]})")
    masked = driver.signatures(results, notes=True)
    if masked:
        md += ["", "## 4xx answers wrapping an unexpected exception or a killed worker (no 500, but a reader bug)", ""]
        for sig, fs in masked.items():
            md.append(f"- `{sig}` — {len(fs)}× (e.g. {fs[0]['mutant']}: {fs[0]['detail'][:200]})")
    text = "\n".join(md)
    print(text)
    if a.md:
        a.md.write_text(text + "\n")
    if a.save_failures:
        by_name = {(fmt, m.name): m for (fmt, _), ms in all_mutants.items() for m in ms}
        for k, (sig, fs) in enumerate(sigs.items()):
            f = min(fs, key=lambda f: sum(len(b) for b in by_name[(sig.split()[1], f["mutant"])].files.values())
                    if (sig.split()[1], f["mutant"]) in by_name else 0)
            m = by_name.get((sig.split()[1], f["mutant"]))
            if m is not None:
                d = a.save_failures / f"{k:03d}"
                shutil.rmtree(d, ignore_errors=True)
                driver.write_run(d, m)
                (d / "SIGNATURE.txt").write_text(f"{sig}\n{m.name}\n{' '.join(m.ops)}\n{f['detail']}\n")
    if a.json:
        a.json.write_text(json.dumps({"seed": a.seed, "mutants": a.mutants, "server_mutants": a.server_mutants,
                                      "target": a.src or a.profscope_python, "summary": [r.summary() for r in results],
                                      "signatures": {s: fs for s, fs in sigs.items()}, "masked": masked,
                                      "outcomes": {f"{r.fmt}/{r.mode}": r.outcomes for r in results}}, indent=1))
    if a.findings:
        a.findings.write_text(findings(sigs, a.seed, a.src or a.profscope_python))
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
