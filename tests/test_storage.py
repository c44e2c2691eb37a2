"""Storage: listing, confinement to the root, and the path checks every URL goes through."""

from __future__ import annotations

import os

import fsspec
import pytest

from profscope.errors import BadRequest, NotFound
from profscope.storage import LogDir, safe_relpath


@pytest.mark.parametrize(
    "path, expected",
    [("a/b.pb", "a/b.pb"), ("./a//b/", "a/b"), ("", ""), (".", ""), ("run 1/x", "run 1/x")],
)
def test_safe_relpath_normalises(path, expected):
    assert safe_relpath(path) == expected


@pytest.mark.parametrize(
    "path",
    ["../etc", "../../etc/passwd", "a/../../b", "a/..", "/etc/passwd", "C:/x", "a\\..\\b", "a\x00b", "gs://other/x", "file:///etc"],
)
def test_safe_relpath_refuses_escapes(path):
    with pytest.raises(BadRequest):
        safe_relpath(path)


def test_local_listing_skips_links_out_of_the_root(tmp_path):
    root = tmp_path / "logdir"
    (root / "a").mkdir(parents=True)
    (root / "a" / "x.xplane.pb").write_bytes(b"x")
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    (tmp_path / "secret_dir").mkdir()
    (tmp_path / "secret_dir" / "y.xplane.pb").write_bytes(b"y")
    os.symlink(outside, root / "a" / "leak.xplane.pb")
    os.symlink(tmp_path / "secret_dir", root / "linkdir")
    os.symlink(root / "a" / "x.xplane.pb", root / "inside.xplane.pb")

    logdir = LogDir(str(root))
    files = logdir.files()
    assert set(files) == {"a/x.xplane.pb", "inside.xplane.pb"}
    assert "a" in logdir.listing().dirs and "linkdir" not in logdir.listing().dirs
    with pytest.raises(BadRequest, match="outside the log directory"):
        logdir.full_path("a/leak.xplane.pb")
    with pytest.raises(BadRequest):
        logdir.full_path("linkdir/y.xplane.pb")
    with pytest.raises(NotFound):
        logdir.open("a/leak.xplane.pb")
    assert logdir.read_bytes("inside.xplane.pb") == b"x"


def test_listing_is_cached_briefly(tmp_path):
    (tmp_path / "a.txt").write_text("1")
    logdir = LogDir(str(tmp_path), listing_ttl=60)
    assert set(logdir.files()) == {"a.txt"}
    (tmp_path / "b.txt").write_text("2")
    assert set(logdir.files()) == {"a.txt"}  # within the TTL: the same listing
    assert set(logdir.files(refresh=True)) == {"a.txt", "b.txt"}
    assert logdir.info("b.txt").size == 1


def test_memory_filesystem_listing():
    fs = fsspec.filesystem("memory")
    fs.pipe("/plt/logs/train/plugins/profile/s1/h.xplane.pb", b"abc")
    fs.pipe("/plt/logs/top.txt", b"z")
    fs.pipe("/plt/other/not-mine.txt", b"q")
    logdir = LogDir("memory://plt/logs")
    listing = logdir.listing()
    assert set(listing.files) == {"train/plugins/profile/s1/h.xplane.pb", "top.txt"}
    assert {"train", "train/plugins", "train/plugins/profile", "train/plugins/profile/s1"} <= listing.dirs
    assert logdir.read_bytes("train/plugins/profile/s1/h.xplane.pb") == b"abc"
    with pytest.raises(BadRequest):
        logdir.read_bytes("../other/not-mine.txt")


def test_missing_root_is_reported_with_its_name(tmp_path):
    with pytest.raises(NotFound, match="does-not-exist"):
        LogDir(str(tmp_path / "does-not-exist")).check()


def test_remote_listing_is_one_recursive_call_per_ttl():
    fs = fsspec.filesystem("memory")
    for i in range(300):
        fs.pipe(f"/many/logs/run{i % 7}/plugins/profile/s{i}/h.xplane.pb", b"x")
    logdir = LogDir("memory://many/logs", listing_ttl=60)
    calls = []
    real_find, real_ls = logdir.fs.find, logdir.fs.ls
    logdir.fs.find = lambda *a, **k: calls.append("find") or real_find(*a, **k)
    logdir.fs.ls = lambda *a, **k: calls.append("ls") or real_ls(*a, **k)
    try:
        for _ in range(5):
            assert len(logdir.files()) == 300
    finally:
        del logdir.fs.find, logdir.fs.ls
    assert calls == ["find"]
