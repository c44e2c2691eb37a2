"""Generated protobuf modules for the wire formats profscope reads.

``xplane_pb2``: XSpace profiles (``*.xplane.pb``). ``hlo_pb2``: a subset of
``xla.HloProto`` (XLA dumps' ``*.hlo.pb``, the HLO protos a profile embeds) and
``MemoryUsageReportProto``. Both are generated from ``protos/*.proto`` by
``scripts/gen_protos.py`` and committed; do not edit them. See docs/protos.md.
"""
