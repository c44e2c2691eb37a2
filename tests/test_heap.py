"""model/heap.py: glibc's malloc keeps what a block frees (a conversion worker's decoder
then reuses its pages instead of faulting in fresh ones, docs/performance.md), and gives
it back at the block's end. Checked in a child process: the block changes the process's
allocator settings for good, as it does in the conversion worker it is made for."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CHILD = r"""
import json, numpy as np
from profscope.model import heap

def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

out = {"glibc": heap._glibc() is not None, "start": rss_mib()}
a = np.ones(12 << 20)  # 96 MiB, touched
del a
out["freed_outside"] = rss_mib()
with heap.freed_memory_kept():
    a = np.ones(12 << 20)
    del a
    out["freed_inside"] = rss_mib()
    with heap.freed_memory_kept():  # nested: the outer block still holds
        pass
    out["after_nested"] = rss_mib()
out["after_block"] = rss_mib()
print(json.dumps(out))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc and /proc")
def test_freed_memory_is_kept_in_the_block_and_given_back_after():
    got = json.loads(subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True).stdout)
    if not got["glibc"]:
        pytest.skip("not glibc")
    assert got["freed_outside"] - got["start"] < 32  # a big chunk is unmapped when freed
    assert got["freed_inside"] - got["start"] > 80  # kept for the next allocation
    assert got["after_nested"] - got["start"] > 80
    assert got["after_block"] - got["start"] < 32  # trimmed at the end


GIVE_BACK = r"""
import json, numpy as np
from profscope.model import heap

def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

out = {"glibc": heap._glibc() is not None}
big = np.ones(3 << 20)  # 24 MiB, mmapped; freeing it raises glibc's dynamic mmap threshold
del big
parts = [np.ones(1 << 20) for _ in range(8)]  # 8 x 8 MiB, now from the heap
top = np.ones(1 << 17)  # after them: the heap's top is not free
out["start"] = rss_mib()
del parts
out["freed"] = rss_mib()
with heap.freed_memory_kept():
    heap.give_back()  # a block keeps what it frees: nothing given back inside one
    out["in_block"] = rss_mib()
parts = [np.ones(1 << 20) for _ in range(8)]
top2 = np.ones(1 << 17)
del parts
out["freed_again"] = rss_mib()
heap.give_back()
out["given_back"] = rss_mib()
print(json.dumps(out))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc and /proc")
def test_give_back_returns_what_the_raised_threshold_kept():
    """Arrays freed under glibc's raised dynamic threshold stay in RSS (the zoom levels'
    flow pre-pass on jax308: 93 MB through the walk that sets the worker's peak) until
    :func:`heap.give_back`; not inside a block that keeps freed memory on purpose."""
    got = json.loads(subprocess.run([sys.executable, "-c", GIVE_BACK], capture_output=True, text=True,
                                    check=True).stdout)
    if not got["glibc"]:
        pytest.skip("not glibc")
    assert got["freed"] - got["start"] > -16  # freed, but kept in the heap
    assert got["in_block"] - got["freed"] > -16  # kept inside a freed_memory_kept block
    assert got["freed_again"] - got["given_back"] > 48  # 64 MiB handed back
