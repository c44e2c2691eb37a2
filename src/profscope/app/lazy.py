"""Modules imported when first used.

The app's readers and tools bring in numpy, protobuf and their own tables (about 0.3 s
of the server's start on this project's machines), which the first answers a user waits
for (the page, the run list) do without. ``x = lazy.module("profscope.formats.x")``
stands for the module: its first attribute access imports it, through ``importlib``
(whose per-module import lock makes threads that race to it safe; the standard library's
``LazyLoader`` is not, before Python 3.13). tests/test_architecture.py counts these as
imports, so the layer rules see them.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["module"]


class _Module:
    __slots__ = ("_name",)

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"<module {self._name!r}, imported when first used>"


def module(name: str) -> Any:
    """A stand-in for the module ``name`` that imports it on first use."""
    return _Module(name)
