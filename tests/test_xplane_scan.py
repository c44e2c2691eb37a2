"""Scanning XSpace profiles on the wire: planes, hosts and modules without a full parse."""

from __future__ import annotations

import gzip
import io

import pytest

from profscope.errors import BadInput
from profscope.formats import xplane
from profscope.formats.protos import xplane_pb2


@pytest.fixture(scope="module")
def tf_xplane(shared_fixtures):
    return next((shared_fixtures / "tf_bfc_cpu" / "profile").rglob("*.xplane.pb")).read_bytes()


def _demo_xplane(demo_logdir, program="transformer"):
    return next(demo_logdir.glob(f"{program}/plugins/profile/*/demo-host.xplane.pb")).read_bytes()


def test_scan_agrees_with_a_full_parse(demo_logdir, tf_xplane):
    for data in (_demo_xplane(demo_logdir), tf_xplane):
        full = xplane_pb2.XSpace.FromString(data)
        index = xplane.scan(io.BytesIO(data), "x.xplane.pb")
        assert [p.name for p in index.planes] == [p.name for p in full.planes]
        assert index.hostnames == list(full.hostnames)
        for ref, plane in zip(index.planes, full.planes):
            assert xplane.read_plane(io.BytesIO(data), ref, "x") == plane


def test_tf_fixture_planes(tf_xplane):
    index = xplane.scan(io.BytesIO(tf_xplane), "vm.xplane.pb")
    assert [p.name for p in index.planes] == ["/host:CPU", "Task Environment"]
    assert index.hostnames == ["vm"]
    assert xplane.hlo_modules(io.BytesIO(tf_xplane), "vm.xplane.pb") == []  # no /host:metadata


def test_modules_of_the_demo_match_what_jax_compiled(demo_logdir, demo_expected):
    for name, program in demo_expected["programs"].items():
        data = _demo_xplane(demo_logdir, name)
        modules = xplane.hlo_modules(io.BytesIO(data), "demo-host.xplane.pb")
        assert sorted(m.display_name for m in modules) == sorted(m["name"] for m in program["metadata_modules"])
        train = [m for m in modules if m.program_id == program["program_id"]]
        assert [m.display_name for m in train] == [program["profile_module_name"]]


def test_gzipped_profiles_scan_the_same(demo_logdir):
    data = _demo_xplane(demo_logdir)
    plain = xplane.scan(io.BytesIO(data), "a")
    zipped = xplane.scan(io.BytesIO(gzip.compress(data)), "a.gz")
    assert [(p.name, p.offset, p.length) for p in plain.planes] == [(p.name, p.offset, p.length) for p in zipped.planes]
    assert xplane.hlo_modules(io.BytesIO(gzip.compress(data)), "a.gz") == xplane.hlo_modules(io.BytesIO(data), "a")


@pytest.mark.parametrize("cut", [1, 7, 100, 5000, -3])
def test_truncated_profiles_are_reported(demo_logdir, cut):
    data = _demo_xplane(demo_logdir, "mlp")
    with pytest.raises(BadInput, match=r"cut\.xplane\.pb: truncated"):
        xplane.scan(io.BytesIO(data[:cut]), "cut.xplane.pb")
    with pytest.raises(BadInput, match="truncated"):
        xplane.scan(io.BytesIO(gzip.compress(data)[: max(cut, 30)]), "cut.xplane.pb.gz")


@pytest.mark.parametrize("junk", [b"\xff" * 64, b"\x0f\x00", b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"])
def test_garbage_is_reported(junk):
    with pytest.raises(BadInput, match="junk.xplane.pb"):
        xplane.scan(io.BytesIO(junk), "junk.xplane.pb")


def test_empty_file_is_an_empty_space():
    assert xplane.scan(io.BytesIO(b""), "e").planes == []
