"""A running JAX job that slows down or grows its memory when told to, for the capture
triggers' tests and demos (app/capture_watch.py).

``watch_job(control)`` starts ``python -m profscope.testing.watch_job PORT PARENT CONTROL``:
``jax.profiler.start_server(PORT)``, then a jitted step in a loop, each step inside
``jax.profiler.StepTraceAnnotation("train", step_num=i)`` (so a capture's host steps are
XProf's "train N" groups), of about ``--step-ms`` milliseconds. It yields the
``localhost:PORT`` address once the server answers. The folder ``control`` steers it:

- create ``control/slow``: from the next step on each step sleeps twice as long (the step
  time doubles); the job writes ``control/slow_at`` = the first slow step's number;
- create ``control/ramp``: from the next step on each step sleeps 10 % of ``--step-ms``
  longer than the one before (a step time that creeps up); ``control/ramp_at``;
- create ``control/grow``: from the next step on each step keeps ``--grow-mib`` MiB more
  (a real jax array, never freed: a leak), and writes ``control/grow_at``;
- every step appends ``step begin_unix_s end_unix_s`` to ``control/steps.log``, so a test
  maps an instant (a trigger firing) to the step the job was in.

Memory: a CPU JAX job's allocator writes no allocator events (jaxlib 0.10.2's CPU client:
none in a capture at any host tracer level), while TF's BFC allocator, which XLA's GPU
client uses too, writes ``MemoryAllocation`` TraceMe events with ``bytes_allocated`` /
``bytes_available`` (tsl/framework/bfc_allocator.cc ``AddTraceMe``). So this job writes
those events for its own arrays as the BFC allocator would, with a capacity of
``--limit-mib``: the memory trigger and the memory profile read them as on a GPU. At the
limit the job stops growing and says so in ``control/oom`` (as an OOM would end it).

Like profiler_job, it ends by itself once its parent is gone.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from profscope.testing.processes import free_port
from profscope.testing.profiler_job import jitted_train_step, job_processes

__all__ = ["watch_job"]

READY = "watch job ready"
MIB = 1 << 20


@contextmanager
def watch_job(control: str | os.PathLike, *, step_ms: int = 60, grow_mib: int = 8, limit_mib: int = 512,
              start_timeout: float = 120.0):
    """Yield the address (``localhost:PORT``) of a live job steered by ``control``."""
    port = free_port()
    Path(control).mkdir(parents=True, exist_ok=True)
    argv = ["profscope.testing.watch_job", str(port), str(os.getpid()), str(control), "--step-ms", str(step_ms),
            "--grow-mib", str(grow_mib), "--limit-mib", str(limit_mib)]
    with job_processes([argv], READY, what="the watch job", start_timeout=start_timeout):
        yield f"localhost:{port}"


def steps_log(control: str | os.PathLike) -> list[tuple[int, float, float]]:
    """``control/steps.log`` as (step, begin unix s, end unix s), in order."""
    out = []
    for line in (Path(control) / "steps.log").read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:
            out.append((int(parts[0]), float(parts[1]), float(parts[2])))
    return out


def step_at(control: str | os.PathLike, t: float) -> int:
    """The step the job was in (or had last finished) at unix time ``t``."""
    last = -1
    for step, begin, _end in steps_log(control):
        if begin > t:
            break
        last = step
    return last


class _Bfc:
    """The BFC allocator's trace events for the job's own arrays (see the module
    docstring): one ``MemoryAllocation`` per array kept, with the stats the memory profile
    reads (formats/xplane_allocator.py)."""

    def __init__(self, limit: int):
        self.limit, self.in_use, self.peak, self.addr = limit, 0, 0, 0x10000

    def allocate(self, nbytes: int, step: int) -> None:
        import jax

        self.in_use += nbytes
        self.peak = max(self.peak, self.in_use)
        self.addr += nbytes
        with jax.profiler.TraceAnnotation("MemoryAllocation", allocator_name="cpu_bfc", bytes_reserved=0,
                                          bytes_allocated=self.in_use, bytes_available=self.limit - self.in_use,
                                          fragmentation=0.0, peak_bytes_in_use=self.peak, requested_bytes=nbytes,
                                          allocation_bytes=nbytes, addr=self.addr, tf_op="train_step", id=step,
                                          region_type="output", data_type=1, shape=f"({nbytes // 4},)"):
            pass


def _main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("parent", type=int)
    ap.add_argument("control")
    ap.add_argument("--step-ms", type=int, default=60)
    ap.add_argument("--grow-mib", type=int, default=8)
    ap.add_argument("--limit-mib", type=int, default=512)
    a = ap.parse_args(argv)

    import jax
    import jax.numpy as jnp

    jax.profiler.start_server(a.port)
    control = Path(a.control)
    train_step, w, x = jitted_train_step()
    bfc = _Bfc(a.limit_mib * MIB)
    kept = []
    bfc.allocate(w.nbytes + x.nbytes, 0)
    slow = grow = False
    ramp_at = None
    log = open(control / "steps.log", "a", buffering=1)
    print(READY, flush=True)
    step = 0
    while os.getppid() == a.parent:  # reparented: whoever started it is gone
        step += 1
        if not slow and (control / "slow").exists():
            slow = True
            (control / "slow_at").write_text(str(step))
        if ramp_at is None and (control / "ramp").exists():
            ramp_at = step
            (control / "ramp_at").write_text(str(step))
        if not grow and (control / "grow").exists():
            grow = True
            (control / "grow_at").write_text(str(step))
        begin = time.time()
        with jax.profiler.StepTraceAnnotation("train", step_num=step):
            w, loss = train_step(w, x)
            loss.block_until_ready()
            if grow and bfc.in_use + a.grow_mib * MIB <= bfc.limit:
                kept.append(jnp.full((a.grow_mib * MIB // 4,), float(step), dtype=jnp.float32))
                kept[-1].block_until_ready()
                bfc.allocate(a.grow_mib * MIB, step)
            elif grow and not (control / "oom").exists():
                (control / "oom").write_text(str(step))
            # the rest of the step: the input pipeline, say; twice as long once slow
            creep = 1 + 0.1 * (step - ramp_at) if ramp_at is not None else 1
            time.sleep(a.step_ms / 1000 * (2 if slow else 1) * creep)
        log.write(f"{step} {begin:.6f} {time.time():.6f}\n")


if __name__ == "__main__":
    _main(sys.argv[1:])
