"""A few lines of a program's source file, read only from inside the roots the user gave.

Compilers and profilers name source files as the program saw them: XLA's ``OpMetadata``
and stack frames carry ``/home/user/proj/model.py`` (absolute, on the machine that ran the
job), PyTorch's stacks the same. profscope reads such a file only when it finds it under a
root: the log directory (when it is local) or a ``--source-root`` folder. A name is matched
by its longest suffix that exists under a root: ``/home/user/proj/src/model.py`` is
``src/model.py`` under a root that has it, else ``model.py`` (so a checkout of the project
anywhere serves as a root).

Nothing outside a root is ever opened: a name with a ``..`` component is refused, and the
file found must resolve (symlinks followed) to a regular file inside the root's own
resolved path, so a symlink inside a root that leads out is refused too.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath, PureWindowsPath

from profscope.errors import BadInput, BadRequest, NotFound, TooLarge

#: The largest source file shown (a generated file of megabytes is not "a few lines").
MAX_BYTES = 4 << 20
#: The most lines either side of the line asked for.
MAX_CONTEXT = 50
DEFAULT_CONTEXT = 5


def _parts(name: str) -> list[str]:
    """The path components of a file name as a program wrote it (POSIX or Windows)."""
    path = PureWindowsPath(name) if "\\" in name and "/" not in name else PurePosixPath(name)
    parts = [p for p in path.parts if p not in ("/", "\\") and not p.endswith((":\\", ":"))]
    return [p for p in parts if p != "."]


class SourceRoots:
    """The folders source files are read from, in the order given (the first that has a
    file wins)."""

    def __init__(self, roots: list[str | os.PathLike]):
        self.roots = [Path(r) for r in roots]

    def __bool__(self) -> bool:
        return bool(self.roots)

    def find(self, name: str) -> tuple[Path, str, Path] | None:
        """(root, the path found relative to it, the resolved file) of ``name``, or None
        when no root has it. BadRequest for a name that climbs (``..``) or is empty."""
        if not name or "\x00" in name:
            raise BadRequest("missing or invalid parameter 'file'")
        parts = _parts(name)
        if ".." in parts:
            raise BadRequest(f"{name}: a source file name may not contain '..' (files are read only inside the source roots)",
                             file=name)
        if not parts:
            raise BadRequest(f"{name}: not a file name")
        for root in self.roots:
            try:
                real_root = root.resolve(strict=True)
            except OSError:
                continue
            for i in range(len(parts)):
                rel = "/".join(parts[i:])
                candidate = root.joinpath(*parts[i:])
                try:
                    real = candidate.resolve(strict=True)
                except OSError:
                    continue
                if real != real_root and real_root not in real.parents:
                    continue  # a symlink leading out of the root: never read
                if real.is_file():
                    return root, rel, real
        return None

    def read(self, name: str, line: int | None, context: int | None = None) -> dict:
        """``{file, path, line, first_line, lines, root}``: the lines around ``line``
        (1-based; the first lines when None) of the file ``name`` names. NotFound when no
        root has it; BadInput when it is binary; TooLarge past :data:`MAX_BYTES`."""
        found = self.find(name)
        if found is None:
            where = ", ".join(str(r) for r in self.roots) or "none configured"
            raise NotFound(f"{name}: not found under the source roots ({where}); "
                           "give profscope serve --source-root DIR", file=name)
        root, rel, real = found
        size = real.stat().st_size
        if size > MAX_BYTES:
            raise TooLarge(f"{rel}: {size:,} bytes, more than the {MAX_BYTES:,} a source view reads", file=rel)
        data = real.read_bytes()
        if b"\x00" in data[:8192]:
            raise BadInput(f"{rel}: a binary file, not source text", file=rel)
        text = data.decode("utf-8", "replace").splitlines()
        k = DEFAULT_CONTEXT if context is None else max(0, min(context, MAX_CONTEXT))
        at = line if line and 0 < line <= len(text) else None
        first = max(1, (at or 1) - k)
        last = min(len(text), (at or 1) + k)
        return {"file": name, "path": rel, "line": at, "first_line": first, "lines": text[first - 1:last],
                "root": str(root), "total_lines": len(text)}
