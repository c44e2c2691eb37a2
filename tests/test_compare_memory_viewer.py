"""Memory viewer, module vs module (issue 36 item 1, docs/compare.md "Memory viewer"): the
peak delta attributed buffer by buffer, residual 0 B.

On the two-batch JAX program of scripts/make_oom_programs.py (one Adam MLP train step
compiled at batch 256 and at batch 1024, in one profile) and on the real public MI300 GEMM
profile (``jnp.dot`` compiled at several sizes: one program, several modules), through the
data route (``base_module``/``base`` of app/compare.py), compared with the two single
answers of the same route."""

from __future__ import annotations

import math
import re

import pytest

from tests.test_oom_risk_verdict import two_batch  # noqa: F401  (the session fixture)

GEMM = "xplane/mi300_jax08_gemm/jax08_gemm"
TPU = "xplane/tpu_inference/2025_12_10_tpu"
_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "f32": 4, "s32": 4, "u32": 4,
                "f64": 8, "s64": 8, "u64": 8}


def _get(client, run, module, **params):
    res = client.get("/data/plugin/profile/data",
                     params={"run": run, "tag": "memory_viewer", "module_name": module, **params})
    assert res.status_code == 200, res.text
    return res.json()


def _run(client, prefix):
    return next(r for r in client.get("/data/plugin/profile/runs").json() if r.startswith(prefix))


def _array_bytes(shape: str) -> int:
    """Bytes of a dense array shape string (``f32[256,128]{1,0}``), for the checks below."""
    m = re.fullmatch(r"(\w+)\[([\d,]*)\](\{[\d,]*\})?", shape)
    assert m, shape
    dims = [int(d) for d in m.group(2).split(",") if d]
    return _DTYPE_BYTES[m.group(1)] * math.prod(dims)


def _check_exact(d, base, current):
    """The invariants of docs/compare.md, against the two single answers."""
    peak_b, peak_c = (x["profscope"]["totals"]["peakBytes"] for x in (base, current))
    assert d["totals"] == {"base": peak_b, "current": peak_c, "delta": peak_c - peak_b, "unit": "bytes",
                           "residual": 0}
    assert sum(r["delta"] for r in d["rows"]) == peak_c - peak_b
    for grouping in ("category", "framework_op"):
        assert sum(g["delta"] for g in d["groups"][grouping]) == peak_c - peak_b, grouping
    # Every buffer of each side's peak is in exactly one row, at its own size.
    for side, payload in (("base", base), ("current", current)):
        ids = sorted(r[f"id_{side}"] for r in d["rows"] if r[f"id_{side}"] is not None)
        assert ids == sorted(b["id"] for b in payload["profscope"]["peakBuffers"])
        by_id = {b["id"]: b["bytes"] for b in payload["profscope"]["peakBuffers"]}
        assert all(r[side] == by_id[r[f"id_{side}"]] for r in d["rows"] if r[f"id_{side}"] is not None)
    assert [abs(r["delta"]) for r in d["rows"]] == sorted((abs(r["delta"]) for r in d["rows"]), reverse=True)
    assert len({r["key"] for r in d["rows"]}) == len(d["rows"])


def test_peak_buffers_sum_to_the_peak_on_every_module(make_client, two_batch):  # noqa: F811
    client = make_client(two_batch[0])
    run = _run(client, "two_batch/")
    modules = client.get("/data/plugin/profile/module_list", params={"run": run}).text.split(",")
    assert len(modules) > 2
    for module in modules:
        d = _get(client, run, module)
        listed = d["profscope"]["peakBuffers"]
        assert sum(b["bytes"] for b in listed) == d["profscope"]["totals"]["peakBytes"], module
        # maxHeap lists the same buffers (small ones merged): the named ones are in peakBuffers.
        names = {b["name"] for b in listed}
        assert {o["instructionName"] for o in d["maxHeap"] if o.get("logicalBufferId", 0) >= 0
                and "instructionName" in o} <= names


def test_two_batch_sizes_residual_zero_every_changed_buffer_named(make_client, two_batch):  # noqa: F811
    logdir, facts = two_batch
    client = make_client(logdir)
    run = _run(client, "two_batch/")
    small, big = "jit_train_step(32)", facts["config"]["big_step_module"] + "(34)"
    base, current = _get(client, run, small), _get(client, run, big)
    d = _get(client, run, big, base_module=small)
    assert d["tool"] == "memory_viewer" and d["comparable"] is True and d["why"] is None
    assert d["base"]["module"] == small and d["current"]["module"] == big
    _check_exact(d, base, current)
    assert d["totals"]["delta"] > 0
    changed = [r for r in d["rows"] if r["delta"] != 0]
    assert changed and all(r["label"] for r in changed)
    # The batch input, matched across the two compilations by its name: its delta is the
    # batch's growth times one example (layer_sizes[0] float32 features).
    cfg = facts["config"]
    grow = (cfg["big_batch"] - cfg["batch"]) * cfg["layer_sizes"][0] * 4
    batch_rows = [r for r in changed if r["category"] == "Parameter" and r["in"] == "both"
                  and r["shape_base"] != r["shape_current"]]
    assert grow in [r["delta"] for r in batch_rows]
    # The parameters and the optimizer state do not depend on the batch: matched, unchanged.
    state = [r for r in d["rows"] if r["framework_op"].startswith("state[")]
    assert len(state) == 3 * 2 * (len(cfg["layer_sizes"]) - 1) + 1
    assert all(r["in"] == "both" and r["match"] == "name+shape" and r["delta"] == 0 for r in state)
    # Activations matched across the two programs by framework op and source line (their
    # op_name scopes differ: jit(train_step_big)/jit(train_step)/... vs jit(train_step)/...).
    assert any(r["match"] == "framework_op+source" and r["delta"] > 0 for r in changed)
    # The page's extras: both heap curves (peak point kept) and the buffers at each peak.
    for side, payload in (("base", base), ("current", current)):
        assert max(d["heap"][side]["mib"]) == max(payload["heapSizes"])
        shown = d["peak_buffers"][side]
        assert shown["count"] == len(payload["profscope"]["peakBuffers"])
        assert {b["row"] for b in shown["buffers"]} <= {r["key"] for r in d["rows"]}


def test_a_real_public_program_at_two_sizes(make_client, shared_fixtures):
    """jnp.dot at 1024x1024 and 4096x4096 (bf16) on an MI300: every buffer paired, and each
    delta is what the two shapes say."""
    client = make_client(shared_fixtures / "public_profiles")
    base, current = _get(client, GEMM, "jit_dot(21)"), _get(client, GEMM, "jit_dot(34)")
    d = _get(client, GEMM, "jit_dot(34)", base_module="jit_dot(21)")
    assert d["comparable"] is True
    _check_exact(d, base, current)
    assert d["totals"]["delta"] > 0
    assert all(r["in"] == "both" for r in d["rows"])
    arrays = [r for r in d["rows"] if not r["shape_current"].startswith("(")]
    assert arrays and all(r["delta"] == _array_bytes(r["shape_current"]) - _array_bytes(r["shape_base"])
                          for r in arrays)


@pytest.mark.parametrize(("prefix", "module"), [("two_batch/", "jit_train_step_big(34)"), (TPU, "jit_f")])
def test_a_module_against_itself_is_zero_everywhere(make_client, two_batch, shared_fixtures, prefix, module):  # noqa: F811
    client = make_client(two_batch[0] if prefix.startswith("two_batch") else shared_fixtures / "public_profiles")
    run = _run(client, prefix)
    if "(" not in module:
        modules = client.get("/data/plugin/profile/module_list", params={"run": run}).text.split(",")
        module = next(m for m in modules if m.startswith(module + "("))
    single = _get(client, run, module)
    d = _get(client, run, module, base=run, base_module=module)
    assert d["comparable"] is True
    _check_exact(d, single, single)
    assert d["totals"]["delta"] == 0 and d["rows"]
    assert all(r["in"] == "both" and r["delta"] == 0 and r["match"] == "name+shape" for r in d["rows"])
    assert all(g["delta"] == 0 for gs in d["groups"].values() for g in gs)


def test_unrelated_programs_are_not_paired(make_client, shared_fixtures):
    """jnp.dot against broadcast_in_dim of the same profile: nothing in common, said so."""
    client = make_client(shared_fixtures / "public_profiles")
    base, current = _get(client, GEMM, "jit_dot(21)"), _get(client, GEMM, "jit_broadcast_in_dim(19)")
    d = _get(client, GEMM, "jit_broadcast_in_dim(19)", base_module="jit_dot(21)")
    assert d["comparable"] is False
    assert "different programs" in d["why"] and "jit_dot(21)" in d["why"]
    _check_exact(d, base, current)
    assert all(r["in"] in ("base_only", "current_only") for r in d["rows"])


def test_a_text_only_dump_says_why_it_cannot_be_attributed(make_client, two_batch):  # noqa: F811
    client = make_client(two_batch[0])
    module = "jit_train_step(32)"
    d = _get(client, "two_batch_dump", module, base="two_batch_text_dump", base_module=module)
    assert d["comparable"] is False and d["rows"] == []
    assert "text-only" in d["why"] and "two_batch_text_dump" in d["why"]


def test_a_profile_module_against_a_dump_module(make_client, two_batch):  # noqa: F811
    """The dump of the same compiles (XLA_FLAGS=--xla_dump_to) as the base: the same
    HloProto, so the same attribution as against the profile's own small step."""
    client = make_client(two_batch[0])
    run = _run(client, "two_batch/")
    small, big = "jit_train_step(32)", "jit_train_step_big(34)"
    in_profile = _get(client, run, big, base_module=small)
    against_dump = _get(client, run, big, base="two_batch_dump", base_module=small)
    assert against_dump["comparable"] is True and against_dump["base"]["run"] == "two_batch_dump"
    _check_exact(against_dump, _get(client, "two_batch_dump", small), _get(client, run, big))
    assert against_dump["totals"] == in_profile["totals"]
    strip = ("link_base", "link_current")
    assert ([{k: v for k, v in r.items() if k not in strip} for r in against_dump["rows"]]
            == [{k: v for k, v in r.items() if k not in strip} for r in in_profile["rows"]])
    # Without base_module the base is the dump's module of the same name: nothing changed.
    same = _get(client, run, big, base="two_batch_dump")
    assert same["totals"]["delta"] == 0 and all(r["delta"] == 0 and r["in"] == "both" for r in same["rows"])


def test_the_demo_programs(make_client, demo_logdir):
    """The bundled demo (real JAX profiles): the MLP's train step against its own XLA dump is
    zero everywhere; the transformer's train step against the MLP's (another run, the base
    module found by its name up to the program id) shares only Adam's step-count and two
    bias-correction scalars: different programs, said so, nothing paired."""
    client = make_client(demo_logdir)
    mlp, transformer = _run(client, "mlp/"), _run(client, "transformer/")
    module = next(m for m in client.get("/data/plugin/profile/module_list", params={"run": mlp}).text.split(",")
                  if m.startswith("jit_train_step("))
    same = _get(client, mlp, module, base="dumps/mlp")
    assert same["comparable"] is True and same["totals"]["delta"] == 0 and same["totals"]["residual"] == 0
    assert all(r["in"] == "both" and r["delta"] == 0 for r in same["rows"])
    t_module = next(m for m in client.get("/data/plugin/profile/module_list", params={"run": transformer}).text.split(",")
                    if m.startswith("jit_train_step("))
    d = _get(client, transformer, t_module, base=mlp)
    assert d["base"]["module"] == module
    assert d["comparable"] is False and "different programs" in d["why"] and "share only" in d["why"]
    _check_exact(d, _get(client, mlp, module), _get(client, transformer, t_module))
    assert all(r["in"] in ("base_only", "current_only") for r in d["rows"])


def test_bad_inputs_are_4xx_naming_the_file(make_client, shared_fixtures):
    """A corrupt base run (the TPU profile whose bytes >= 0x80 became U+FFFD) and a memory
    space the base module lacks: a 4xx JSON error naming the file, never a 500."""
    client = make_client(shared_fixtures / "public_profiles")
    modules = client.get("/data/plugin/profile/module_list", params={"run": TPU}).text.split(",")
    f = next(m for m in modules if m.startswith("jit_f("))
    psum = next(m for m in modules if m.startswith("jit__psum("))
    params = {"run": TPU, "tag": "memory_viewer", "module_name": f}
    corrupt = next(r for r in client.get("/data/plugin/profile/runs").json() if r.startswith("xplane/tpu_inference_corrupt/"))
    res = client.get("/data/plugin/profile/data", params={**params, "base": corrupt})
    assert res.status_code == 422 and "tpu_inference_corrupt" in res.json()["error"] and res.json()["file"]
    # the error says it is the base's (the run on screen is fine), and the base run's
    # own answer keeps its own words (a remembered failure is not changed in place)
    assert res.json()["error"].startswith(f"the base, run {corrupt!r}: ")
    alone = client.get("/data/plugin/profile/data", params={"run": corrupt, "tag": "memory_viewer"})
    assert alone.status_code == 422 and not alone.json()["error"].startswith("the base")
    res = client.get("/data/plugin/profile/data", params={**params, "base_module": psum, "memory_space": "5"})
    assert res.status_code == 404 and "no memory space 5" in res.json()["error"] and res.json()["file"]
