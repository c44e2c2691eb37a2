"""A running JAX job with a profiler server, for capture tests and demos.

``profiler_job()`` starts ``python -m profscope.testing.profiler_job PORT`` in its own
process: a jitted training-like step in a loop (CPU is enough) after
``jax.profiler.start_server(PORT)``, the call a user adds to a long-running job. It yields
the ``localhost:PORT`` address once the server answers and the step has compiled, and
kills the job afterwards. A job whose test runner died without that (killed, or out of
time) ends by itself: it stops once its parent is gone, so it never spins on a machine
after the tests.

``free_port()`` is a port nothing listens on (for a dead target).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager

from profscope.testing.processes import free_port

__all__ = ["free_port", "jitted_train_step", "job_processes", "profiler_job", "profiler_jobs"]

READY = "profiler job ready"


@contextmanager
def profiler_job(*, start_timeout: float = 120.0, port: int | None = None):
    """Yield the address (``localhost:PORT``) of a live job's profiler server (on ``port``,
    or a free one)."""
    with profiler_jobs([port or free_port()], start_timeout=start_timeout) as addresses:
        yield addresses[0]


@contextmanager
def profiler_jobs(ports: list[int], *, start_timeout: float = 120.0):
    """Yield the addresses of live jobs, one per port: all started at once (JAX's import
    and first compile take seconds each), then each waited for."""
    with job_processes([["profscope.testing.profiler_job", str(port), str(os.getpid())] for port in ports], READY,
                       start_timeout=start_timeout):
        yield [f"localhost:{port}" for port in ports]


@contextmanager
def job_processes(argvs: list[list[str]], ready: str, *, what: str = "the profiler job",
                  start_timeout: float = 120.0):
    """Start ``python -m ARGV...`` for each argv at once, JAX on the CPU, and wait until
    each prints ``ready``; yield the processes, killed afterwards (the test jobs here and
    in testing/watch_job.py)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}
    procs = []
    try:
        for argv in argvs:
            procs.append(subprocess.Popen([sys.executable, "-m", *argv],
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env))
        deadline = time.monotonic() + start_timeout
        for proc in procs:
            lines = []
            for line in proc.stdout:
                lines.append(line)
                if ready in line:
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(f"{what} did not start:\n" + "".join(lines))
            else:
                raise AssertionError(f"{what} exited:\n" + "".join(lines))
        yield procs
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait(timeout=30)
            if proc.stdout is not None:
                proc.stdout.close()


def jitted_train_step():
    """The test jobs' jitted training-like step, compiled, with its first weights and
    batch: ``(train_step, w, x)``; ``train_step(w, x)`` -> ``(w, loss)``."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def train_step(w, x):
        def loss(w):
            return jnp.mean(jnp.tanh(x @ w) ** 2)

        g = jax.grad(loss)(w)
        return w - 0.01 * g, loss(w)

    w = jnp.ones((256, 256)) / 256
    x = jnp.ones((64, 256))
    w, _ = train_step(w, x)
    w.block_until_ready()
    return train_step, w, x


def _main(port: int, parent: int | None = None) -> None:
    import jax

    jax.profiler.start_server(port)

    def bookkeeping(n: int) -> int:
        # Plain Python calls: with python_tracer_level=1 each is an event, which makes a
        # few seconds' capture tens of MB (past gRPC's 4 MiB default answer limit).
        return sum(_tick(i) for i in range(n))

    train_step, w, x = jitted_train_step()
    print(READY, flush=True)
    while parent is None or os.getppid() == parent:  # reparented: whoever started it is gone
        with jax.profiler.TraceAnnotation("train_loop_step"):
            w, loss = train_step(w, x)
            loss.block_until_ready()
        bookkeeping(300)
        time.sleep(0.002)


def _tick(i: int) -> int:
    return i & 1


if __name__ == "__main__":
    _main(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else None)
