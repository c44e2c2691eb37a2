"""Builders and helpers for testing profscope, shipped with the package.

Each module lays out realistic, deterministic inputs (xplane profiles with allocator
events, Chrome/PyTorch traces, PyTorch memory snapshots, XProf-style log directories) or
serves an app for a test (``local_server``, ``xprof_frontend``). Nothing in profscope's
runtime imports them; the test suite, ``scripts/`` and ``benchmarks/`` do::

    from profscope.testing import allocator_xplane, torch_snapshot
    from profscope.testing import memory_trace
"""
