"""libstdc++'s ``std::sort``, reproduced: the order XProf's C++ leaves equal elements in.

``std::sort`` is not stable. Wherever XProf sorts with it and elements tie (buffers of
equal size in the memory viewer's ``maxHeapBySize``, allocator events at the same
picosecond in the memory profile), its JSON shows the order libstdc++'s introsort happens
to leave them in; to give the same answer byte for byte we replay that algorithm. The
reproduction was checked against real g++/libstdc++ (tests/test_memory_profile.py).
"""

from __future__ import annotations

import numpy as np

_THRESHOLD = 16


def std_sort_order(*keys) -> np.ndarray:
    """The permutation libstdc++'s ``std::sort`` leaves, for ``less`` = lexicographic
    comparison of ``keys`` (numpy arrays of equal length, most significant first).

    ``sorted = x[std_sort_order(k)]``. Elements with equal keys come out in the exact
    order libstdc++'s introsort leaves them (median-of-three pivot, unguarded Hoare
    partition, heapsort past ``2*log2(n)`` levels, final insertion sort with threshold
    16). Without ties any sort gives that order, so a plain argsort is used; otherwise
    the introsort is replayed, vectorized per partition, and every part without two equal
    keys is sorted directly.
    """
    if not keys:
        raise ValueError("no keys")
    n = len(keys[0])
    if n < 2:
        return np.arange(n, dtype=np.int64)
    if len(keys) == 1:
        k = np.asarray(keys[0])
        order = np.argsort(k, kind="stable")
        sk = k[order]
        ties = sk[1:] == sk[:-1]
        if not ties.any():
            return order
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.concatenate(([0], np.cumsum(~ties)))
    else:
        order = np.lexsort(tuple(reversed([np.asarray(k) for k in keys])))
        diff = np.zeros(n - 1, dtype=bool)
        for k in keys:
            sk = np.asarray(k)[order]
            diff |= sk[1:] != sk[:-1]
        if diff.all():
            return order
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.concatenate(([0], np.cumsum(diff)))
    return _introsort_ranks(rank)


def _introsort_ranks(rank: np.ndarray) -> np.ndarray:
    n = len(rank)
    a = rank.copy()
    perm = np.arange(n, dtype=np.int64)
    counts = np.bincount(a)
    dup = counts[a] > 1  # element whose key occurs more than once
    stack = [(0, n, 2 * (n.bit_length() - 1))]
    while stack:
        first, last, depth = stack.pop()
        while last - first > _THRESHOLD:
            seg_dup = dup[first:last]
            if seg_dup.sum() < 2 or _no_equal_pair(a[first:last], seg_dup):
                o = np.argsort(a[first:last], kind="stable")
                a[first:last] = a[first:last][o]
                perm[first:last] = perm[first:last][o]
                dup[first:last] = seg_dup[o]
                break
            if depth == 0:
                _heap_sort(a, perm, dup, first, last)
                break
            depth -= 1
            mid = first + (last - first) // 2
            _move_median_to_first(a, perm, dup, first, first + 1, mid, last - 1)
            cut = _unguarded_partition(a, perm, dup, first + 1, last, a[first])
            stack.append((cut, last, depth))
            last = cut
    # __final_insertion_sort: a stable insertion sort of the whole array.
    o = np.argsort(a, kind="stable")
    return perm[o]


def _no_equal_pair(seg: np.ndarray, seg_dup: np.ndarray) -> bool:
    vals = np.sort(seg[seg_dup])
    return not (vals[1:] == vals[:-1]).any()


def _swap(a, perm, dup, i, j):
    a[i], a[j] = a[j], a[i]
    perm[i], perm[j] = perm[j], perm[i]
    dup[i], dup[j] = dup[j], dup[i]


def _move_median_to_first(a, perm, dup, result, x, y, z):
    if a[x] < a[y]:
        if a[y] < a[z]:
            _swap(a, perm, dup, result, y)
        elif a[x] < a[z]:
            _swap(a, perm, dup, result, z)
        else:
            _swap(a, perm, dup, result, x)
    elif a[x] < a[z]:
        _swap(a, perm, dup, result, x)
    elif a[y] < a[z]:
        _swap(a, perm, dup, result, z)
    else:
        _swap(a, perm, dup, result, y)


def _unguarded_partition(a, perm, dup, lo, hi, pivot) -> int:
    """``std::__unguarded_partition(lo, hi, pivot)``, vectorized.

    The i-th stop of the left scan is the i-th position (ascending) holding a value
    >= pivot, the i-th stop of the right scan the i-th position (descending) holding a
    value <= pivot, as long as the scans have not crossed; positions in between are
    untouched by earlier swaps.
    """
    seg = a[lo:hi]
    left = np.flatnonzero(seg >= pivot) + lo
    right = (np.flatnonzero(seg <= pivot) + lo)[::-1]
    m = min(len(left), len(right))
    crossed = left[:m] >= right[:m]
    k = int(np.argmax(crossed)) if crossed.any() else m
    if k:
        li, ri = left[:k], right[:k]
        for arr in (a, perm, dup):
            tmp = arr[li].copy()
            arr[li] = arr[ri]
            arr[ri] = tmp
    if k == 0:
        return int(left[0])
    nxt = int(left[k]) if k < len(left) else hi
    return min(nxt, int(right[k - 1]))


def _heap_sort(a, perm, dup, first, last):
    """``std::partial_sort(first, last, last)``: make_heap then sort_heap (libstdc++)."""
    va = a[first:last].tolist()
    vp = perm[first:last].tolist()
    vd = dup[first:last].tolist()
    v = list(zip(va, vp, vd))
    n = len(v)

    def adjust(hole, length, value):
        top = hole
        child = hole
        while child < (length - 1) // 2:
            child = 2 * (child + 1)
            if v[child][0] < v[child - 1][0]:
                child -= 1
            v[hole] = v[child]
            hole = child
        if (length & 1) == 0 and child == (length - 2) // 2:
            child = 2 * (child + 1)
            v[hole] = v[child - 1]
            hole = child - 1
        parent = (hole - 1) // 2
        while hole > top and v[parent][0] < value[0]:
            v[hole] = v[parent]
            hole = parent
            parent = (hole - 1) // 2
        v[hole] = value

    if n >= 2:
        parent = (n - 2) // 2
        while True:
            adjust(parent, n, v[parent])
            if parent == 0:
                break
            parent -= 1
    end = n
    while end > 1:
        end -= 1
        value = v[end]
        v[end] = v[0]
        adjust(0, end, value)
    a[first:last] = [x[0] for x in v]
    perm[first:last] = [x[1] for x in v]
    dup[first:last] = [x[2] for x in v]
