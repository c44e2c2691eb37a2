#!/usr/bin/env python3
"""Regenerate profscope's committed protobuf Python code.

    python scripts/gen_protos.py            # rewrite the generated modules in src/profscope/
    python scripts/gen_protos.py --check    # exit 1 if the committed code is stale

Compiles every ``protos/*.proto`` with the pinned ``grpcio-tools`` (its bundled
``protoc``, run as ``python -m grpc_tools.protoc``) into ``<name>_pb2.py`` and
``<name>_pb2.pyi``, fixes imports between our own generated modules (package-relative
within one package, absolute across two), and writes each into the package that owns it
(``PACKAGES``): ``hlo_pb2`` into ``src/profscope/model/protos/`` (the ``HloProto`` is the
memory viewer's model), ``xplane_pb2`` into ``src/profscope/formats/protos/``, ``profiler_service_pb2`` (what a
capture sends to a job's profiler server) into ``src/profscope/storage/protos/``.

The output depends only on the .proto files and the grpcio-tools version, so it
is byte-for-byte reproducible; ``tests/test_protos.py`` regenerates into a
temporary folder and compares.  Users never need protoc: the generated code is
committed.  See docs/protos.md.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

#: The grpcio-tools release whose protoc produced the committed code. Keep in
#: step with the ``test`` extra in pyproject.toml.
GRPCIO_TOOLS_VERSION = "1.85.1"

REPO_ROOT = Path(__file__).resolve().parents[1]
PROTO_DIR = REPO_ROOT / "protos"
#: The source root the generated packages sit under (``--out`` replaces it).
SRC_DIR = REPO_ROOT / "src"
#: The package each ``protos/<name>.proto``'s module is written into.
PACKAGES = {
    "hlo": "profscope.model.protos",
    "xplane": "profscope.formats.protos",
    # the messages a capture exchanges with a job's profiler server (storage/profiler_client.py)
    "profiler_service": "profscope.storage.protos",
    # jax.profiler.save_device_memory_profile()'s gzipped pprof Profile (formats/pprof.py)
    "pprof": "profscope.formats.protos",
}

_HEADER_NOTE = "# Regenerate with scripts/gen_protos.py (grpcio-tools=={version}); do not edit.\n"


class GenerationError(RuntimeError):
    """protoc failed, or the wrong grpcio-tools is installed."""


def installed_grpcio_tools_version() -> str | None:
    """Version of the importable grpcio-tools, or None when it is missing."""
    try:
        from grpc_tools import grpc_version  # type: ignore[import-not-found]
    except ImportError:
        return None
    return str(grpc_version.VERSION)


def proto_files(proto_dir: Path = PROTO_DIR) -> list[Path]:
    """Our .proto files, in a fixed order."""
    return sorted(proto_dir.glob("*.proto"), key=lambda p: p.name)


def package_dir(package: str, src_dir: Path = SRC_DIR) -> Path:
    """The folder of a dotted package under a source root."""
    return src_dir.joinpath(*package.split("."))


def output_dirs(src_dir: Path = SRC_DIR) -> list[Path]:
    """Every folder that holds generated modules, in a fixed order."""
    return [package_dir(p, src_dir) for p in sorted(set(PACKAGES.values()))]


def _package_of(proto: Path) -> str:
    try:
        return PACKAGES[proto.stem]
    except KeyError:
        raise GenerationError(
            f"{proto.name}: no package for its module; add {proto.stem!r} to PACKAGES in scripts/gen_protos.py"
        ) from None


def _relativize_imports(text: str, local_modules: dict[str, str], own_package: str) -> str:
    """``import hlo_pb2 as hlo__pb2`` -> ``from . import hlo_pb2 as hlo__pb2`` (same
    package) or ``from profscope.model.protos import hlo_pb2 as hlo__pb2`` (another one).

    protoc writes absolute imports for imported .proto files; ours live in packages,
    so imports of our own generated modules must name them. ``local_modules`` maps
    each of our modules to its package. Imports of google.protobuf well-known types
    are left alone.
    """

    def repl(match: re.Match[str]) -> str:
        module = match.group(2)
        if module not in local_modules:
            return match.group(0)
        package = local_modules[module]
        source = "." if package == own_package else package
        return f"{match.group(1)}from {source} import {module}{match.group(3) or ''}"

    return re.sub(
        r"^(\s*)import ([A-Za-z_][A-Za-z0-9_]*_pb2)(\s+as\s+\w+)?$",
        repl,
        text,
        flags=re.MULTILINE,
    )


def _add_header_note(text: str) -> str:
    note = _HEADER_NOTE.format(version=GRPCIO_TOOLS_VERSION)
    lines = text.splitlines(keepends=True)
    # Put the note after protoc's leading comment block.
    i = 0
    while i < len(lines) and lines[i].startswith("#"):
        i += 1
    return "".join(lines[:i]) + note + "".join(lines[i:])


def generate(src_dir: Path = SRC_DIR, proto_dir: Path = PROTO_DIR, *, strict_version: bool = True) -> list[Path]:
    """Compile ``proto_dir/*.proto`` into their packages under ``src_dir``; return the
    files written.

    Writes only ``<package>/<name>_pb2.py`` and ``<name>_pb2.pyi``; removes no file.
    """
    version = installed_grpcio_tools_version()
    if version is None:
        raise GenerationError(
            f"grpcio-tools is not installed: pip install grpcio-tools=={GRPCIO_TOOLS_VERSION}"
        )
    if strict_version and version != GRPCIO_TOOLS_VERSION:
        raise GenerationError(
            f"grpcio-tools {version} is installed, but the committed code is made with "
            f"grpcio-tools=={GRPCIO_TOOLS_VERSION}: pip install grpcio-tools=={GRPCIO_TOOLS_VERSION}"
        )
    import grpc_tools  # type: ignore[import-not-found]

    well_known = Path(grpc_tools.__file__).resolve().parent / "_proto"
    protos = proto_files(proto_dir)
    if not protos:
        raise GenerationError(f"no .proto files in {proto_dir}")
    local_modules = {p.stem + "_pb2": _package_of(p) for p in protos}
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="profscope-protoc-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"--proto_path={proto_dir}",
            f"--proto_path={well_known}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            *[p.name for p in protos],
        ]
        # Relative file names keep absolute paths out of the descriptors.
        result = subprocess.run(cmd, cwd=proto_dir, capture_output=True, text=True)
        if result.returncode != 0:
            raise GenerationError(f"protoc failed ({result.returncode}):\n{result.stderr}")
        for proto in protos:
            package = _package_of(proto)
            out_dir = package_dir(package, src_dir)
            out_dir.mkdir(parents=True, exist_ok=True)
            for suffix in (".py", ".pyi"):
                name = f"{proto.stem}_pb2{suffix}"
                text = (Path(tmp) / name).read_text(encoding="utf-8")
                text = _relativize_imports(text, local_modules, package)
                text = _add_header_note(text)
                target = out_dir / name
                with open(target, "w", encoding="utf-8", newline="\n") as fh:
                    fh.write(text)
                written.append(target)
    return written


def stale_files(src_dir: Path = SRC_DIR, proto_dir: Path = PROTO_DIR) -> list[str]:
    """Generated files under ``src_dir`` (paths relative to it) that are missing or
    differ from a fresh build."""
    with tempfile.TemporaryDirectory(prefix="profscope-protos-") as tmp:
        fresh = generate(Path(tmp), proto_dir)
        stale = []
        for path in fresh:
            rel = path.relative_to(tmp)
            committed = src_dir / rel
            if not committed.is_file() or committed.read_bytes() != path.read_bytes():
                stale.append(rel.as_posix())
        return stale


def orphan_files(src_dir: Path = SRC_DIR, proto_dir: Path = PROTO_DIR) -> list[str]:
    """Generated-looking files under ``src_dir``'s output folders that no .proto makes
    there (a removed .proto, or a module that moved to another package)."""
    expected = set()
    for proto in proto_files(proto_dir):
        rel = package_dir(_package_of(proto), Path())
        expected.update((rel / f"{proto.stem}_pb2{suffix}").as_posix() for suffix in (".py", ".pyi"))
    found = {p.relative_to(src_dir).as_posix() for d in output_dirs(src_dir) for p in d.glob("*_pb2.py*")}
    return sorted(found - expected)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="only report whether the committed code is stale"
    )
    parser.add_argument("--out", type=Path, default=SRC_DIR, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        if args.check:
            stale = stale_files(args.out)
            orphans = orphan_files(args.out)
            if stale:
                print("stale generated protobuf code: " + ", ".join(stale), file=sys.stderr)
                print("run: python scripts/gen_protos.py", file=sys.stderr)
            if orphans:
                print("generated files without a .proto (remove them): " + ", ".join(orphans), file=sys.stderr)
            if stale or orphans:
                return 1
            print("generated protobuf code is up to date")
            return 0
        for path in generate(args.out):
            print(os.path.relpath(path, REPO_ROOT))
    except GenerationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
