"""A small real JAX program for the links from a buffer to its HLO, its trace slices and its
source line (issue 37), compiled and profiled by XLA on the CPU here.

``python -m profscope.testing.link_program OUT`` writes:

- ``OUT/logdir/src/mlp.py``: the program's source (jax records this path, absolute, in each
  instruction's stack frames: the source the memory viewer's panel shows);
- ``OUT/logdir/plugins/profile/<run>/<host>.xplane.pb``: a ``jax.profiler.trace`` of ``steps``
  (3) runs of the jitted step (its module embedded in the metadata plane, its ops on the
  host's threads, each slice with ``hlo_op``, ``hlo_module`` and ``program_id`` args);
- ``OUT/dump``: XLA's own dump of the same module, as text and as proto
  (``--xla_dump_hlo_as_text --xla_dump_hlo_as_proto``): ``*.cpu_after_optimizations.txt``
  beside ``*.cpu_after_optimizations.hlo.pb``, what tests/test_hlo_text.py compares our
  text with.

Each call is its own interpreter (:func:`make`): XLA reads the flags when jax starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["PROGRAM", "make"]

#: The module name jax gives the step (``jit_<function name>``).
MODULE = "jit_mlp_step"

PROGRAM = '''\
import sys

import jax
import jax.numpy as jnp


def mlp_step(x, w1, w2):
    h = jnp.tanh(x @ w1)
    y = jax.nn.relu(h @ w2)
    loss = jnp.mean((y - 1.0) ** 2)
    return loss, jnp.sort(h, axis=0)[:8]


def main(out, steps):
    k = jax.random.PRNGKey(0)
    x = jax.random.normal(k, (256, 512))
    w1 = jax.random.normal(k, (512, 1024))
    w2 = jax.random.normal(k, (1024, 256))
    step = jax.jit(mlp_step)
    jax.block_until_ready(step(x, w1, w2))  # compiled (and dumped) outside the trace
    with jax.profiler.trace(out):
        for _ in range(steps):
            jax.block_until_ready(step(x, w1, w2))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
'''


def make(out: Path, *, steps: int = 3, timeout: float = 300) -> Path:
    """Write the program under ``out/logdir/src``, run it (``steps`` runs of the step in
    the trace); returns ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    src = out / "logdir" / "src"
    src.mkdir(parents=True, exist_ok=True)
    program = src / "mlp.py"
    program.write_text(PROGRAM)
    dump = out / "dump"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2",
           "XLA_FLAGS": f"--xla_dump_to={dump} --xla_dump_hlo_as_text --xla_dump_hlo_as_proto"}
    subprocess.run([sys.executable, str(program), str(out / "logdir"), str(steps)], check=True, timeout=timeout,
                   capture_output=True, env=env)
    return out


if __name__ == "__main__":
    make(Path(sys.argv[1]))


def coverage(ws, run, module: str, host: str | None = None) -> dict:
    """Issue 37's bar for one module: of the buffers at its peak (the memory viewer's
    ``profscope.peakBuffers``) that have a defining instruction, how many resolve to a
    line of the module's HLO text, how many name an op the trace has slices of at all
    (any track, any module), and how many of those the panel links to at least one slice
    of this module's runs (app/hlo_links.py)."""
    from profscope.app.agent_tools import payload

    mv = payload(ws, run, "memory_viewer", module_name=module, host=host)
    names = [b["instruction"] for b in mv["profscope"]["peakBuffers"] if b.get("instruction")]
    text = ws.hlo_module_text(run, module, host)
    out = {"module": module, "buffers": len(mv["profscope"]["peakBuffers"]), "withInstruction": len(names),
           "hloText": 0, "opEvents": 0, "traceSlices": 0, "unresolved": []}
    ix = None
    for name in names:
        if name in text["instructions"]:
            out["hloText"] += 1
        panel = ws.hlo_instruction(run, module, host, name)
        trace = panel["trace"]
        if trace is None:
            continue
        if ix is None:
            info = dict(ws.trace_sources(run))[trace["host"]]
            ix = ws.trace_index(run, trace["host"], info)
        if name in ix.names:
            out["opEvents"] += 1
            if trace["defining"] and trace["defining"]["count"]:
                out["traceSlices"] += 1
            else:
                out["unresolved"].append(name)
    return out
