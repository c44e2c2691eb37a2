"""The decode's flows pass (formats/xplane_flows.py) runs XProf's flow rules over the
events that can get a flow only (``PlaneFlows.candidates``): the same flows, slices and
async drops as the rules run over every event (the dense twin: ``candidates`` giving every
event), on the real GPU/TPU/ROCm/CPU profiles; and no per-event view of a chunk is made
for them (they were ~20 arrays over every event of every chunk)."""

from __future__ import annotations

import io

import numpy as np
import pytest

from profscope.formats import xplane_flows, xplane_trace
from profscope.testing import allocator_xplane, derived_xplane

REAL = [
    "public_profiles/xplane/tpu_inference/plugins/profile/2025_12_10_tpu/tpu_inference_2.xplane.pb",
    "public_profiles/xplane/tf_gpu/plugins/profile/GPU-multi-worker/34.83.195.180_6003.xplane.pb",
    "public_profiles/xplane/mi300_jax08_gemm/plugins/profile/jax08_gemm/tw003.xplane.pb",
    "public_profiles/xplane/mi300_jax_conv_xprof_touched/plugins/profile/jax_conv_minimal/"
    "chi-mi300x-013.ord.vultr.cpe.ice.amd.com.xplane.pb",
    "tf_bfc_cpu/profile/plugins/profile/2026_11_29_18_51_13/vm.xplane.pb",
]
# the repo's builders: a TensorCore's XLA Modules line (run_id, queue_id: consumer
# contexts by TpuModuleLineMutator), GPU correlation ids, a TF executor's contexts
BUILT = {"tpu_derived": derived_xplane.tpu_derived, "gpu_derived": derived_xplane.gpu_derived,
         "tf_training": allocator_xplane.tf_training}


def _bytes(shared_fixtures, case: str) -> bytes:
    return BUILT[case]() if case in BUILT else (shared_fixtures / case).read_bytes()


def _read(data: bytes):
    ev = xplane_trace.read_trace(io.BytesIO(data), "x.xplane.pb", 1, "host")
    fe = ev.flow_events
    cols = (fe.seq, fe.flow_id, fe.kind, fe.category) if fe is not None else ()
    return ev.start_ps, ev.track, ev.name, cols


@pytest.mark.parametrize("case", REAL + list(BUILT), ids=lambda r: r.split("/")[2] if "/" in r else r)
def test_sparse_flows_equal_the_dense_twin(shared_fixtures, case, monkeypatch):
    data = _bytes(shared_fixtures, case)
    sparse = _read(data)
    picked = []
    real = xplane_flows.PlaneFlows.candidates

    def every(self, ev):  # the rules over every event of the chunk, as before
        picked.append((len(real(self, ev)), ev.n))
        return np.arange(ev.n, dtype=np.int64)

    monkeypatch.setattr(xplane_flows.PlaneFlows, "candidates", every)
    dense = _read(data)
    for a, b in zip(sparse[:3], dense[:3]):  # the same slices (async events dropped alike)
        assert np.array_equal(a, b)
    assert len(sparse[3]) == len(dense[3])
    for a, b in zip(sparse[3], dense[3]):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    # the rules ran over fewer events than the chunks hold
    assert sum(c for c, _ in picked) < sum(n for _, n in picked)


def test_the_twins_compare_flows(shared_fixtures):
    """The comparison above is not of empty lists: every profile but the TF GPU one
    (grouped, so XProf makes no flows: IsXSpaceGrouped) binds flows, from correlation ids
    (ROCm), contexts and connected events (TPU), the CPU host's contexts, and each
    builder's profile."""
    for case in REAL + list(BUILT):
        _, _, _, cols = _read(_bytes(shared_fixtures, case))
        assert bool(cols and len(cols[0])) == ("tf_gpu" not in case), case


def test_no_view_over_every_event(shared_fixtures):
    """The pass leaves no ``StatView`` (two arrays over every event of the chunk) of the
    stats it reads in the chunk's view cache."""
    data = (shared_fixtures / REAL[0]).read_bytes()
    seen = []
    real = xplane_flows.PlaneFlows.select

    def select(self, ev, *args):
        before = set(ev.views)
        out = real(self, ev, *args)
        seen.append(set(ev.views) - before)
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(xplane_flows.PlaneFlows, "select", select)
        xplane_trace.read_trace(io.BytesIO(data), REAL[0], 1, "host")
    assert seen and not set().union(*seen), set().union(*seen)
