"""``from_hlo(..., arrays=True)``: the per-event lists (``heapSizes``,
``unpaddedHeapSizes``, ``profscope.heapEventBuffers``) left as numpy arrays for the
server's conversion (app/compiled_memory.py), which only encodes the result with orjson's
``OPT_SERIALIZE_NUMPY`` and cuts the page from it. The encoded full result must be the
very bytes of the lists' encoding, and the page cut from it equal to the page cut from the
lists (and from the JSON read back from the cache), on every module of the XProf goldens,
of the real GPU/TPU/ROCm profiles in ``shared/fixtures/public_profiles`` and on synthetic
modules big enough for the page to cut its points and blocks; natively and by the twin."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from profscope.errors import ProfscopeError
from profscope.tools import memory_viewer as mv
from tests.test_memory_viewer import CASES, _case_id, _input_bytes, parse_hlo
from tests.test_memory_viewer_native import PUBLIC, _public_hlo, _synthetic

ARRAY_KEYS = ("heapSizes", "unpaddedHeapSizes")


def _encode(value) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)  # as the cache stores it (cache/store.py)


def _check(hlo, space, **page_args) -> dict | None:
    try:
        lists = mv.from_hlo(hlo, space)
    except ProfscopeError as e:
        with pytest.raises(type(e)):
            mv.from_hlo(hlo, space, arrays=True)
        return None
    arrays = mv.from_hlo(hlo, space, arrays=True)
    if lists.get("heapSizes"):
        assert all(isinstance(arrays[k], np.ndarray) for k in ARRAY_KEYS)
        assert arrays["heapSizes"].dtype == np.float64
        assert arrays["profscope"]["heapEventBuffers"].dtype == np.int32
    encoded = _encode(arrays)
    assert encoded == _encode(lists)
    page = mv.page_view(lists, **page_args)
    for full in (arrays, orjson.loads(encoded)):
        got = mv.page_view(full, **page_args)
        assert got == page
        assert _encode(got) == _encode(page)
        assert not any(isinstance(v, np.ndarray) for v in got.values())
    return lists


@pytest.mark.parametrize("native", ["1", "0"])
@pytest.mark.parametrize("case", [c for c in CASES if "error" not in c], ids=_case_id)
def test_goldens_arrays_encode_as_lists(case, native, monkeypatch):
    monkeypatch.setenv("PROFSCOPE_NATIVE", native)
    hlo = parse_hlo(_input_bytes(case))
    _check(hlo, case["space"])
    _check(hlo, case["space"], max_points=3, max_blocks=2)  # the page cuts its points and blocks


@pytest.mark.parametrize("case", PUBLIC, ids=lambda c: f"{c['case']}/{c['module']}/{c['space']}")
def test_public_profiles_arrays_encode_as_lists(case, shared_fixtures):
    hlo = _public_hlo(shared_fixtures, case)
    assert _check(hlo, case["space"]) is not None
    _check(hlo, case["space"], max_points=50, max_blocks=10)


@pytest.mark.parametrize("native", ["1", "0"])
def test_big_synthetic_arrays_encode_as_lists(native, monkeypatch):
    """More events than the page keeps (4,000) and more blocks (20,000 at most): the
    points' cut and the heap points read from the arrays."""
    monkeypatch.setenv("PROFSCOPE_NATIVE", native)
    result = _check(_synthetic(25_000, 60_000, 1), 0)
    assert len(result["heapSizes"]) > 4000 and len(result["bufferBlocks"]) > 20_000
