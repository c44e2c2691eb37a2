"""XProf's ``op_profile`` tool: the device ops as a tree (program → category → op, or
category → op), each node with its device time, as XProf 2.24's
``ConvertOpStatsToOpProfile`` and ``OpProfileBuilder`` (xprof/convert/op_profile_builder.cc)
answer it: the ``op_profile.Profile`` proto's JSON (``byProgram``/``byProgramExcludeIdle``
or ``byCategory``/``byCategoryExcludeIdle``, ``deviceType``,
``aggDvfsTimeScaleMultiplier``).

The builder's rules, from the device op metrics (formats/xplane_op_metrics.py):

- the root sums every op's self time, and is then set to the device time
  (``TotalTimePs``: every device's span, or without idle the ops' time); a program node
  sums its ops' self times (``UpdateNodeMetrics``: no occurrences); category, dedup and op
  nodes add the ops up whole (``CombineOpMetrics``); ``IDLE`` is a leaf under the root
  (left out of the ``ExcludeIdle`` tree); ops named ``region*`` are left out;
- ops are grouped under their ``deduplicated_name`` (their own name without one); after
  sorting, a group of one op is that op, a group of several is named
  ``"<first> and its duplicate(s)"`` with the first op's XLA details
  (``FinalizeDeduplicatedNodes``; the root itself, when its only child is ``IDLE``,
  becomes that child, as in XProf);
- a TPU fusion's fused instructions (from the module's HLO) are its children, one
  occurrence and no time each (``InsertFusedInstructions``);
- children sorted by time, largest first (by FLOPs under a fusion op), every level kept
  above the categories and at most 100 children below (``op_profile_limit``);
  ``numChildren`` counts them before that cut.

Not reproduced (docs/xprof_compat.md): FLOPs, bytes and the utilisations derived from
them (XLA's ``HloCostAnalysis`` and the device's peak rates), written as 0; the op's
full HLO text (profscope's short form).
"""

from __future__ import annotations

__all__ = ["GROUPINGS", "op_profile"]

CHILDREN_PER_NODE = 100  # XProf's op_profile_limit (op_profile_processor.cc)
# group_by → (the tree's keys, the root's name, levels kept whole: SortAndPruneChildren)
GROUPINGS = {
    "program": ("byProgram", "by_program", 2),
    "category": ("byCategory", "by_category", 1),
}
IDLE = "IDLE"


def _number(x: float):
    # proto3 JSON writes a double with an integral value without its ".0"
    return int(x) if float(x).is_integer() else x


class _Node:
    __slots__ = ("name", "children", "xla", "time", "self_time", "occurrences", "num_children", "normalized")

    def __init__(self, name: str, xla: dict | None = None):
        self.name, self.xla = name, xla
        self.children: list[_Node] = []
        self.time = self.self_time = self.occurrences = self.num_children = self.normalized = 0

    def child(self, index: dict, key, name: str) -> _Node:
        node = index.get(key)
        if node is None:
            node = index[key] = _Node(name)
            self.children.append(node)
        return node

    def combine(self, op: dict) -> None:  # CombineOpMetrics
        self.occurrences += op["occurrences"]
        self.time += op["time_ps"]
        self.self_time += op["self_time_ps"]
        self.normalized += op["normalized_time_ps"]

    def update(self, op: dict) -> None:  # UpdateNodeMetrics
        self.time += op["self_time_ps"]
        self.self_time += op["self_time_ps"]
        self.normalized += op["normalized_time_ps"]


def _fused(op: dict, node: _Node) -> None:
    """InsertFusedInstructions: a TPU fusion's fused instructions under its node."""
    for child in op["children"]:
        kid = _Node(child["name"], _xla(child))
        kid.combine(child)
        node.children.append(kid)
        _fused(child, kid)


def _xla(op: dict) -> dict:
    """PopulateSymbolNode: the op's XLA details, in the proto's field order."""
    return {"op": "", "expression": op["long_name"], "provenance": op["provenance"], "category": op["category"],
            "computationPrimitiveSize": 0, "fingerprint": "0", "programId": str(op["hlo_module_id"]),
            "sourceInfo": {"fileName": op["source_file"], "lineNumber": op["source_line"],
                           "stackFrame": op["stack_frame"]},
            "xprofKernelMetadata": ""}


def _sort_and_prune(node: _Node, level: int) -> None:
    """SortAndPruneChildren: XProf calls it twice, so numChildren ends as the count kept."""
    node.num_children = len(node.children)
    for child in node.children:
        _sort_and_prune(child, level - 1)
    keep = len(node.children) if level > 0 else CHILDREN_PER_NODE
    if len(node.children) > 1:
        # a fusion op's children sort by FLOPs, which are all 0 here (see the docstring):
        # the order of its fused instructions is then kept
        if node.xla is None or "fusion" not in node.xla["category"]:
            node.children.sort(key=lambda n: -n.time)
        node.children = node.children[:keep]


def _finalize(node: _Node) -> _Node:
    """FinalizeNodeRecursive: a node without XLA details whose children all have them is a
    dedup group: one child replaces it, several name it after the first."""
    group = bool(node.children) and node.xla is None and all(c.xla is not None for c in node.children)
    if not group:
        node.children = [_finalize(c) for c in node.children]
        return node
    if len(node.children) == 1:
        return node.children[0]
    top = node.children[0].xla
    node.name = f"{node.children[0].name} and its duplicate(s)"
    # CopySymbolDetailsToDeduplicatedNode: a fusion group (tsl IsFusion) claims no
    # provenance; another copies it and the layout, which is then set, if empty, and printed
    fusion = "fusion" in top["category"]
    node.xla = {}
    for k, v in top.items():
        node.xla[k] = "" if (fusion and k == "provenance") else v
        if k == "category" and not fusion:
            node.xla["layout"] = {"dimensions": []}
    return node


def _json(node: _Node, total_time_ps: int, is_root: bool) -> dict:
    metrics = {"flops": 0, "bandwidthUtils": [0, 0, 0], "rawTime": _number(node.time), "rawFlops": 0,
               "rawBytesAccessedArray": [0, 0, 0], "occurrences": node.occurrences,
               "avgTimePs": _number(node.time / node.occurrences) if node.occurrences else 0,
               "bf16Flops": 0, "uncappedFlops": 0, "normalizedTimePs": _number(node.normalized)}
    out: dict = {"name": node.name, "metrics": metrics,
                 "children": [_json(c, total_time_ps, False) for c in node.children]}
    if node.xla is not None:
        out["xla"] = node.xla
    out["numChildren"] = node.num_children
    return out


def _tree(ops: list[dict], idle_ps: int | None, program_names: dict[int, str], group_by: str,
          total_time_ps: int) -> dict:
    _key, root_name, level = GROUPINGS[group_by]
    root = _Node(root_name)
    programs: dict = {}
    categories: dict = {}
    dedups: dict = {}
    listed = list(ops)
    if idle_ps is not None:
        listed.append({"hlo_module_id": 0, "name": IDLE, "category": IDLE, "provenance": "", "long_name": "",
                       "source_file": "", "source_line": 0, "stack_frame": "", "deduplicated_name": "",
                       "occurrences": 0, "time_ps": idle_ps, "self_time_ps": idle_ps, "normalized_time_ps": 0,
                       "children": []})
    for op in listed:
        if op["name"].startswith("region"):
            continue  # "Don't add ops that cannot be symbolized"
        root.update(op)
        if op["name"] == IDLE and op["category"] == IDLE:
            leaf = _Node(IDLE, _xla(op))
            root.children.append(leaf)
            leaf.combine(op)
            continue
        parent = root
        if group_by == "program":
            pid = op["hlo_module_id"]
            name = program_names.get(pid)
            parent = root.child(programs, pid, f"{name}({pid})" if name is not None else "main")
            parent.update(op)
        category = parent.child(categories, (id(parent), op["category"]), op["category"])
        dedup_name = op["deduplicated_name"] or op["name"]
        dedup = category.child(dedups, (id(category), dedup_name), dedup_name)
        leaf = _Node(op["name"], _xla(op))
        dedup.children.append(leaf)
        _fused(op, leaf)
        for node in (category, dedup, leaf):
            node.combine(op)
    root.time = total_time_ps  # Finalize: "reset the time_ps for root node"
    _sort_and_prune(root, level)
    _sort_and_prune(root, level)
    return _json(_finalize(root), total_time_ps, True)


def op_profile(ops: list[dict], *, total_time_ps: int, total_op_time_ps: int, device_type: str,
               program_names: dict[int, str], has_devices: bool, group_by: str = "program",
               normalized_total_op_time_ps: float = 0.0) -> dict:
    """XProf's op_profile JSON. ``ops``: dicts with the keys of
    formats.xplane_op_metrics.OpMetric, in the database's order; ``has_devices``: whether
    any device plane was read (XProf's database then holds an IDLE op, even of 0 ps)."""
    key, _root, _level = GROUPINGS[group_by]
    idle = max(total_time_ps - total_op_time_ps, 0) if has_devices else None
    return {
        key: _tree(ops, idle, program_names, group_by, total_time_ps),
        "deviceType": device_type,
        f"{key}ExcludeIdle": _tree(ops, None, program_names, group_by, total_op_time_ps),
        # SafeDivide(normalized_total_op_time_ps, total_op_time_ps): 0 on GPU (no DVFS data)
        "aggDvfsTimeScaleMultiplier": _number(normalized_total_op_time_ps / total_op_time_ps)
        if total_op_time_ps else 0,
    }
