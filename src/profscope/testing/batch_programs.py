"""One real JAX train step compiled at several batch sizes, with and without donation,
for the OOM planner's tests (tools/oom_plan.py).

``python -m profscope.testing.batch_programs OUT --batches 32 64 [--profile] [--undonated]``
compiles an Adam MLP train step (jax on CPU) once per batch size and writes
``OUT/memory.json``: per batch XLA's ``compiled.memory_analysis()`` fields and its peak
as the planner's proof counts it (argument + output + temp - alias). With ``--profile`` it
also runs every compiled step once under ``jax.profiler.trace`` into ``OUT/profile`` (one
profile holding one module per batch size: the planner's "several compilations of the same
program"). With ``dump=True`` (:func:`make`) XLA dumps every compilation
(``--xla_dump_to --xla_dump_hlo_as_proto``) and ``OUT/dump`` keeps the train steps'
optimized HLO protos: an XLA dump run of the same modules. ``--undonated`` compiles the
step without ``donate_argnums``.

Each call is its own interpreter (:func:`make`): a profile's metadata plane lists every
module the process compiled, and jax is not imported into the test process.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["LAYERS", "make", "peak_of"]

LAYERS = (256, 512, 512, 128)
FIELDS = ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes", "alias_size_in_bytes")


def peak_of(ma: dict) -> int:
    """XLA's own peak of a compiled executable: what it allocates for arguments, outputs
    and temporaries, the outputs that alias (donated) arguments counted once."""
    return ma["argument_size_in_bytes"] + ma["output_size_in_bytes"] + ma["temp_size_in_bytes"] - ma["alias_size_in_bytes"]


def make(out: Path, batches: list[int], *, profile: bool = False, donate: bool = True, dump: bool = False,
         timeout: float = 300) -> dict:
    """Run the generator in its own interpreter; returns ``OUT/memory.json`` as a dict
    ``{"batches": {str(batch): {fields..., "peak": n}}, "layers": [...], "donate": bool}``."""
    args = [sys.executable, "-m", "profscope.testing.batch_programs", str(out), "--batches", *map(str, batches)]
    args += ["--profile"] if profile else []
    args += [] if donate else ["--undonated"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2"}
    if dump:
        # Read by XLA when jax starts its backend: set for the generator's interpreter only.
        env["XLA_FLAGS"] = f"--xla_dump_to={out / 'xla_dump'} --xla_dump_hlo_as_proto"
    subprocess.run(args, check=True, timeout=timeout, capture_output=True, env=env)
    if dump:
        # JAX also dumps its helper jits (device_put, initialisers) and LLVM IR: keep the
        # train steps' optimized HLO protos (HloProto with the buffer assignment).
        (out / "dump").mkdir(exist_ok=True)
        for f in (out / "xla_dump").glob("*_train_step*after_optimizations.hlo.pb"):
            f.rename(out / "dump" / f.name)
    return json.loads((out / "memory.json").read_text())


def _state(rng):
    import jax
    import jax.numpy as jnp
    import numpy as np

    params = {f"dense_{i}": {"w": jnp.asarray(rng.normal(0, 0.05, (a, b)).astype(np.float32)),
                             "b": jnp.asarray(np.zeros((b,), np.float32))}
              for i, (a, b) in enumerate(itertools.pairwise(LAYERS))}
    zeros = jax.tree.map(jnp.zeros_like, params)
    return {"params": params, "opt": {"mu": zeros, "nu": jax.tree.map(jnp.zeros_like, params)}}


def _train_step(state, batch):
    import jax
    import jax.numpy as jnp

    x, y = batch

    def loss(p):
        h = x
        for i in range(len(p)):
            h = h @ p[f"dense_{i}"]["w"] + p[f"dense_{i}"]["b"]
            h = jax.nn.relu(h) if i < len(p) - 1 else h
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(h), y[:, None], axis=1))

    value, grads = jax.value_and_grad(loss)(state["params"])
    mu = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, state["opt"]["mu"], grads)
    nu = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, state["opt"]["nu"], grads)
    params = jax.tree.map(lambda p, m, v: p - 1e-3 * m / (jnp.sqrt(v) + 1e-8), state["params"], mu, nu)
    return {"params": params, "opt": {"mu": mu, "nu": nu}}, value


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--batches", type=int, nargs="+", required=True)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--undonated", action="store_true")
    args = ap.parse_args(argv)
    import jax
    import jax.numpy as jnp
    import numpy as np

    jax.config.update("jax_platforms", "cpu")
    rng = np.random.default_rng(7)
    step = jax.jit(_train_step, donate_argnums=() if args.undonated else (0,))
    args.out.mkdir(parents=True, exist_ok=True)
    memory, runs = {}, []
    for n in args.batches:
        batch = (jnp.asarray(rng.normal(size=(n, LAYERS[0])).astype(np.float32)),
                 jnp.asarray(rng.integers(0, LAYERS[-1], n).astype(np.int32)))
        state = _state(rng)
        ma = step.lower(state, batch).compile().memory_analysis()
        m = {f: int(getattr(ma, f)) for f in FIELDS}
        memory[str(n)] = {**m, "peak": peak_of(m)}
        runs.append((state, batch))
    if args.profile:
        opts = jax.profiler.ProfileOptions()
        opts.python_tracer_level = 0
        opts.host_tracer_level = 0
        with jax.profiler.trace(str(args.out / "profile"), profiler_options=opts):
            for state, batch in runs:
                jax.block_until_ready(step(state, batch)[1])
        for f in (args.out / "profile").rglob("*.trace.json.gz"):
            f.unlink()
    (args.out / "memory.json").write_text(json.dumps({"batches": memory, "layers": list(LAYERS), "donate": not args.undonated,
                                                      "jax": jax.__version__}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
