"""Small real JAX programs whose optimized HLO has (or has not) what the Summary's compiler
rules look for (tools/analysis_hlo.py), compiled by XLA on the CPU here.

``python -m profscope.testing.hlo_programs OUT [--profile]`` jits each function of
:data:`PROGRAMS` once, with ``XLA_FLAGS=--xla_dump_to --xla_dump_hlo_as_proto``, and keeps
each one's optimized module in ``OUT/dump`` (an XLA dump run: ``module_<id>.jit_<name>.
cpu_after_optimizations.hlo.pb``, HloProtos with their buffer assignment); with ``--profile`` it
also runs them under ``jax.profiler.trace`` into ``OUT/profile`` (a profile run whose
metadata plane embeds the same modules). Each call is its own interpreter (:func:`make`):
XLA reads the flags when jax starts, and jax is not imported into the test process.

What XLA 0.10 on the CPU makes of each (the rule that should fire, or none):

- ``transpose_sort``: a 2048x2048 f32 transpose feeding a sort becomes a
  ``transpose_copy_fusion`` whose copy re-lays out {0,1} -> {1,0} (32 MiB read + written):
  ``layout_mismatch_copy``.
- ``reshape_transpose_dot``: a (256, 64, 512) f32 array reshaped to (256, 64, 8, 64),
  transposed to (256, 8, 64, 64) and reshaped to (2048, 4096) before a dot: a
  ``copy_bitcast_fusion`` (bitcast, transpose, copy, bitcast) materialises it, 32 MiB read +
  written: ``unfused_reshape`` (its copy is not reported again as a layout mismatch).
- ``pad_dot``: a pad of a 4096x960 f32 operand to 1024 columns feeding a dot runs as its own
  loop fusion (``wrapped_pad``) before the dot's fusion: ``unfused_reshape``.
- ``bf16_sum``: ``jnp.sum`` of a 4096x2048 bf16 array; JAX promotes it to f32, reduces and
  converts back: ``convert_in_reduction``.
- ``bf16_sum_astype``: ``jnp.sum(x.astype(f32), axis=-1).astype(bf16)`` of a 2048x4096 bf16
  array: XLA puts the back-convert in a fusion of its own (``wrapped_convert``) after the
  reduce's: ``convert_in_reduction`` too.
- ``dot``, ``bf16_max``, ``f32_sum``: the healthy counterparts (no formatting kernel, a max
  reduction, no conversion): no finding.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["EXPECTED", "PROGRAMS", "make"]

PROGRAMS = ("transpose_sort", "reshape_transpose_dot", "pad_dot", "bf16_sum", "bf16_sum_astype", "dot", "bf16_max",
            "f32_sum")
# The compiler rule each program plants (None: healthy).
EXPECTED = {"transpose_sort": "layout_mismatch_copy", "reshape_transpose_dot": "unfused_reshape",
            "pad_dot": "unfused_reshape", "bf16_sum": "convert_in_reduction",
            "bf16_sum_astype": "convert_in_reduction",
            "dot": None, "bf16_max": None, "f32_sum": None}


def make(out: Path, *, profile: bool = False, timeout: float = 300) -> Path:
    """Run the generator in its own interpreter; returns ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    raw = out / "xla_dump"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2",
           "XLA_FLAGS": f"--xla_dump_to={raw} --xla_dump_hlo_as_proto"}
    args = [sys.executable, "-m", "profscope.testing.hlo_programs", str(out)] + (["--profile"] if profile else [])
    subprocess.run(args, check=True, timeout=timeout, capture_output=True, env=env)
    dump = out / "dump"
    dump.mkdir(exist_ok=True)
    # Keep the programs' optimized modules (jax also dumps its helper jits: device_put,
    # broadcast_in_dim, convert_element_type).
    for name in PROGRAMS:
        for f in raw.glob(f"module_*.jit_{name}.cpu_after_optimizations.hlo.pb"):
            f.rename(dump / f.name)
    return out


def _programs():
    import jax
    import jax.numpy as jnp

    def transpose_sort(x):
        return jnp.sort(jnp.transpose(x), axis=0)

    def reshape_transpose_dot(x, w):
        return x.reshape(256, 64, 8, 64).transpose(0, 2, 1, 3).reshape(256 * 8, 64 * 64) @ w

    def pad_dot(x, w):
        return jnp.dot(jnp.pad(x, ((0, 0), (0, 64))), w)

    def bf16_sum(x):
        return jnp.sum(x, axis=-1)

    def bf16_sum_astype(x):
        return jnp.sum(x.astype(jnp.float32), axis=-1).astype(jnp.bfloat16)

    def dot(x, w):
        return jnp.dot(x, w)

    def bf16_max(x):
        return jnp.max(x, axis=-1)

    def f32_sum(x):
        return jnp.sum(x, axis=-1)

    f32 = jnp.ones((2048, 2048), jnp.float32)
    bf16 = jnp.ones((4096, 2048), jnp.bfloat16)
    args = {"transpose_sort": (f32,), "pad_dot": (jnp.ones((4096, 960)), jnp.ones((1024, 64))),
            "reshape_transpose_dot": (jnp.ones((256, 64, 512)), jnp.ones((4096, 64))), "bf16_sum": (bf16,),
            "bf16_sum_astype": (jnp.ones((2048, 4096), jnp.bfloat16),),
            "dot": (f32, jnp.ones((2048, 64))), "bf16_max": (bf16,), "f32_sum": (jnp.ones((4096, 2048)),)}
    fns = {"transpose_sort": transpose_sort, "reshape_transpose_dot": reshape_transpose_dot, "pad_dot": pad_dot,
           "bf16_sum": bf16_sum, "bf16_sum_astype": bf16_sum_astype, "dot": dot, "bf16_max": bf16_max, "f32_sum": f32_sum}
    return jax, [(jax.jit(fns[n]), args[n]) for n in PROGRAMS]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args(argv)
    jax, jitted = _programs()
    for f, args in jitted:
        f(*args).block_until_ready()  # compile (and dump) outside the trace
    if a.profile:
        with jax.profiler.trace(str(a.out / "profile")):
            for f, args in jitted:
                f(*args).block_until_ready()
    return 0


if __name__ == "__main__":
    sys.exit(main())
