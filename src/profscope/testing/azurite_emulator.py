"""A local Azure Blob Storage for tests and benchmarks: Azurite, Microsoft's emulator
(npm package ``azurite``), pinned by version and lockfile in ``azurite_npm/``.

``fetch()`` (``python -m profscope.testing.azurite_emulator fetch``, run by ``make
downloads`` before pytest starts) installs it with ``npm ci`` (every package at the
lockfile's version and integrity hash; no install scripts) into a cache folder that
persists between runs: ``$PROFSCOPE_TEST_CACHE/azurite-<version>`` (the Makefile and the
test suite set it to ``<repo>/.cache``, git-ignored), else
``$XDG_CACHE_HOME/profscope-testing/azurite-<version>``. :class:`Azurite`, what tests
start, never touches the network: without the install it raises
:class:`AzuriteUnavailable` saying to run ``make downloads``.

Azurite answers for the well-known development account ``devstoreaccount1`` with its
published key (``ACCOUNT_KEY``); a request signed with any other key is refused with
403 AuthorizationFailure, as Azure refuses a wrong key.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from profscope.testing.processes import ServerProcess, free_port

AZURITE_VERSION = "3.35.0"
PACKAGE = Path(__file__).with_name("azurite_npm")
ACCOUNT = "devstoreaccount1"
# Azurite's documented development key (the same in every Azurite and in Microsoft's docs)
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class AzuriteUnavailable(RuntimeError):
    """Azurite is not installed in the cache folder (``make downloads`` installs it)."""


def cache_dir() -> Path:
    root = os.environ.get("PROFSCOPE_TEST_CACHE")
    if root:
        return Path(root) / f"azurite-{AZURITE_VERSION}"
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg) / "profscope-testing" / f"azurite-{AZURITE_VERSION}"


def _blob_bin(root: Path) -> Path:
    return root / "node_modules" / ".bin" / "azurite-blob"


def fetch(root: Path | None = None) -> Path:
    """Install the pinned Azurite into the cache folder unless the same lockfile's install
    is there; answer the ``azurite-blob`` program. The only function here that uses the
    network: ``make downloads`` runs it, never a test."""
    root = root or cache_dir()
    lock = (PACKAGE / "package-lock.json").read_bytes()
    installed = root / "package-lock.json"
    if _blob_bin(root).is_file() and installed.is_file() and installed.read_bytes() == lock:
        return _blob_bin(root)
    npm = shutil.which("npm")
    if npm is None:
        raise AzuriteUnavailable("npm is not installed: `make downloads` installs Debian's nodejs and npm first")
    root.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(PACKAGE / name, root / name)
    done = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"],
                          cwd=root, capture_output=True, text=True, timeout=900)
    if done.returncode or not _blob_bin(root).is_file():
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        raise AzuriteUnavailable(f"npm ci of azurite {AZURITE_VERSION} failed: {' | '.join(tail)}")
    return _blob_bin(root)


def connection_string(endpoint: str, key: str = ACCOUNT_KEY) -> str:
    """The connection string of the development account at ``endpoint`` (what
    ``AZURE_STORAGE_CONNECTION_STRING`` holds for a client of Azurite)."""
    return (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={key};"
            f"BlobEndpoint={endpoint}/{ACCOUNT};")


class Azurite(ServerProcess):
    """``with Azurite(containers=("profiles",)) as az:`` Azurite's blob service at
    ``az.url`` (in memory), with those containers made; ``az.options()`` are adlfs options,
    ``az.env()`` the environment a ``profscope`` process reads the same from."""

    def __init__(self, *, containers: tuple[str, ...] = (), port: int | None = None):
        self.containers = tuple(containers)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def _popen(self) -> subprocess.Popen:
        program = _blob_bin(cache_dir())
        if not program.is_file():
            raise AzuriteUnavailable(f"Azurite {AZURITE_VERSION} is not at {program}: run `make downloads` "
                                     "(`make test` does; it is `python -m profscope.testing.azurite_emulator fetch`): "
                                     "tests never download it")
        # --skipApiVersionCheck: azure-storage-blob may be newer than the API versions this
        # Azurite knows; --disableTelemetry: it would otherwise try to reach Microsoft.
        return subprocess.Popen(
            [str(program), "--blobHost", "127.0.0.1", "--blobPort", str(self.port), "--inMemoryPersistence",
             "--skipApiVersionCheck", "--disableTelemetry", "--silent"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def _ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            if self._proc.poll() is not None:
                raise AzuriteUnavailable(f"azurite-blob exited: {self._proc.stderr.read().decode()[-500:]}") from None
            return False

    def _setup(self) -> None:
        fs = self.filesystem()
        for container in self.containers:
            fs.mkdir(container)

    def options(self, key: str = ACCOUNT_KEY) -> dict:
        return {"connection_string": connection_string(self.url, key)}

    def env(self, key: str = ACCOUNT_KEY) -> dict:
        return {"AZURE_STORAGE_CONNECTION_STRING": connection_string(self.url, key)}

    def filesystem(self, key: str = ACCOUNT_KEY):
        import adlfs

        return adlfs.AzureBlobFileSystem(skip_instance_cache=True, use_listings_cache=False, **self.options(key))


def main() -> None:
    """``python -m profscope.testing.azurite_emulator fetch`` installs Azurite;
    ``... serve CONTAINER`` serves with CONTAINER made, printing its connection string."""
    import argparse

    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch")
    serve = sub.add_parser("serve")
    serve.add_argument("container")
    args = p.parse_args()
    if args.command == "fetch":
        try:
            print(fetch())
        except AzuriteUnavailable as e:
            sys.exit(f"error: {e}")
        return
    with Azurite(containers=(args.container,)) as az:
        print(connection_string(az.url), flush=True)
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    main()
