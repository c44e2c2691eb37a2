"""Every C extension is built where a compiler is. setup.py builds them ``optional=True``
(a machine without a compiler falls back to the numpy/Python twins), and the twin tests
skip where an extension is absent: a C file that stops compiling (two passes merged with
one name, say) would otherwise pass the whole suite on the twins, silently slower."""

import importlib
import os
import shutil
import sysconfig
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
C_FILES = sorted(SRC.glob("profscope/*/_*.c"))


def _compiler() -> str | None:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc)


def test_the_c_files_are_found():
    assert len(C_FILES) >= 5, C_FILES


@pytest.mark.parametrize("c_file", C_FILES, ids=lambda p: p.relative_to(SRC).as_posix())
def test_extension_is_built(c_file):
    if not _compiler() and not os.environ.get("CI"):
        pytest.skip("no C compiler here: the twins answer")
    name = ".".join(c_file.relative_to(SRC).with_suffix("").parts)
    try:
        importlib.import_module(name)
    except ImportError as e:
        pytest.fail(f"{c_file.name} is not built ({e}): rebuild with `.venv/bin/python setup.py build_ext "
                    f"--inplace` and read the compiler's errors")
