"""One log directory as the server sees it: runs, hosts, modules and tool results,
with everything expensive computed once and kept in the disk cache."""

from __future__ import annotations

import os
from pathlib import Path

from profscope.cache.store import DiskCache, cache_key
from profscope.errors import BadRequest, NotFound
from profscope.formats import xplane
from profscope.formats.kinds import FileKind, classify
from profscope.model.catalog import Run, RunKind, discover
from profscope.storage import LogDir, safe_relpath
from profscope.tools import registry
from profscope.tools.registry import Tool

MODULE_LIST_VERSION = 1


class Workspace:
    def __init__(self, logdir: LogDir, cache: DiskCache):
        if logdir.is_local and _inside(cache.root, Path(logdir.root)):
            # Log directories may be read-only or shared; we never write into them.
            raise BadRequest(
                f"the cache folder {cache.root} is inside the log directory {logdir.url}; "
                "choose another with --cache-dir"
            )
        self.logdir = logdir
        self.cache = cache

    # -- runs ----------------------------------------------------------------------------

    def runs(self) -> list[Run]:
        return discover(self.logdir.listing())

    def runs_at(self, session_path: str | None = None, run_path: str | None = None) -> list[Run]:
        """The runs XProf's ``session_path`` / ``run_path`` parameters select.

        XProf reads any folder these name; we accept them only inside the log directory
        (relative to it, or absolute below it) and name runs as XProf does: a session
        folder holding ``*.xplane.pb`` is a run named after the folder; ``run_path``
        selects each such session folder directly below it.
        """
        if session_path:
            folders = [self._relative(session_path, "session_path")]
        elif run_path:
            base = self._relative(run_path, "run_path")
            listing = self.logdir.listing()
            prefix = base + "/" if base else ""
            folders = sorted(d for d in listing.dirs if d.startswith(prefix) and "/" not in d[len(prefix) :])
        else:
            return self.runs()
        files = self.logdir.files()
        runs = []
        for folder in folders:
            own = [f for f in files.values() if f.parent == folder]
            if any(classify(f.name) is FileKind.XPLANE for f in own):
                name = folder.rsplit("/", 1)[-1] or self.logdir.url
                runs.append(Run(name, RunKind.PROFILE, folder, sorted(own, key=lambda f: f.path)))
        return sorted(runs, key=lambda r: r.name, reverse=True)

    def _relative(self, path: str, param: str) -> str:
        for prefix in (self.logdir.url.rstrip("/") + "/", self.logdir.root.rstrip("/") + "/"):
            if path.startswith(prefix):
                path = path[len(prefix) :]
                break
        else:
            if path.rstrip("/") in (self.logdir.url.rstrip("/"), self.logdir.root.rstrip("/")):
                path = ""
        try:
            rel = safe_relpath(path)
            self.logdir.full_path(rel)  # on local disks: refuses symlinks that lead out
            return rel
        except BadRequest as e:
            raise BadRequest(f"{param}: {e.message} (only folders inside {self.logdir.url} are served)") from e

    def run(self, name: str | None, *, session_path: str | None = None, run_path: str | None = None) -> Run:
        if not name and not session_path:
            raise BadRequest("missing parameter 'run'")
        name = name.rstrip("/") if name else name  # XProf strips it too (_run_dir)
        candidates = self.runs_at(session_path, run_path)
        if session_path and not name and candidates:
            return candidates[0]
        for run in candidates:
            if run.name == name:
                return run
        raise NotFound(f"no run named {name!r} in {self.logdir.url}")

    def hosts(self, run: Run) -> list[str]:
        return run.hosts

    def tools(self, run: Run) -> list[Tool]:
        return registry.for_run(run)

    # -- modules -------------------------------------------------------------------------

    def modules(self, run: Run) -> list[str]:
        """The HLO modules of a run, as XProf names them (``<name>(<program id>)``), sorted."""
        names: set[str] = set()
        if run.kind is RunKind.XLA_DUMP:
            names.update(m.display_name for m in run.dump_modules())
        for info in run.files_of(FileKind.XPLANE):
            key = cache_key("module_list", MODULE_LIST_VERSION, self.logdir.url, info.identity())

            def compute(progress, info=info):
                progress.update(message=f"reading compiled modules of {info.path}")
                with self.logdir.open(info.path) as f:
                    return [m.display_name for m in xplane.hlo_modules(f, self.logdir.display_path(info.path))]

            names.update(self.cache.get_or_compute_json(key, f"module list of {info.path}", compute))
        return sorted(names)

    # -- tool data -----------------------------------------------------------------------

    def tool(self, name: str | None, run: Run) -> Tool:
        if not name:  # XProf: 404 "No Data"
            raise NotFound("missing parameter 'tag' (the tool name)")
        tool = registry.get(name)
        if tool is None:
            known = ", ".join(t.name for t in registry.TOOLS)
            raise NotFound(f"unknown tool {name!r}; profscope has: {known}")
        if not tool.applies_to(run):
            raise NotFound(f"tool {tool.name!r} does not apply to run {run.name!r} ({run.kind.value})")
        if not tool.implemented:
            raise NotFound(f"tool {tool.name!r} is not available in this version of profscope yet")
        return tool


def _inside(path: Path, root: Path) -> bool:
    path, root = Path(os.path.realpath(path)), Path(os.path.realpath(root))
    return path == root or root in path.parents
