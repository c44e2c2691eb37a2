#!/usr/bin/env python3
"""Write the PyTorch profiler traces of a real 2-process ``torchrun`` job (CPU, gloo) that
the rank-grouping tests read (tests/data/torchrun_ddp/, docs/runs.md "One run per
distributed job").

Each rank trains a small MLP wrapped in ``DistributedDataParallel`` (gloo all-reduces the
gradients between the two processes) under ``torch.profiler.profile(activities=[CPU],
profile_memory=True, record_shapes=True, schedule=schedule(wait=0, warmup=1,
active=STEPS, repeat=1))`` (``repeat=1``: without it the
schedule starts a new, empty cycle after the last step and the export is empty) and writes its own trace, ``ddp_rank<RANK>.pt.trace.json.gz``, by
``prof.export_chrome_trace`` (gzip because the path ends in ``.gz``). The ranks' batches
are uneven on purpose (rank r takes ``BATCH * (r + 1)`` rows, as an unevenly sharded data
set does), so their memory peaks and step times differ and the roll-up has a worst rank.

Run (torch is never a profscope dependency; a scratch virtual environment)::

    python3 -m venv .venv-torch
    .venv-torch/bin/pip install torch==2.13.0 numpy
    .venv-torch/bin/torchrun --standalone --nproc_per_node=2 scripts/make_torchrun_traces.py --out tests/data/torchrun_ddp

Seeds are fixed; timestamps, pids and durations change on every run.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile, schedule

STEPS = 3
BATCH = 64


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                                                  nn.Linear(512, 10)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    torch.manual_seed(1 + rank)
    rows = BATCH * (rank + 1)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=STEPS, repeat=1)) as prof:
        for _ in range(1 + STEPS):
            x, y = torch.randn(rows, 128), torch.randint(0, 10, (rows,))
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            prof.step()
    args.out.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(args.out / f"ddp_rank{rank}.pt.trace.json.gz"))
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(f"torch {torch.__version__}, world size {os.environ.get('WORLD_SIZE')}: wrote {args.out}")


if __name__ == "__main__":
    main()
