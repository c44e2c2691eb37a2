"""Native accelerators, built by ``pip install``: every ``src/profscope/<layer>/_*.c`` is
one extension module, ``profscope.<layer>._<name>``.

Each is optional (``optional=True``): where no C compiler is found the build goes on and
the pure-Python path of that module is used instead (both paths are tested for equal
results). Everything else about the package lives in ``pyproject.toml``.
"""

from pathlib import Path

import numpy
from setuptools import Extension, setup

SRC = Path(__file__).resolve().parent / "src"


def _extensions() -> list[Extension]:
    out = []
    for c in sorted(SRC.glob("profscope/*/_*.c")):
        rel = c.relative_to(SRC)
        name = ".".join(rel.with_suffix("").parts)
        # a layer's headers (e.g. tools/_protowire.h) as `depends`: a change to one
        # rebuilds its users, and the sdist ships them (build_ext's source files)
        headers = sorted("src/" + h.relative_to(SRC).as_posix() for h in c.parent.glob("_*.h"))
        out.append(Extension(name, ["src/" + rel.as_posix()], include_dirs=[numpy.get_include()], depends=headers,
                             extra_compile_args=["-O3", "-std=c11"], optional=True))
    return out


setup(ext_modules=_extensions())
