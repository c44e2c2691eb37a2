#!/usr/bin/env python3
"""Generate the PyTorch profiler demo traces (CPU) that the memory-profile tests read.

What it makes (under ``--out``, default ``src/profscope/demo/logdir/torch``)::

    README.md                               what each file is (generated)
    expected.json                           facts the tests compare against
    <name>.pt.trace.json.gz                 prof.export_chrome_trace(), gzipped
    <name>.memory_timeline.json             prof.export_memory_timeline(..., device="cpu"), raw

for three small programs, each run in its own subprocess:

1. ``mlp_train``: a 3-layer MLP, cross-entropy, Adam (optimizer state appears in step 1),
   ``zero_grad()`` every step.
2. ``transformer_train``: a 2-layer ``nn.TransformerEncoder`` with a linear head, AdamW.
3. ``leak``: an MLP trained with plain SGD whose loop also appends a copy of the hidden
   activation (64 x 256 float32 = 65,536 bytes) to a list that is never cleared -- a
   deliberate leak of exactly ``LEAK_BYTES`` per step.

Every program is profiled with ``torch.profiler.profile(activities=[CPU],
profile_memory=True, record_shapes=True, with_stack=True, schedule=schedule(wait=0,
warmup=1, active=STEPS))`` and calls ``prof.step()`` at the end of each iteration, so the
trace holds ``ProfilerStep#N`` annotations around the recorded steps.

Made with torch 2.13.0 (CPU build). Set-up, in a scratch virtual environment (torch is
never a profscope dependency)::

    python3 -m venv .venv-torch
    .venv-torch/bin/pip install torch==2.13.0 numpy
    .venv-torch/bin/python scripts/make_torch_traces.py

Seeds are fixed, so shapes and byte counts repeat; timestamps, pids, addresses and
durations change on every run.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "src" / "profscope" / "demo" / "logdir" / "torch"

LEAK_BYTES = 64 * 256 * 4  # one (64, 256) float32 activation kept per step
PROGRAMS = {
    "mlp_train": {
        "what": "3-layer MLP (64-256-256-10), batch 32, cross-entropy, Adam; zero_grad() every step",
        "steps": 4,
    },
    "transformer_train": {
        "what": "2-layer nn.TransformerEncoder (d_model 32, 4 heads, ff 64, seq 16, batch 4) + linear head, AdamW",
        "steps": 3,
    },
    "leak": {
        "what": (
            "MLP (64-256-10), batch 64, plain SGD; each step appends hidden.detach().clone() "
            f"(64 x 256 float32 = {LEAK_BYTES} bytes) to a list that is never cleared"
        ),
        "steps": 6,
    },
}


# -- the programs (run inside a subprocess with torch) -----------------------------------


def _mlp_train(torch, nn, steps, prof):
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(32, 64)
    y = torch.randint(0, 10, (32,))
    for _ in range(steps + 1):  # + the warm-up step of the schedule
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        prof.step()


def _transformer_train(torch, nn, steps, prof):
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
    encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    head = nn.Linear(32, 8)
    params = list(encoder.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-3)
    x = torch.randn(4, 16, 32)
    y = torch.randint(0, 8, (4,))
    for _ in range(steps + 1):
        logits = head(encoder(x).mean(dim=1))
        loss = nn.functional.cross_entropy(logits, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        prof.step()


def _leak(torch, nn, steps, prof):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(64, 256)
            self.fc2 = nn.Linear(256, 10)

        def forward(self, x):
            hidden = torch.relu(self.fc1(x))
            return self.fc2(hidden), hidden

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 64)
    y = torch.randint(0, 10, (64,))
    history = []  # the leak: grows by one (64, 256) float32 tensor every step

    def leaky_step():
        logits, hidden = model(x)
        loss = nn.functional.cross_entropy(logits, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        history.append(hidden.detach().clone())

    for _ in range(steps + 1):
        leaky_step()
        prof.step()


def _child(name: str, out: Path) -> None:
    import torch
    from torch import nn
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(0)
    torch.set_num_threads(1)
    steps = PROGRAMS[name]["steps"]
    program = {"mlp_train": _mlp_train, "transformer_train": _transformer_train, "leak": _leak}[name]
    with profile(
        activities=[ProfilerActivity.CPU],
        profile_memory=True,
        record_shapes=True,
        with_stack=True,
        schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
    ) as prof:
        program(torch, nn, steps, prof)
    tmp = out / f"{name}.pt.trace.json"
    prof.export_chrome_trace(str(tmp))
    with open(tmp, "rb") as src, gzip.GzipFile(out / f"{name}.pt.trace.json.gz", "wb", mtime=0) as dst:
        shutil.copyfileobj(src, dst)
    tmp.unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # deprecated, but it is what users have
        prof.export_memory_timeline(str(out / f"{name}.memory_timeline.json"), device="cpu")
    print(json.dumps({"torch": torch.__version__}))


# -- the driver --------------------------------------------------------------------------


def _facts(out: Path, name: str) -> dict:
    with gzip.open(out / f"{name}.pt.trace.json.gz", "rt") as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    mem = [e for e in events if e.get("name") == "[memory]"]
    steps = sorted(e["name"] for e in events if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#"))
    return {
        "memoryEvents": len(mem),
        "allocations": sum(1 for e in mem if e["args"]["Bytes"] > 0),
        "frees": sum(1 for e in mem if e["args"]["Bytes"] < 0),
        "peakTotalAllocated": max(e["args"]["Total Allocated"] for e in mem),
        "profilerSteps": steps,
        "traceBytesGz": (out / f"{name}.pt.trace.json.gz").stat().st_size,
        "timelineBytes": (out / f"{name}.memory_timeline.json").stat().st_size,
    }


def _readme(facts: dict, torch_version: str) -> str:
    lines = [
        "# PyTorch profiler demo traces",
        "",
        "Generated by `scripts/make_torch_traces.py` -- do not edit by hand; regenerate with",
        "",
        "```",
        "python3 -m venv .venv-torch",
        ".venv-torch/bin/pip install torch==2.13.0 numpy",
        ".venv-torch/bin/python scripts/make_torch_traces.py",
        "```",
        "",
        f"Made with torch {torch_version} on CPU, {_dt.datetime.now(_dt.UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}.",
        "Each program ran under `torch.profiler.profile(activities=[CPU], profile_memory=True,",
        "record_shapes=True, with_stack=True, schedule=schedule(wait=0, warmup=1, active=N))`",
        "with `prof.step()` after every iteration.",
        "",
        "Files per program:",
        "",
        "- `<name>.pt.trace.json.gz`: `prof.export_chrome_trace()`, gzipped. Holds `cpu_op`,",
        "  `python_function` (with_stack) and `user_annotation` (`ProfilerStep#N`,",
        "  `Optimizer.step#...`) complete events, and `[memory]` instant events (args",
        "  `Addr`, `Bytes`, `Total Allocated`, `Total Reserved`, `Device Type`, `Device Id`).",
        "- `<name>.memory_timeline.json`: `prof.export_memory_timeline(path, device=\"cpu\")`",
        "  (deprecated in torch 2.13 but working): `[times_us, sizes]`, one row of 9 sizes per",
        "  time; column 0 is always 0, columns 1-8 are PARAMETER, OPTIMIZER_STATE, INPUT,",
        "  TEMPORARY, ACTIVATION, GRADIENT, AUTOGRAD_DETAIL, unknown.",
        "- `expected.json`: counts taken from the traces with plain `json` (tests use it).",
        "",
        "## Programs",
        "",
    ]
    for name, spec in PROGRAMS.items():
        f = facts[name]
        lines += [
            f"### `{name}`",
            "",
            f"- {spec['what']}",
            f"- recorded steps: {', '.join(f['profilerSteps'])}",
            (f"- `[memory]` events: {f['memoryEvents']} ({f['allocations']} allocations, {f['frees']} frees);"
             f" peak `Total Allocated` {f['peakTotalAllocated']} bytes"),
            f"- sizes: trace {f['traceBytesGz']} bytes gzipped, memory timeline {f['timelineBytes']} bytes",
            "",
        ]
    lines += [
        f"The `leak` program keeps {LEAK_BYTES} bytes more alive at the end of every step",
        "than at the end of the step before.",
        "",
        "## What the files show (torch 2.13, CPU)",
        "",
        "- `[memory]` events: `{\"ph\": \"i\", \"s\": \"t\", \"cat\": \"cpu_instant_event\", \"name\": \"[memory]\"}`",
        "  on the pid/tid of the thread that allocated, with args `Total Reserved`, `Total Allocated`,",
        "  `Bytes` (+ allocation, - free), `Device Id` (-1 on CPU), `Device Type` (0 = CPU), `Addr`,",
        "  `finished`, `Ev Idx`; in time order in the file.",
        "- On CPU, `Total Allocated` counts only what was allocated while the profiler recorded:",
        "  parameters, inputs and optimizer state made before (here: in the schedule's warm-up",
        "  step) are not in it, and `Total Reserved` is 0. The memory timeline does include them",
        "  (its PARAMETER, INPUT and OPTIMIZER_STATE rows), so its totals are higher.",
        "- Ops are `X` events (`cpu_op`) nested on the same thread; frees triggered by Python",
        "  dropping a tensor often sit outside any op. With `with_stack=True`, `python_function`",
        "  `X` events on the same thread interleave with the ops (`file.py(line): fn`,",
        "  `<built-in method ...>`, and `nn.Module: Linear_0` for module calls).",
        "- Memory-timeline times are microseconds of the profiler clock: trace `ts` +",
        "  `baseTimeNanoseconds` / 1000 (the trace's top-level key).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    out = args.out.resolve()
    if args.child:
        _child(args.child, out)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():
        if old.name.endswith((".pt.trace.json.gz", ".memory_timeline.json")):
            old.unlink()
    torch_version = None
    facts = {}
    with tempfile.TemporaryDirectory() as cwd:  # torch may drop files in the cwd
        for name in PROGRAMS:
            print(f"running {name} ...", flush=True)
            env = dict(os.environ, PYTHONHASHSEED="0", OMP_NUM_THREADS="1")
            proc = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--out", str(out), "--child", name],
                cwd=cwd, env=env, check=False, capture_output=True, text=True,
            )
            if proc.returncode != 0:
                sys.stderr.write(proc.stdout + proc.stderr)
                return proc.returncode
            torch_version = json.loads(proc.stdout.strip().splitlines()[-1])["torch"]
            facts[name] = _facts(out, name)
    expected = {
        "torch": torch_version,
        "leakBytesPerStep": LEAK_BYTES,
        "programs": {name: {"steps": spec["steps"], **facts[name]} for name, spec in PROGRAMS.items()},
    }
    (out / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")
    (out / "README.md").write_text(_readme(facts, torch_version))
    total = sum(p.stat().st_size for p in out.iterdir())
    print(f"wrote {out} ({total} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
